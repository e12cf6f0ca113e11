# rlsweep: sweep YAML -> SFT -> RL -> eval -> aggregate -> report.
#
#   snakemake                                   # sweeps/demo.yaml, local, all cores (profiles/default)
#   snakemake --config sweep=sweeps/other.yaml  # another sweep
#   snakemake --config sweep=sweeps/optuna_sfpo_gxpo.yaml   # an Optuna study (rules/study.smk)
#
# Targets are DONE.json files whose directories are named by run ids (hashes of each stage's resolved config),
# so a finished run is never re-run and changing one hyperparameter re-runs only the runs whose ids it changes.
# NB: Snakemake defines a global named `workflow` in this file; import from our package with `from workflow.x
# import y` only (a bare `import workflow...` would shadow Snakemake's object).

import shlex
import sys

from workflow.layout import done_path, report_dir, summary_path
from workflow.sweep.expand import load_sweep
from workflow.sweep.identity import canonical_json
from workflow.sweep.spec import SweepError

SWEEP_FILE = config.get("sweep", "sweeps/demo.yaml")
RESULTS = config.get("results", "results")
PYTHON = sys.executable  # the interpreter running Snakemake, i.e. the project's environment
STAGE = f"{workflow.basedir}/scripts/stage.py"  # absolute, so `snakemake -d OTHER_DIR` works too

try:
    SWEEP = load_sweep(SWEEP_FILE)
except SweepError as err:  # the message alone: a WorkflowError would add Snakemake's traceback line to it
    print(f"invalid sweep\n{err}", file=sys.stderr)
    sys.exit(1)

if SWEEP.spec.optuna is not None:  # the trials the study driver has started so far are runs like any other
    from workflow.study.trials import recorded_runs
    SWEEP.add_runs(recorded_runs(SWEEP.spec, RESULTS, SWEEP.name))
RUNS = SWEEP.by_run_id
EVAL_OF = {r.eval_id: r for r in SWEEP.runs}
# one eval job per (run, RL checkpoint step, benchmark group)
EVAL_DONE = [str(done_path(RESULTS, SWEEP.name, "eval", r.eval_id, r.run_id, step, group))
             for r in SWEEP.runs for step, group in r.eval_jobs]


def pattern(stage, stage_id, **where):
    """A stage's DONE.json with wildcards (workflow/layout.py is the one place that knows the layout)."""
    return str(done_path(RESULTS, SWEEP.name, stage, stage_id, **where))


def data_inputs(data_id, overlap_ids):
    """A training stage's data inputs: the prepared data and the overlap checks it must pass."""
    out = {"data": pattern("data", data_id)} if data_id else {}
    if overlap_ids:
        out["overlap"] = [pattern("overlap", o) for o in sorted(overlap_ids)]
    return out


def stage_options(input):
    """The named inputs of a stage job as stage.py options (--init, --data, --overlap), and the overlap gate."""
    named = dict(input.items())
    args = [f"--{name} {shlex.quote(named[name])}" for name in ("init", "data") if name in named]
    if "overlap" in named:
        args.append("--overlap " + " ".join(shlex.quote(p) for p in named["overlap"]))
        limit = SWEEP.spec.checks.max_train_overlap
        args += [f"--max-train-overlap {limit}"] if limit is not None else []
    return " ".join(args)

wildcard_constraints:
    sft_id="[0-9a-f]{12}",
    data_id="[0-9a-f]{12}",
    overlap_id="[0-9a-f]{12}",
    run_id="[0-9a-f]{12}",
    eval_id="[0-9a-f]{12}",
    step="[0-9]+",
    group="[a-z]+",

include: "rules/data.smk"
include: "rules/sft.smk"
include: "rules/rl.smk"
include: "rules/eval.smk"
include: "rules/aggregate.smk"
include: "rules/study.smk"

rule all:
    default_target: True
    input: STUDY_DONE if SWEEP.spec.optuna is not None else str(report_dir(RESULTS, SWEEP.name) / "index.html")
