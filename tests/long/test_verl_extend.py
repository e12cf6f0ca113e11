"""Issue 61: extending a finished verl run for real, on CPUs (Ray, FSDP2, vLLM's CPU build, the tiny model
`rlsweep:tiny`). A 2-step GRPO run finishes; a run of the same settings but 4 steps takes its steps 1-2 (verl's
checkpoint of step 2 hard-linked, its train_steps rows copied) and trains steps 3-4 only, once each, in one verl job
that resumes from the linked checkpoint. Two verl starts (~5 min on 2 idle cores): a long test, its last pass in
docs/tests.md. In CI, the same up to verl (tests/e2e/test_extend.py: what is linked, the tracker file, what is not
taken)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, need_verl_and_vllm, write_sweep
from workflow.engines.verl.job.process import leaked_since
from workflow.layout import done_path, segment_done, stage_dir
from workflow.results.catalog import query
from workflow.sweep.expand import load_sweep

need_verl_and_vllm()

pytestmark = [pytest.mark.timeout(2400), pytest.mark.serial("verl"), pytest.mark.slow,
              pytest.mark.long(covers=["workflow/engines/verl/", "workflow/extend.py", "workflow/segments.py",
                                       "workflow/launch.py", "workflow/engine_api/traits.py"])]

BASE = """base:
  engine:
    name: verl
    verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 15}
  task:
    name: datasets
    datasets: [{name: gsm8k_train, path: sweeps/data/tiny_gsm8k_train.jsonl}]
    template: boxed
  sft: {enabled: false}
  rl: {steps: %d, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, lr: 1.0e-3, checkpoint_every: 1,
       micro_batch_size: 16, segment_steps: 2}
  eval: {benchmarks: [gsm8k], paths: {gsm8k: tests/fixtures/benchmarks/gsm8k.jsonl}, backend: vllm}
resources: {rl: {threads: 2}}
"""


def _shm() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()}


def _train(path: Path, results: Path, run, log: Path) -> None:
    """The run's RL stage to its end by one `snakemake` (no evaluation: what is tested is the training)."""
    # (the last segment's file: the rule's output; DONE.json is written beside it)
    proc = subprocess.run([sys.executable, "-m", "snakemake", str(segment_done(results, "rl", run.run_id,
                                                                               run.config.rl.steps)), "--cores",
                           "2", "--config", f"sweep={path}", f"results={results}"], cwd=REPO,
                          stdout=log.open("ab"), stderr=subprocess.STDOUT, timeout=1800)
    assert proc.returncode == 0, f"snakemake failed; see {log}"


def _rows(results: Path, run_id: str) -> list[dict]:
    return query(f"SELECT step, reward, loss FROM train_steps WHERE run_id = '{run_id}' ORDER BY step",
                 results).to_pylist()


def test_a_finished_verl_run_taken_from_2_to_4_steps_trains_steps_3_and_4_only(tmp_path):
    results, log, shm_before = tmp_path / "results", tmp_path / "snakemake.log", _shm()
    short_path = write_sweep(tmp_path / "short.yaml", "verl_short", base=BASE % 2)
    long_path = write_sweep(tmp_path / "long.yaml", "verl_long", base=BASE % 4)
    [short], [long_] = load_sweep(short_path).runs, load_sweep(long_path).runs
    _train(short_path, results, short, log)
    donor = stage_dir(results, "rl", short.run_id)
    assert [r["step"] for r in _rows(results, short.run_id)] == [1, 2]

    _train(long_path, results, long_, log)
    text = log.read_text()
    assert f"steps 1-2 taken from the finished run {short.run_id}" in " ".join(text.split())
    run = stage_dir(results, "rl", long_.run_id)
    verl_log = (run / "verl_ppo.log").read_text()
    assert verl_log.count("==== ") == 1  # one verl job: steps 3-4
    assert "global_step_2, setting global step to 2" in verl_log  # it resumed from the linked checkpoint
    rows = _rows(results, long_.run_id)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # each step once
    assert rows[:2] == _rows(results, short.run_id)  # steps 1-2 are the donor's
    for f in (donor / "verl" / "global_step_2").rglob("*"):  # linked, not copied
        if f.is_file():
            assert (run / "verl" / "global_step_2" / f.relative_to(donor / "verl" / "global_step_2")).stat().st_ino \
                == f.stat().st_ino
    assert not (run / "verl" / "global_step_1").exists()  # only what the taken segment ends at
    assert (run / "verl" / "global_step_4").is_dir()
    assert json.loads(segment_done(results, "rl", long_.run_id, 2).read_text())["extended_from"] == short.run_id
    assert done_path(results, "rl", long_.run_id).is_file()
    assert (donor / "verl" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"  # the donor untouched
    assert leaked_since(shm_before) == []
