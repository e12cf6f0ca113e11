"""`rlsweep watch --once` beside a running `snakemake`: a run mid-way shows its stage, step and rate from its live
file, and the header the sweep's ETA; a job made to fail shows its reason and the log that holds its traceback, and the command exits 1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from helpers import SNAKEMAKE, cli, write_sweep
from workflow.layout import JOB_LOG, stage_dir
from workflow.live import read_live
from workflow.sweep.expand import load_sweep

pytestmark = pytest.mark.slow

LONG_RL = """
base:
  model: {n_layers: 1, hidden: 32, n_heads: 2}
  task: {n_heldout: 16}
  sft: {steps: 4, batch_size: 32, checkpoint_every: 4}
  rl: {steps: 400, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 400}
  eval: {k: 2, max_new_tokens: 16}
"""


def test_a_run_mid_way_shows_its_step_and_rate(tmp_path):
    sweep_file = write_sweep(tmp_path / "wa.yaml", "wa", base=LONG_RL)
    run = load_sweep(sweep_file).runs[0]
    root = tmp_path / "results"
    proc = subprocess.Popen([*SNAKEMAKE, "-d", str(tmp_path / "work"), "--config", f"sweep={sweep_file}",
                             f"results={root}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while (found := read_live(stage_dir(root, "rl", run.run_id))) is None or found["step"] < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the RL job never got to step 3"
            time.sleep(0.2)
        out = cli("watch", str(sweep_file), "--results", str(root), "--once")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("base "))
    cells = line.split()
    assert cells[2:4] == ["running", "rl"], line
    step, total = map(int, cells[4].split("/"))
    assert 3 <= step < total == 400, line
    assert float(cells[5]) > 0  # s/step, then its ETA
    head = out.stdout.splitlines()[0]
    assert head.startswith("wa: 1 runs | jobs 1 done, 1 running, 0 queued, 0 failed"), head
    # issue 82: the sweep's ETA, from the RL job's live rate (an evaluation of a shape nothing has measured yet has no
    # basis, and the ETA says "more than"), on the parallelism recorded at the start; hours, not GPU-hours, on a
    # machine without GPUs
    assert re.search(r"\| ETA (more than )?\d+[smhd]", head) and "parallelism a guess" not in head, head
    assert "| hours " in head and "GPU-hours" not in head, head


def test_a_failed_job_shows_its_reason_and_its_log(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("not a parquet file\n")
    sweep_file = write_sweep(tmp_path / "wb.yaml", "wb", base=f"""
        base:
          engine: {{name: verl, verl: {{model_path: "rlsweep:tiny"}}}}
          task:
            name: datasets
            datasets: [{{name: gsm8k_train, path: {bad}, revision: null}}]
          sft: {{enabled: false}}
          rl: {{steps: 2}}
        """)
    root = tmp_path / "results"
    ran = subprocess.run([*SNAKEMAKE, "-d", str(tmp_path / "work"), "--config", f"sweep={sweep_file}",
                          f"results={root}"], capture_output=True, text=True, timeout=300)
    assert ran.returncode != 0
    out = cli("watch", str(sweep_file), "--results", str(root), "--once")
    assert out.returncode == 1, out.stdout + out.stderr
    log = stage_dir(root, "data", load_sweep(sweep_file).runs[0].data_id) / JOB_LOG
    assert "Traceback" in log.read_text() and "ArrowInvalid" in log.read_text()
    reason = "ArrowInvalid: Could not open Parquet input source"
    assert any(ln.split()[2:4] == ["failed", "data"] and reason in ln for ln in out.stdout.splitlines())
    assert f"failed: base seed 0, data: {reason}" in out.stdout and f"(log: {log})" in out.stdout
