"""`rlsweep gpu-check` up to the hardware boundary (CI has no GPU): its exit codes, every check running and reported
(here on the CPU with --allow-cpu), a failure reported with its first line while the rest still run, and the verl
part's generated sweep. The GPU run itself is recorded in the README ("GPU check")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import cli, run_cli
from workflow import gpu_check as gc
from workflow import gpu_check_verl as gv
from workflow.cli import main as rlsweep

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")


def test_without_a_gpu_it_says_so_and_exits_with_its_own_code():
    out = cli("gpu-check")
    assert out.returncode == gc.EXIT_NO_GPU == 3, out.stderr
    assert "no GPU" in out.stderr and "--allow-cpu" in out.stderr and "Traceback" not in out.stderr


LOCAL_CHECKS = ["sft", "grpo", "sfpo", "gxpo", "grpo+lora+kl", *gc.MIXED_METHODS, "fast_grpo", "segments", "eval"]


def test_the_local_part_checks_every_update_rule_and_mixed_policy_method():
    """What the long test below runs, without running it: one check per update rule and mixed-policy method there is
    (a new method card is a new check), each after what it starts from. (Each method's stage job on the local engine
    is the unit tests': tests/unit/algos/test_mixed_policy.py, test_fast_grpo.py, tests/unit/engines/test_engine.py,
    test_lora.py.)"""
    from workflow.methods.registry import METHODS, mix_names, update_rule_names
    # the shipped methods (a test elsewhere in this worker may have registered a toy rule of its own)
    shipped = set(METHODS.builtins)
    checks = gc.local_checks()
    assert [c.name for c in checks] == LOCAL_CHECKS
    assert set(gc.MIXED_METHODS) == set(mix_names()) & shipped - {"none"}
    assert {c.config.get("rl", {}).get("update", "grpo") for c in checks if c.stage == "rl"} == \
        set(update_rule_names()) & shipped
    names = [c.name for c in checks]
    assert all(c.after is None or names.index(c.after) < names.index(c.name) for c in checks)


@pytest.mark.long(covers=["workflow/gpu_check.py", "workflow/cli/gpu_check.py", "workflow/engines/local.py",
                          "workflow/engines/rl_batch.py", "workflow/engines/lora.py", "workflow/algos/",
                          "workflow/methods/", "workflow/launch.py"])
def test_every_stage_and_method_runs_and_is_reported(tmp_path: Path):
    """The local part on the CPU: SFT, GRPO, SFPO, GXPO, GRPO+LoRA+KL, the five mixed-policy methods, FAST-GRPO,
    GXPO again as two segment jobs and an evaluation each run as a stage job, and the table, JSON and Markdown say
    so. Long (issue 58): ~2.5 min of CI for stage jobs the unit tests run each (the check above names them); CI keeps
    the report of a failing check and the segments verdict, on real jobs (the slow tests below)."""
    out = run_cli("gpu-check", "--engine", "local", "--allow-cpu", "--sft-steps", "4", "--steps", "2",
                  "--keep", str(tmp_path / "jobs"), "--json", str(tmp_path / "out.json"),
                  "--markdown", str(tmp_path / "out.md"))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads((tmp_path / "out.json").read_text())["checks"]
    names = LOCAL_CHECKS
    assert [r["name"] for r in rows] == names and all(r["passed"] for r in rows)
    by = {r["name"]: r for r in rows}
    assert by["sft"]["steps"] == 4 and by["grpo"]["steps"] == 2 and by["grpo"]["s_per_step"] > 0
    assert by["segments"]["steps"] == 2 and by["segments"]["note"].startswith("2 segment jobs (steps 1-1, 2-2) ==")
    assert by["sfpo"]["passes"] == 4 and by["gxpo"]["passes"] == 3 and by["relift"]["passes"] == 2
    assert by["eval"]["note"].startswith("arithmetic avg@4")
    assert all(r["peak_bytes"] is None for r in rows)  # no GPU: no GPU memory to report
    for name in names:
        assert name in out.stdout
    assert (tmp_path / "out.md").read_text().count("| pass |") == len(names)
    # the stage jobs are ordinary ones: their rows are where any sweep's are
    files = (tmp_path / "jobs/local/_store/tables/train_steps").glob("rl_*.parquet")
    assert len({f.name.split("_")[1] for f in files}) == 10


@pytest.mark.slow  # trains stage jobs
def test_a_failing_check_is_reported_with_its_first_line_and_the_others_still_run(tmp_path: Path, monkeypatch):
    broken = gc.Check("grpo", "rl", {"rl": {"update": "no_such_rule", "steps": 1}}, after=None, what="broken")
    fine = gc.local_checks(rl_steps=1, sft_steps=4)
    monkeypatch.setattr(gc, "local_checks", lambda *a, **k: [fine[0], broken, fine[-1], *fine[5:6]])
    code = rlsweep(["gpu-check", "--engine", "local", "--allow-cpu", "--keep", str(tmp_path),
                    "--json", str(tmp_path / "out.json")])
    assert code == 1
    rows = {r["name"]: r for r in json.loads((tmp_path / "out.json").read_text())["checks"]}
    assert rows["sft"]["passed"] and rows["luffy"]["passed"]
    assert rows["grpo"]["passed"] is False and "no_such_rule" in rows["grpo"]["error"]
    assert "\n" not in rows["grpo"]["error"] and rows["grpo"]["error"].startswith("ValidationError")
    assert rows["eval"]["passed"] is None and rows["eval"]["error"] == "not run: grpo did not pass"


def test_only_runs_a_check_with_what_it_starts_from():
    names = [c.name for c in gc.select(gc.local_checks(), ["eval"])]
    assert names == ["sft", "grpo", "eval"]
    out = cli("gpu-check", "--allow-cpu", "--only", "gxpo,nope")
    assert out.returncode == 2 and "unknown check 'nope'" in out.stderr


@pytest.mark.slow  # verl's checks of every method
def test_the_verl_part_is_a_valid_sweep_of_every_method(tmp_path: Path):
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.loader import dump_yaml
    path = tmp_path / "verl.yaml"
    path.write_text(dump_yaml(gv.sweep(None, cuda=True, steps=3)))
    sweep = load_sweep(path)
    assert sorted(gv.check_name(r.config) for r in sweep.runs) == sorted(name for name, *_ in gv.RUNS)
    assert {r.config.engine.verl.device for r in sweep.runs} == {"cuda"}
    assert len(sweep.jobs("sft")) == 1  # the rules and FAST-GRPO share one verl SFT; the mixed methods have none
    assert all(r.config.rl.steps == 3 and r.config.eval.backend == "vllm" for r in sweep.runs)


def test_the_verl_part_says_what_is_missing(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(gv, "missing", lambda: ["vllm"])
    said: list[str] = []
    assert gv.run_verl(tmp_path, False, 2, None, None, say=said.append) == []
    assert "skipped" in said[0] and "vllm" in said[0]
    [o] = gv.run_verl(tmp_path, False, 2, None, None, say=said.append, required=True)
    assert o.passed is False and "vllm" in o.error


@pytest.mark.slow  # trains stage jobs
@pytest.mark.parametrize("repeat_differs", [False, True])
def test_a_chain_that_differs_fails_unless_the_one_job_itself_differs_run_to_run(tmp_path, monkeypatch,
                                                                                repeat_differs):
    """The segments check's verdict: a chain unlike its one job is a resume that lost state (failed) when the one
    job run twice is identical, and this device's run-to-run noise (passed, both differences in the note) when it is
    not. The jobs are real and so is the comparison (on the CPU a chain and the job run again equal the one job bit
    for bit); its verdicts are then replaced, to disagree."""
    checks = gc.select(gc.local_checks(rl_steps=2, sft_steps=4), ["segments"])
    verdicts = iter([(False, "train_steps differ from step 2 (loss: 0.5 vs 0.25)"),
                     (not repeat_differs, "final weights differ (max |dw| 1.00e-07)" if repeat_differs else "")])
    real, compared = gc.same_training, []

    def planted(*args):
        compared.append(real(*args))
        return next(verdicts)
    monkeypatch.setattr(gc, "same_training", planted)
    [*_, chain] = gc.run_local(checks, tmp_path, cuda=False, say=lambda _: None)
    assert compared == [(True, ""), (True, "")]  # the chain, then the one job again, against the one job
    assert (tmp_path / "again").is_dir()  # the one job did run a second time
    if repeat_differs:
        assert chain.passed and "the one job run twice differs too (final weights differ" in chain.note
        assert "the chain: train_steps differ from step 2" in chain.note
    else:
        assert chain.passed is False and chain.error.startswith("the chain lost state: train_steps differ from step 2")
