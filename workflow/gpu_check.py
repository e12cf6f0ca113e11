"""`rlsweep gpu-check`: before a sweep spends GPU-hours, run every stage and method for a few steps on the GPU of
this node and print what ran, whether it passed (the error's first line when not), seconds per step and peak GPU
memory. Exit 0: all passed; 1: something failed; 3 (EXIT_NO_GPU): torch sees no GPU here (`--allow-cpu` runs the
same checks on the CPU, which proves the wiring, not the devices).

The local engine's part (in this process, one check after another, each a real stage job through
`launch.run_stage`, integrity preflight included):

    sft            SFT with micro-batches (the global token-mean accumulation and its preflight)
    grpo/sfpo/gxpo each update rule from that SFT checkpoint (their extra passes and GXPO's extrapolation)
    grpo+lora+kl   GRPO on LoRA adapters with a KL term, from the random-init model (the reference-model path)
    luffy ... prefix_rft
                   the five mixed-policy methods from the random-init model, as sweeps/mixed_policy.yaml's weak regime runs them
    fast_grpo      FAST-GRPO's three parts together, from the SFT checkpoint
    segments       GXPO's run again as a chain of two segment jobs (workflow/segments.py): its weights and
                   train_steps must be the one job's, bit for bit (when they are not, the one job runs a second time
                   to tell a resume that lost state from GPU kernels that differ run to run)
    eval           the local backend's sampling and scoring of GRPO's final checkpoint

The verl part (`--engine verl` or `all`, where verl, vLLM and Ray are installed): the same stages as one generated
sweep on the verl engine (verl SFT, the update rules, the mixed-policy methods, FAST-GRPO, vLLM evaluation),
run by Snakemake; each job starts its own Ray and vLLM, as it does in a sweep (workflow/gpu_check_verl.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

EXIT_NO_GPU = 3

# the demo's model (109k parameters) on the demo task: what a GPU must run before a sweep trusts it with a bigger one
MODEL = {"n_layers": 2, "hidden": 64, "n_heads": 4}
# SFT long enough that some RL groups get mixed rewards: the update rules then see real gradients, and GXPO
# extrapolates real coordinates (with every reward equal its ratio has no active coordinate and half its code is idle)
SFT = {"batch_size": 64, "micro_batch_size": 16, "lr": 3.0e-3, "schedule": "cosine"}
RL = {"prompts_per_step": 8, "group_size": 4, "max_new_tokens": 32, "lr": 3.0e-5, "micro_batch_size": 16,
      "clip_high": 0.28}
# (lr 1e-3: a random-init model's weights move within these few steps; sweeps/mixed_policy.yaml trains at 3e-4)
MIXED = {"lr": 1.0e-3, "std_norm": False, "relift": {"buffer_size": 2}}
MIXED_METHODS = ("luffy", "srft", "hpt", "relift", "prefix_rft")


@dataclass(frozen=True)
class Check:
    """One stage job of the check: its run config (RunConfig fields) and the check whose output it starts from."""

    name: str
    stage: str  # sft | rl | eval | chain (the `after` check's RL run again as segment jobs)
    config: dict[str, Any]
    after: str | None = None  # sft: RL from that SFT checkpoint; an RL check: eval of its final checkpoint
    what: str = ""


@dataclass
class Outcome:
    """What one check did: the table's row."""

    name: str
    engine: str
    passed: bool | None  # None: not run (what it starts from failed)
    error: str | None = None
    steps: int = 0
    s_per_step: float | None = None  # median wall seconds of a training step
    passes: float | None = None  # backward passes per step (SFPO K + 1, GXPO 3 while active)
    peak_bytes: int | None = None  # peak GPU memory the check allocated
    wall_s: float = 0.0
    note: str = ""
    done: Path | None = field(default=None, repr=False)

    def as_row(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "done"}


def local_checks(rl_steps: int = 4, sft_steps: int = 300, eval_problems: int = 64) -> list[Check]:
    """The local engine's checks, in the order they run (an RL check after the SFT it starts from)."""
    sft = {**SFT, "steps": sft_steps, "checkpoint_every": sft_steps}
    rl = {**RL, "steps": rl_steps, "checkpoint_every": rl_steps}
    task = {"n_heldout": eval_problems, "two_step_fraction": 1.0}
    base = {"model": MODEL, "task": task, "sft": sft}
    scratch = {**base, "sft": {**sft, "enabled": False}}
    checks = [Check("sft", "sft", base, what="SFT, micro-batched (token-mean accumulation + preflight)")]
    for rule, settings in (("grpo", {}), ("sfpo", {"sfpo": {"K": 3, "alpha": 0.8}}),
                           ("gxpo", {"gxpo": {"K": 5, "alpha": 0.5}})):
        checks.append(Check(rule, "rl", {**base, "rl": {**rl, "update": rule, **settings}}, after="sft",
                            what=f"RL, update rule {rule}, from the SFT checkpoint"))
    stateful = checks[-1]  # the last rule, GXPO: the most state a resume must carry (its gate's window)
    checks.append(Check("grpo+lora+kl", "rl", {**scratch, "model": {**MODEL, "lora": {"rank": 4}},
                                               "rl": {**rl, "kl_coef": 0.01}},
                        what="GRPO on LoRA adapters with a KL term (reference model), no SFT"))
    for mix in MIXED_METHODS:
        checks.append(Check(mix, "rl", {**scratch, "rl": {**rl, **MIXED, "mix": mix}},
                            what=f"mixed-policy {mix} from the random-init model"))
    checks.append(Check("fast_grpo", "rl", {**base, "rl": {**rl, "thinking_reward": {"enabled": True},
                                                          "dynamic_kl": {"enabled": True},
                                                          "slow2fast": {"enabled": True}}},
                        after="sft", what="FAST-GRPO: thinking reward + dynamic KL + Slow2Fast"))
    if rl_steps >= 2:  # a chain needs a step on each side of its first segment's end
        checks.append(Check("segments", "chain", stateful.config, after=stateful.name,
                            what=f"{stateful.name} as a chain of two segment jobs, compared with the one job"))
    checks.append(Check("eval", "eval", {**base, "rl": {**rl, "update": "grpo"},
                                         "eval": {"k": 4, "max_new_tokens": 32, "bootstrap": 10}},
                        after="grpo", what="evaluation (local backend) of GRPO's final checkpoint"))
    return checks


def select(checks: list[Check], only: list[str] | None) -> list[Check]:
    """The checks named in `only` (None: all), with the ones they start from."""
    if not only:
        return checks
    by_name = {c.name: c for c in checks}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        from workflow.errors import UserError
        raise UserError(f"--only: unknown check {', '.join(map(repr, unknown))}; checks: {', '.join(by_name)}")
    wanted: set[str] = set()
    for name in only:
        while name is not None and name not in wanted:
            wanted.add(name)
            name = by_name[name].after
    return [c for c in checks if c.name in wanted]


class Memory:
    """Peak GPU memory of one check (torch's allocator: this process's tensors), None on the CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def start(self) -> None:
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int | None:
        if not self.cuda:
            return None
        import torch
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())


def first_line(e: BaseException) -> str:
    """The error as the table shows it: its type and the first line of its message, and where it was raised in
    rlsweep's own code (the frame to open first)."""
    errors = getattr(e, "errors", None)
    if callable(errors) and type(e).__name__ == "ValidationError":  # pydantic's first line only counts the errors
        first = errors()[0]
        text = [f"{'.'.join(map(str, first['loc']))}: {first['msg']}"]
    else:
        text = str(e).strip().splitlines()
    where = next((f"{Path(f.filename).relative_to(Path(__file__).parent.parent)}:{f.lineno}"
                  for f in reversed(traceback.extract_tb(e.__traceback__))
                  if Path(f.filename).resolve().is_relative_to(Path(__file__).resolve().parent)), None)
    return f"{type(e).__name__}: {text[0] if text else ''}" + (f" ({where})" if where else "")


def train_rows(root: Path, stage: str, stage_id: str) -> list[dict[str, Any]]:
    from workflow.results.rows import stage_rows
    found = stage_rows(root, "train_steps", stage, stage_id)
    return [] if found is None else sorted(found.to_pylist(), key=lambda r: r["step"])


def summarise(outcome: Outcome, rows: list[dict[str, Any]]) -> None:
    """Steps, seconds per step, passes per step from the stage's train_steps rows; a non-finite loss fails it."""
    outcome.steps = len(rows)
    if not rows:
        return
    outcome.s_per_step = statistics.median(r["wall_s"] for r in rows if r.get("wall_s") is not None)
    passes = [r["backward_passes"] for r in rows if r.get("backward_passes") is not None]
    outcome.passes = statistics.mean(passes) if passes else None
    bad = [r["step"] for r in rows if r.get("loss") is not None and not math.isfinite(r["loss"])]
    if bad:
        outcome.passed, outcome.error = False, f"non-finite loss at step(s) {bad}"
    inactive = [r["gxpo_inactive_frac"] for r in rows if r.get("gxpo_inactive_frac") is not None]
    if inactive:
        outcome.note = f"GXPO inactive fraction {statistics.mean(inactive):.2f}"
        if min(inactive) >= 1.0:
            outcome.note += " (no gradient: every group's rewards equal; its extrapolation was not exercised)"


def run_local(checks: list[Check], root: Path, cuda: bool, say: Callable[[str], None] = print) -> list[Outcome]:
    """Each check as a stage job of the sweep `gpu-check` under `root`, in order; a check whose start failed is
    reported as not run."""
    from workflow.config import RunConfig
    from workflow.launch import run_stage
    from workflow.stages import stage_config
    from workflow.identity import stable_id
    memory = Memory(cuda)
    by_name = {c.name: c for c in checks}
    done: dict[str, Outcome] = {}
    out: list[Outcome] = []
    for check in checks:
        outcome = Outcome(check.name, "local", passed=True)
        start = done.get(check.after) if check.after else None
        if check.after and (start is None or not start.passed):
            outcome.passed, outcome.error = None, f"not run: {check.after} did not pass"
        else:
            say(f"gpu-check: {check.name}: {check.what}")
            memory.start()
            t0 = time.perf_counter()
            try:
                cfg = RunConfig.model_validate(check.config)
                if check.stage == "sft":
                    scfg = stage_config(cfg, "sft")
                    outcome.done = run_stage("sft", "gpu-check", stable_id(scfg), scfg, results_root=root)
                    summarise(outcome, train_rows(root, "sft", stable_id(scfg)))
                elif check.stage == "rl":
                    rcfg = rl_stage_config(cfg, start)
                    outcome.done = run_stage("rl", "gpu-check", stable_id(rcfg), rcfg, results_root=root,
                                             init=start.done if start is not None else None)
                    summarise(outcome, train_rows(root, "rl", stable_id(rcfg)))
                elif check.stage == "chain":
                    init = done.get(by_name[check.after].after) if by_name[check.after].after else None
                    run_chain(outcome, rl_stage_config(cfg, init), init, start, root)
                else:
                    run_id = json.loads(start.done.read_text())["id"]
                    ecfg = stage_config(cfg, "eval", run_id=run_id)
                    outcome.done = run_stage("eval", "gpu-check", stable_id(ecfg), ecfg, results_root=root,
                                             checkpoint_from=start.done)
                    outcome.note = eval_note(root, run_id)
            except Exception as e:  # noqa: BLE001 - every check runs and reports; the exit code says it failed
                outcome.passed, outcome.error = False, first_line(e)
            outcome.wall_s = time.perf_counter() - t0
            outcome.peak_bytes = memory.peak()
        done[check.name] = outcome
        out.append(outcome)
        say(f"gpu-check: {check.name}: " + ("passed" if outcome.passed else outcome.error or "failed"))
    return out


def rl_stage_config(cfg, start: Outcome | None) -> dict:
    """An RL check's stage config: from the SFT check `start` when it has one."""
    from workflow.stages import stage_config
    return stage_config(cfg, "rl", sft_id=json.loads(start.done.read_text())["id"] if start is not None else None)


TIMING = ("wall_s", "gen_s", "update_s")  # train_steps columns that differ run to run however exact the training


def same_training(root_a: Path, root_b: Path, run_id: str) -> tuple[bool, str]:
    """Whether two roots' RL run `run_id` trained the same: final weights bit for bit and train_steps rows equal
    (timing aside, each step once); else where they first differ."""
    import torch
    from safetensors.torch import load_file
    from workflow.layout import done_path

    def weights(root: Path) -> dict:
        d = json.loads(done_path(root, "rl", run_id).read_text())
        return load_file(done_path(root, "rl", run_id).parent / d["checkpoint"] / "model.safetensors")

    def rows(root: Path) -> list[dict]:
        return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items() if k not in TIMING}
                for r in train_rows(root, "rl", run_id)]

    a, b = rows(root_a), rows(root_b)
    if [r["step"] for r in b] != [r["step"] for r in a]:
        return False, f"steps {[r['step'] for r in b]} where one job trained {[r['step'] for r in a]}"
    for ra, rb in zip(a, b):
        if ra != rb:
            col = next(k for k in ra if ra[k] != rb.get(k))
            return False, f"train_steps differ from step {ra['step']} ({col}: {rb.get(col)!r} vs {ra[col]!r})"
    wa, wb = weights(root_a), weights(root_b)
    if wa.keys() != wb.keys():
        return False, "the final checkpoints hold different tensors"
    diff = max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)
    return diff == 0.0, "" if diff == 0.0 else f"final weights differ (max |dw| {diff:.2e})"


def run_chain(outcome: Outcome, rcfg: dict, init: Outcome | None, twin: Outcome, root: Path) -> None:
    """`twin`'s RL run trained again under root/chain as two segment jobs (the first ends half way, the second
    resumes from its checkpoint: optimizer, scheduler, gate and RNG state): it must train what the one job did. When
    it does not, the one job runs again under root/again: if that differs too, this GPU's kernels are not run-to-run
    deterministic and the chain cannot be held to bits here (reported, passed); if it does not, the resume lost state
    (failed)."""
    from workflow.launch import run_stage
    from workflow.identity import stable_id
    steps, run_id = rcfg["rl"]["steps"], stable_id(rcfg)
    kw = {"results_root": root / "chain", "init": init.done if init is not None else None}
    first = run_stage("rl", "gpu-check", run_id, rcfg, until=steps // 2, **kw)
    outcome.done = run_stage("rl", "gpu-check", run_id, rcfg, after=first, **kw)
    summarise(outcome, train_rows(root / "chain", "rl", run_id))
    same, why = same_training(root, root / "chain", run_id)
    if same:
        outcome.note = f"2 segment jobs (steps 1-{steps // 2}, {steps // 2 + 1}-{steps}) == one job, bit for bit"
        return
    run_stage("rl", "gpu-check", run_id, rcfg, results_root=root / "again", init=kw["init"])
    repeat_same, repeat_why = same_training(root, root / "again", run_id)
    if repeat_same:
        outcome.passed, outcome.error = False, f"the chain lost state: {why} (the one job run twice is identical)"
    else:
        outcome.note = (f"not bit for bit on this device: the one job run twice differs too ({repeat_why}); "
                        f"the chain: {why}")


def eval_note(root: Path, run_id: str) -> str:
    from workflow.results.catalog import query, sql_str
    rows = query(f"SELECT benchmark, k, avg_at_k FROM eval_scores WHERE run_id = {sql_str(run_id)}", root).to_pylist()
    best: dict[str, dict] = {}  # per benchmark its row of the largest k (eval_scores holds k = 1, 2, 4, ...)
    for r in rows:
        if r["k"] >= best.get(r["benchmark"], {"k": -1})["k"]:
            best[r["benchmark"]] = r
    return ", ".join(f"{b} avg@{r['k']} {r['avg_at_k']:.3f}" for b, r in sorted(best.items()))


def table(outcomes: list[Outcome], title: str):
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for col, justify in (("check", "left"), ("engine", "left"), ("result", "left"), ("steps", "right"),
                         ("s/step", "right"), ("passes/step", "right"), ("peak GPU MiB", "right"),
                         ("wall s", "right"), ("error / note", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    for o in outcomes:
        result = "[green]pass[/]" if o.passed else "[red]FAIL[/]" if o.passed is False else "[yellow]not run[/]"
        t.add_row(o.name, o.engine, result, str(o.steps or ""),
                  f"{o.s_per_step:.3f}" if o.s_per_step is not None else "",
                  f"{o.passes:g}" if o.passes is not None else "",
                  f"{o.peak_bytes / 2**20:.0f}" if o.peak_bytes is not None else "",
                  f"{o.wall_s:.1f}", o.error or o.note)
    return t


def markdown(outcomes: list[Outcome]) -> str:
    """The table as Markdown (docs/gpu-check.md keeps a run's)."""
    lines = ["| check | engine | result | s/step | passes/step | peak GPU MiB | error / note |",
             "|---|---|---|---:|---:|---:|---|"]
    for o in outcomes:
        lines.append(f"| {o.name} | {o.engine} | {'pass' if o.passed else 'FAIL' if o.passed is False else 'not run'} "
                     f"| {f'{o.s_per_step:.3f}' if o.s_per_step is not None else ''} "
                     f"| {f'{o.passes:g}' if o.passes is not None else ''} "
                     f"| {f'{o.peak_bytes / 2**20:.0f}' if o.peak_bytes is not None else ''} "
                     f"| {(o.error or o.note).replace('|', '/')} |")
    return "\n".join(lines)


def device_line() -> tuple[bool, str]:
    """Whether torch sees a GPU, and a line naming what runs the checks."""
    import torch
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        return True, (f"{torch.cuda.get_device_name(0)} ({p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, "
                      f"CUDA {torch.version.cuda}")
    return False, f"no GPU (torch {torch.__version__} sees none)"


def workdir(keep: str | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        return path, None
    tmp = tempfile.TemporaryDirectory(prefix="rlsweep-gpu-check-")
    return Path(tmp.name), tmp
