"""Issue 61: an Optuna study on the verl engine prunes between segments, for real on CPUs (Ray, FSDP2, vLLM's CPU
build, the tiny model `rlsweep:tiny`). Two trials one after the other, each two seeds of a 2-step run split at its
evaluated step 1: the first completes; the second, worse at its step-1 evaluations (the objective makes it so: the
mean over its seeds), is pruned there, and neither of its runs starts a second segment. Twelve verl or vLLM starts
(~15 min on 2 idle cores): a long test, its last pass in docs/tests.md. In CI: the same driver on the local engine
(tests/e2e/test_study.py)."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
import yaml

from helpers import REPO, SECOND_IS_WORSE, need_verl_and_vllm, write_sweep
from workflow.engines.verl.job.process import leaked_since
from workflow.layout import done_path, segment_done, stage_dir
from workflow.results.catalog import query
from workflow.study.factory import make_storage
from workflow.sweep.expand import load_sweep

need_verl_and_vllm()

pytestmark = [pytest.mark.timeout(2400), pytest.mark.serial("verl"), pytest.mark.slow,
              pytest.mark.long(covers=["workflow/engines/verl/", "workflow/study/", "rules/study.smk",
                                       "workflow/segments.py", "workflow/launch.py"])]

BASE = """base:
  engine:
    name: verl
    verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 15}
  task:
    name: datasets
    datasets: [{name: gsm8k_train, path: sweeps/data/tiny_gsm8k_train.jsonl}]
    template: boxed
  sft: {enabled: false}
  rl: {steps: 2, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, lr: 1.0e-4, checkpoint_every: 1,
       micro_batch_size: 16}
  eval: {benchmarks: [gsm8k], paths: {gsm8k: tests/fixtures/benchmarks/gsm8k.jsonl}, k: 1, max_new_tokens: 16,
         backend: vllm, every: 1}
resources: {rl: {threads: 2}}
"""


def test_a_verl_study_prunes_a_trial_after_its_first_segment_and_starts_no_second(tmp_path):
    from pathlib import Path
    shm_before = {p.name for p in Path("/dev/shm").iterdir()}
    block = {"objective": {"sql": SECOND_IS_WORSE}, "sampler": {"name": "random", "seed": 0}, "n_trials": 2,
             "in_flight": 1, "pruner": {"name": "median", "options": {"n_startup_trials": 1}},
             "space": {"rl.lr": {"type": "float", "low": 1.0e-5, "high": 1.0e-3, "log": True}}}
    sweep = write_sweep(tmp_path / "vs.yaml", "verl_study", yaml.safe_dump({"seeds": [0, 1], "optuna": block},
                                                                          sort_keys=False), base=BASE)
    log = tmp_path / "snakemake.log"
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2",
                           "--config", f"sweep={sweep}", f"results={tmp_path / 'results'}"], cwd=REPO,
                          stdout=log.open("ab"), stderr=subprocess.STDOUT, timeout=2000)
    assert proc.returncode == 0, f"snakemake failed; see {log}"
    results = tmp_path / "results"
    spec = load_sweep(sweep).spec.optuna
    trials = optuna.load_study(study_name="verl_study", storage=make_storage(spec, results, "verl_study")).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED]
    # the seeds' mean: the first trial reported beside its own two runs, the second beside all four
    assert trials[0].intermediate_values == {1: -2.0} and trials[1].intermediate_values == {1: -4.0}
    kept, pruned = trials[0].user_attrs["run_ids"], trials[1].user_attrs["run_ids"]
    assert len(kept) == len(pruned) == 2
    steps = {r: [x["step"] for x in query(f"SELECT step FROM train_steps WHERE run_id = '{r}' ORDER BY step",
                                          results).to_pylist()] for r in kept + pruned}
    assert steps == {**{r: [1, 2] for r in kept}, **{r: [1] for r in pruned}}
    for run_id in pruned:
        rl = stage_dir(results, "rl", run_id)
        assert (rl / "PRUNED.json").is_file() and segment_done(results, "rl", run_id, 1).is_file()
        assert not segment_done(results, "rl", run_id, 2).exists() and not done_path(results, "rl", run_id).exists()
        assert (rl / "verl_ppo.log").read_text().count("==== ") == 1  # its first segment only: no second start
        row = query(f"SELECT status, trial_state FROM runs WHERE run_id = '{run_id}'", results).to_pylist()
        assert row == [{"status": "pruned", "trial_state": "pruned"}]
    assert "trial 1 pruned: stopped at step 1" in " ".join(log.read_text().split())
    assert leaked_since(shm_before) == []
