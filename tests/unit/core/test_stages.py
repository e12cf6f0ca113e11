"""A stage is declared once (workflow/stages.py STAGES): a run's id of it, the sweep's jobs of it and their inputs, its
Snakemake rule and the options of its job's command line follow from the declaration, both where the rules build a
job's arguments (workflow/job_args.py) and where the job parses them (workflow/launch.py), so the two cannot drift
apart, and a stage added by declaration has all of them."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from helpers import REPO
from workflow import stages
from workflow.job_args import job_args
from workflow.stages import STAGES, Option, Stage


def parse(stage: str, line: str):
    from workflow.launch import parser
    return parser().parse_args([stage, *shlex.split(line)])


def value_for(option: Option):
    return {Path: "/r/x/DONE.json", int: "3", float: "0.25", str: "a b"}[option.type]


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_declared_option_goes_from_the_rules_arguments_to_the_jobs_parser(stage):
    """What a rule hands a job (inputs by name, the other options as keywords) is what the job reads, value for
    value, under the option's name: run_stage's keyword."""
    spec = STAGES[stage]
    inputs = {o.name: ([value_for(o), "/r/y/DONE.json"] if o.many else value_for(o))
              for o in spec.options if o.upstream}
    others = {o.name: value_for(o) for o in spec.options if not o.upstream and o.name != "max_train_overlap"}
    line = job_args(stage, "0123456789ab", sweep="s w", results="/res", inputs=inputs, max_train_overlap=0.5,
                    config='{"a": 1}', **others)
    a = parse(stage, line)
    assert (a.sweep, a.id, a.config, str(a.results), a.wait_for_twin) == ("s w", "0123456789ab", '{"a": 1}', "/res",
                                                                           True)
    for option in spec.options:
        got = getattr(a, option.name)
        if option.name == "max_train_overlap":
            assert got == (0.5 if "overlap" in inputs else None)
        elif option.many:
            assert got == [Path(v) for v in inputs[option.name]]
        else:
            want = inputs.get(option.name, others.get(option.name))
            assert got == option.type(want)


def test_an_option_a_stage_does_not_declare_is_refused_on_both_sides(capsys):
    with pytest.raises(ValueError, match=r"stage sft has no option 'step'; its options: data, overlap, "
                                         r"max_train_overlap, base \(workflow/stages.py STAGES\)"):
        job_args("sft", "0123456789ab", sweep="s", results="r", step=3)
    with pytest.raises(SystemExit):
        parse("sft", "--sweep s --id 0123456789ab --config {} --step 3")
    assert "unrecognized arguments: --step 3" in capsys.readouterr().err


def test_a_stage_added_by_declaration_gets_its_jobs_command_line(monkeypatch):
    toy = Stage("toy", "toy_id", lambda cfg, d, ids: {}, stages.DataStage, "x:y", help="a toy stage",
                options=(Option("knob", "how far to turn it", int), Option("init", "its input", Path, upstream="sft")))
    monkeypatch.setitem(STAGES, "toy", toy)
    line = job_args("toy", "0123456789ab", sweep="s", results="r", inputs={"init": "/a/DONE.json"}, knob=7,
                    config="{}")
    a = parse("toy", line)
    assert (a.knob, a.init) == (7, Path("/a/DONE.json"))


def test_no_rule_spells_a_stage_options_flag_by_hand():
    """Every job's arguments come from stage_command (the rescore job is no stage: it has its own parser)."""
    rules = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk"))).split("def _rescore_args")[0]
    flags = {o.flag for s in STAGES.values() for o in s.options}
    handwritten = [f for f in flags if f'"{f}"' in rules]
    assert not handwritten, handwritten


TOY_STAGE = """
import sys
import toy_stage
toy_stage.declare()
from workflow.sweep.expand import load_sweep
sweep = load_sweep(sys.argv[1])
print("TOY", " ".join(sorted(sweep.jobs("toy"))), flush=True)
from snakemake.cli import main
main([*(f"{sys.argv[2]}/_store/toy/{i}/DONE.json" for i in sorted(sweep.jobs("toy"))), "-n", "-p", "--cores", "64",
      "--config", f"sweep={sys.argv[1]}", f"results={sys.argv[2]}"])
"""


@pytest.mark.slow  # seconds of work (Snakemake runs, every shipped sweep): the fast tier stays under 2 min
def test_a_stage_added_by_declaration_gets_ids_jobs_and_a_rule(tmp_path, monkeypatch):
    """tests/support/toy_stage.py, declared in STAGES and nowhere else: every run with it gets its id (the hash of its
    config), the sweep one job per distinct id, and Snakemake a rule whose job waits for the declared upstream jobs
    and gets arguments its parser takes."""
    import os
    import subprocess
    import sys
    import toy_stage
    from workflow.sweep.expand import load_sweep
    out = subprocess.run([sys.executable, "-c", TOY_STAGE, "sweeps/sft_then_rl.yaml", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO)])})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    toy_ids = next(line for line in lines if line.startswith("TOY ")).split()[1:]
    monkeypatch.setitem(STAGES, "toy", toy_stage.TOY)
    sweep = load_sweep(REPO / "sweeps" / "sft_then_rl.yaml")
    assert sorted(sweep.jobs("toy")) == toy_ids and all(r.id_of("toy") in toy_ids for r in sweep.runs)
    sft_data = {r.sft_id: r.data_id for r in sweep.runs}
    assert len(toy_ids) == len({(r.sft_id, r.config.seed) for r in sweep.runs}) > 1  # one job per distinct config
    commands = [shlex.split(line) for line in lines if "scripts/stage.py" in line and " toy " in line]
    assert sorted(c[c.index("--id") + 1] for c in commands) == toy_ids
    for c in commands:
        a = parse("toy", shlex.join(c[c.index("toy") + 1:]))
        want = json.loads(a.config)
        assert a.init == tmp_path / "_store" / "sft" / want["sft_id"] / "DONE.json"
        assert a.data == tmp_path / "_store" / "data" / want["data_id"] / "DONE.json"
        assert sft_data[want["sft_id"]] == want["data_id"]
        assert a.knob is None and a.threads == sweep.spec.resources.sft.threads == 16  # its declared `resources`


@pytest.mark.slow  # seconds of work (Snakemake runs, every shipped sweep): the fast tier stays under 2 min
def test_every_job_a_dry_run_plans_parses_with_its_stages_declared_options(tmp_path):
    """The rules' jobs as Snakemake would start them (`snakemake -n -p`): a datasets sweep on verl (data, overlap,
    SFT, RL and eval jobs) and the two-regime local sweep (its pretraining jobs); each command line is one the job's
    parser takes, and together they cover every stage."""
    import subprocess
    import sys
    parsed: dict[str, int] = {}
    for sweep in ("sweeps/sft_then_rl.yaml", "sweeps/mixed_policy.yaml"):
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--config",
                              f"sweep={sweep}", f"results={tmp_path / Path(sweep).stem}"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        for line in out.stdout.splitlines():
            argv = shlex.split(line.strip()) if "scripts/stage.py" in line else []
            rest = argv[next((i for i, a in enumerate(argv) if a.endswith("scripts/stage.py")), len(argv)) + 1:]
            if rest and rest[0] != "rescore":  # (a rescore job has its own parser: workflow/eval/rescore.py)
                stage = parse(rest[0], shlex.join(rest[1:])).stage
                parsed[stage] = parsed.get(stage, 0) + 1
    assert set(parsed) == {*STAGES, "aggregate"}, parsed
