"""The verl part of `rlsweep gpu-check` (workflow/gpu_check.py): the same stages on the verl engine, as one generated
sweep that Snakemake runs the way it runs any sweep: data, verl SFT (torchrun), verl RL (Ray, FSDP2, vLLM rollouts)
with each update rule, each mixed-policy method from the base model and FAST-GRPO's three parts, and a vLLM
evaluation of every final checkpoint. One job at a time; each starts its own Ray and vLLM, as in a sweep.

Its table rows come from the sweep's own tables: pass/fail and the error from `runs`, seconds per step from
`train_steps`; peak GPU memory is the device's memory in use (every process: Ray's workers, vLLM) sampled once a
second while the job ran.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from workflow.gpu_check import MIXED_METHODS, Outcome, eval_note, summarise, train_rows

REPO = Path(__file__).resolve().parent.parent
SNAKEFILE = REPO / "Snakefile"
SWEEP_NAME = "gpu-check-verl"
# name, rl.update, rl.mix, sft.enabled, FAST-GRPO's parts: the checks of the local part, on verl
RUNS = ([(rule, rule, "none", True, False) for rule in ("grpo", "sfpo", "gxpo")]
        + [(mix, "grpo", mix, False, False) for mix in MIXED_METHODS]
        + [("fast_grpo", "grpo", "none", True, True)])


def check_name(cfg) -> str:
    """A run of the generated sweep as the table names it (RUNS)."""
    if cfg.rl.mix != "none":
        return cfg.rl.mix
    return "fast_grpo" if cfg.rl.fast_grpo_parts else cfg.rl.update


def missing() -> list[str]:
    """What the verl part needs and this environment lacks."""
    return [m for m in ("verl", "vllm", "ray") if importlib.util.find_spec(m) is None]


def sweep(model: str | None, cuda: bool, steps: int, names: list[str] | None = None) -> dict[str, Any]:
    """The generated sweep: sweeps/verl_cpu.yaml's tiny chain, with the method axis of the local checks."""
    runs = [r for r in RUNS if not names or r[0] in names]
    fast = [r[4] for r in runs]
    return {
        "name": SWEEP_NAME,
        "description": "rlsweep gpu-check: every stage and method on the verl engine for a few steps",
        "base": {
            "engine": {"name": "verl", "verl": {
                "model_path": model or "rlsweep:tiny", "device": "cuda" if cuda else "cpu",
                "max_prompt_length": 192, "timeout_min": 15, "gpu_memory_utilization": 0.5}},
            "task": {"name": "datasets", "template": "boxed",
                     "datasets": [{"name": "gsm8k_train", "path": str(REPO / "sweeps/data/tiny_gsm8k_train.jsonl")}]},
            "sft": {"steps": 8, "batch_size": 8, "micro_batch_size": 4, "lr": 1.0e-4, "schedule": "constant",
                    "warmup_ratio": 0.0, "checkpoint_every": 8},
            "rl": {"steps": steps, "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 40, "lr": 1.0e-5,
                   "checkpoint_every": steps, "micro_batch_size": 8,
                   "sfpo": {"K": 3, "alpha": 0.8}, "gxpo": {"K": 5, "alpha": 0.5}},
            "eval": {"benchmarks": ["gsm8k"], "paths": {"gsm8k": str(REPO / "tests/fixtures/benchmarks/gsm8k.jsonl")},
                     "k": 2, "n_problems": 8, "max_new_tokens": 40, "backend": "vllm", "bootstrap": 10},
        },
        "zip": {
            "rl.update": [r[1] for r in runs], "rl.mix": [r[2] for r in runs], "sft.enabled": [r[3] for r in runs],
            "rl.thinking_reward.enabled": fast, "rl.dynamic_kl.enabled": fast, "rl.slow2fast.enabled": fast,
        },
        "resources": {"sft": {"threads": 2}, "rl": {"threads": 2}, "eval": {"threads": 2}},
    }


class MemorySampler:
    """The GPU's memory in use (all processes), sampled once a second in a thread."""

    def __init__(self, cuda: bool):
        self.cuda, self.samples = cuda, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import torch
        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.samples.append((dt.datetime.now(dt.timezone.utc), total - free))
            self._stop.wait(1.0)

    def __enter__(self):
        if self.cuda:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.cuda:
            self._thread.join()

    def peak(self, start, end) -> int | None:
        inside = [used for t, used in self.samples if start <= t <= (end or t)]
        return max(inside) if inside else None


def runs_rows(root: Path) -> list[dict[str, Any]]:
    from workflow.results.catalog import query
    return query("SELECT * FROM runs", root).to_pylist()


def run_verl(root: Path, cuda: bool, steps: int, model: str | None, only: list[str] | None,
             say: Callable[[str], None] = print, required: bool = False) -> list[Outcome]:
    lacking = missing()
    if lacking:
        why = f"not installed here: {', '.join(lacking)} (pip install -e '.[verl,vllm]')"
        if required:
            return [Outcome("verl", "verl", False, why)]
        say(f"gpu-check: the verl part is skipped: {why}")
        return []
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.loader import dump_yaml

    names = [n for n in (only or []) if n in {r[0] for r in RUNS}] or None
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{SWEEP_NAME}.yaml"
    path.write_text("# rlsweep gpu-check's verl part (workflow/gpu_check_verl.py)\n"
                    + dump_yaml(sweep(model, cuda, steps, names)))
    planned = load_sweep(path)
    log = root / "snakemake.log"
    say(f"gpu-check: verl part: {len(planned.runs)} RL runs + SFT + evaluations on verl "
        f"({'GPU' if cuda else 'CPU'}), one job at a time; log {log}")
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(root), "--cores", "1",
            "--keep-going", "--config", f"sweep={path}", f"results={root / 'results'}"]
    t0 = time.perf_counter()
    with MemorySampler(cuda) as memory, open(log, "w") as out:
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=root,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
    say(f"gpu-check: verl part: snakemake exited {rc} after {time.perf_counter() - t0:.0f} s")
    results = root / "results"
    rows = runs_rows(results) if (results / "_store").exists() else []
    by_id: dict[str, list[dict]] = {}
    for r in rows:
        by_id.setdefault(r["run_id"], []).append(r)
    name_of = {run.run_id: check_name(run.config) for run in planned.runs}
    jobs = [("sft", "sft", sft_id) for sft_id in planned.jobs("sft")]
    jobs += [(name_of[run.run_id], "rl", run.run_id) for run in planned.runs]
    jobs += [(f"eval {name_of[run.run_id]}", "eval", run.eval_id) for run in planned.runs]
    rl_of_eval = {run.eval_id: run.run_id for run in planned.runs}
    outcomes = []
    for name, stage, stage_id in jobs:
        mine = [r for r in by_id.get(stage_id, []) if r["stage"] == stage]
        o = Outcome(name, "verl", passed=None, error="not run (snakemake stopped before it; see the log)")
        if mine:
            last = max(mine, key=lambda r: r["started_at"])
            o.passed = last["status"] == "completed"
            o.error = None if o.passed else (last.get("error") or last["status"]).splitlines()[0]
            o.wall_s = last.get("wall_s") or 0.0
            o.peak_bytes = memory.peak(last["started_at"], last.get("finished_at"))
            if stage != "eval":
                summarise(o, train_rows(results, stage, stage_id))
            elif o.passed:
                o.note = eval_note(results, rl_of_eval[stage_id])
        outcomes.append(o)
    if rc != 0 and all(o.passed for o in outcomes):  # snakemake failed outside any stage job
        tail = log.read_text().strip().splitlines()[-1:] or [""]
        outcomes.append(Outcome("verl sweep", "verl", False, f"snakemake exited {rc}: {tail[0]}"))
    return outcomes

