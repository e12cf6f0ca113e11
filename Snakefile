# rlsweep: sweep YAML -> SFT -> RL -> eval -> aggregate -> report.
#
#   snakemake                                   # sweeps/demo.yaml, local, all cores (profiles/default)
#   snakemake --config sweep=sweeps/other.yaml  # another sweep
#   snakemake --config sweep=sweeps/optuna_sfpo_gxpo.yaml   # an Optuna study (rules/study.smk)
#
# Targets are DONE.json files whose directories are named by run ids (hashes of each stage's resolved config),
# so a finished run is never re-run and changing one hyperparameter re-runs only the runs whose ids it changes;
# they live in results/_store/, shared by every sweep, so no sweep recomputes a stage another one finished.
# NB: Snakemake defines a global named `workflow` in this file; import from our package with `from workflow.x
# import y` only (a bare `import workflow...` would shadow Snakemake's object).

# the names Snakemake itself keeps here: a Snakefile runs in the namespace of Snakemake's workflow module, so none of
# these may be dropped (workflow/big_dag.py forget_load_time_names)
SNAKEMAKE_NAMES = frozenset(globals())

import shlex
import sys
from pathlib import Path

from workflow.big_dag import cache_resource_signature, forget_load_time_names, job_function, tune_gc
from workflow.dry_run import dry_run
from workflow.job_args import job_args
from workflow.layout import done_path, report_dir, rescore_path, segment_done, summary_path
from workflow.results.membership import record as record_members
from workflow.tracking.hook import record_tracking
from workflow.results.migrate import legacy_sweeps, migrate_if_needed
from workflow.segments import record_finished, unrecorded_finished
from workflow.extend import evaluations_to_copy, extend, extensions, index_finished
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError
from workflow.stages import STAGES

cache_resource_signature()  # workflow/big_dag.py
SWEEP_FILE = config.get("sweep", "sweeps/demo.yaml")
RESULTS = config.get("results", "results")
PYTHON = sys.executable  # the interpreter running Snakemake, i.e. the project's environment
STAGE = f"{workflow.basedir}/scripts/stage.py"  # absolute, so `snakemake -d OTHER_DIR` works too
STAGE_CMD = f"{shlex.quote(PYTHON)} {shlex.quote(STAGE)}"  # quoted once, not in every job's command
# the same as the literal start of a rule's shell template (an f-string, braces doubled): Snakemake formats each
# placeholder of every job's command several times while it plans, so a template holds only what varies per job
# (an f-string may name only constants: Snakemake evaluates the template again when the job runs)
STAGE_SHELL = STAGE_CMD.replace("{", "{{").replace("}", "}}")

try:
    SWEEP = load_sweep(SWEEP_FILE)
except SweepError as err:  # the message alone: a WorkflowError would add Snakemake's traceback line to it
    print(f"invalid sweep\n{err}", file=sys.stderr)
    sys.exit(1)

# the trials a study's driver has started, or a design's rounds recorded so far: runs like any other
from workflow.design.recorded import add_recorded_runs
add_recorded_runs(SWEEP, RESULTS)
RUNS = SWEEP.by_run_id

# Stage outputs live once in results/_store/, shared by every sweep (workflow/layout.py): a stage another sweep
# finished is an existing target here and never runs again. Results made before the store are moved into it first,
# then the sweep records the stage jobs it plans (workflow/results/membership.py: its views in `rlsweep query`).
# A dry run (`snakemake -n`) writes nothing: it neither moves results nor records.
if dry_run():
    if legacy := legacy_sweeps(RESULTS):
        print(f"{RESULTS} holds results of the layout before the shared store (sweeps "
              f"{', '.join(legacy)}): a dry run writes nothing, so it cannot plan on them until they "
              f"are moved into the store: `rlsweep --results {RESULTS} migrate` (renames only; nothing is recomputed),"
              " or a run without -n, which moves them first", file=sys.stderr)
        sys.exit(1)
    if unrecorded := unrecorded_finished(RESULTS, SWEEP.runs):
        print(f"{unrecorded} RL run(s) finished before runs were trained in segments: this dry run shows their "
              "segments and evaluations as jobs to run, but a run without -n records their segments first (nothing "
              "trains or evaluates again; workflow/segments.py)", file=sys.stderr)
    if extending := extensions(RESULTS, SWEEP.runs)[0]:
        print(f"{len(extending)} RL run(s) extend a finished shorter run: this dry run shows their first segments "
              "(and the evaluations of those steps) as jobs to run, but a run without -n takes them from the finished "
              "run and trains only the steps after (`rlsweep plan` lists them; workflow/extend.py)", file=sys.stderr)
else:
    migrate_if_needed(RESULTS)
    # the sweep's trackers, where its jobs find them (never a job's argument: not part of any job's identity)
    record_tracking(RESULTS, SWEEP.name, SWEEP.spec.tracking.model_dump(mode="json"))
    record_finished(RESULTS, SWEEP.runs)  # RL runs finished in one job before segments: their segment files
    index_finished(RESULTS)  # once per store: the RL runs finished before the index of donors existed
    for _ext in extensions(RESULTS, SWEEP.runs)[0]:  # a longer run of a finished run's settings: only the new steps
        if (_refused := extend(RESULTS, SWEEP.name, _ext)) is not None:  # its rows of the taken steps are not whole
            print(f"rl {_ext.run.run_id} ({_ext.run.label}, seed {_ext.run.config.seed}): {_refused}", file=sys.stderr)
            continue
        _copies = evaluations_to_copy(RESULTS, _ext)
        if _copies:
            from workflow.launch import run_stage  # (only here: planning never imports the stage machinery)
        for _step, _group, _source in _copies:  # its evaluations of the taken steps: the donor's, copied
            run_stage("eval", SWEEP.name, _ext.run.eval_id, _ext.run.stage_config("eval"), results_root=RESULTS,
                      copy_from=_source, step=_step, group=_group, label=_ext.run.label)
        print(f"rl {_ext.run.run_id} ({_ext.run.label}, seed {_ext.run.config.seed}): steps 1-{_ext.last} taken "
              f"from the finished run {_ext.donor}" + (f" with {len(_copies)} evaluation(s)" if _copies else "")
              + f"; it trains {_ext.last + 1}-{_ext.run.config.rl.steps}", file=sys.stderr)
    record_members(RESULTS, SWEEP.name, SWEEP.members())
EVAL_OF = {r.eval_id: r for r in SWEEP.runs}


onstart:
    # the executor and its parallelism (cores here, SLURM jobs in flight), for the sweep's ETA and its hours:
    # known only once Snakemake has chosen the executor (workflow/sweep/executor.py)
    from workflow.sweep.executor import record_executor
    from workflow.sweep.plan import record_plan
    _executor = record_executor(RESULTS, SWEEP.name, getattr(workflow.executor_plugin, "name", None),
                                workflow._cores, workflow.nodes)
    # what the sweep had left to spend when it first ran (`rlsweep status` sets what it used against it), priced
    # where it runs (so after the executor is known: a CPU machine's plan has no GPU-hours, whatever the commands on
    # PATH suggest); an extension's taken steps cost nothing before or after they are taken. Written once, never
    # again (not for a study or a design: their trials or rounds are not known yet; a design's plan is its worst
    # case, `rlsweep plan`)
    if SWEEP.spec.optuna is None and SWEEP.spec.design is None:
        record_plan(SWEEP, Path(RESULTS), _executor)
RULE_FROM_DECLARATION = [s for s in STAGES.values() if s.rule_from_declaration]  # rules/stages.smk


def pattern(stage, stage_id, **where):
    """A stage's DONE.json with wildcards (workflow/layout.py is the one place that knows the layout)."""
    return str(done_path(RESULTS, stage, stage_id, **where))


_ID = "{0}"
_DONE_OF = {name: pattern(name, _ID) for name in STAGES if name != "eval"}
# a segmented stage's DONE_<end>.json (workflow/segments.py), as str.format(stage_id, end)
SEGMENT_OF = {s.name: str(segment_done(RESULTS, s.name, "{0}", "{1}")) for s in STAGES.values() if s.segments}


def done_of(stage, stage_id):
    """pattern(stage, stage_id) of a stage but eval, by one str.replace (input functions call it per job)."""
    return _DONE_OF[stage].replace(_ID, stage_id)


# one eval job per (run, RL checkpoint step, benchmark group): str.format of one pattern, not a Path per job
_EVAL_PATTERN = pattern("eval", "{eval_id}", run_id="{run_id}", step="{step}", group="{group}")
EVAL_DONE = [_EVAL_PATTERN.format(eval_id=r.eval_id, run_id=r.run_id, step=step, group=group)
             for r in SWEEP.runs for step, group in r.eval_jobs]
# other graders' verdicts on the stored responses (rules/eval.smk, rule rescore): the sweep's eval.graders and
# `--config graders=a,b` (what `rlsweep rescore` passes)
try:
    _extra = [g for g in str(config.get("graders", "")).split(",") if g]
    RESCORE_DONE = [str(rescore_path(RESULTS, r.eval_id, r.run_id, step, group, grader))
                    for r in SWEEP.runs for step, group, grader in r.rescore_jobs(_extra)]
except KeyError as err:
    print(f"invalid --config graders: {err.args[0]}", file=sys.stderr)
    sys.exit(1)


def stage_command(stage, stage_id, input=None, threads=None, **options):
    """What follows scripts/stage.py in a stage job's command, as ONE string: the stage, its options quoted
    (workflow/job_args.py: from the stage's declaration in workflow/stages.py), the job's threads. Each rule's shell
    is `STAGE_SHELL {params.args}` and its one params function returns this: Snakemake formats every placeholder of
    every job's command three times while it plans, so the command has one. `input`: the files of the stages the
    job reads, by option name. `threads`: the job's (Snakemake's, capped at --cores); None: no --threads."""
    args = job_args(stage, stage_id, sweep=SWEEP.name, results=RESULTS, inputs=input,
                    max_train_overlap=SWEEP.spec.checks.max_train_overlap, **options)
    return f"{stage} {args}" if threads is None else f"{stage} {args} --threads {threads}"


wildcard_constraints:
    **{s.id_field: "[0-9a-f]{12}" for s in STAGES.values()},  # every stage id (workflow/layout.py ID_LENGTH)
    step="[0-9]+",
    end="[0-9]+",  # a segment's last step (workflow/segments.py)
    group="[a-z]+",

include: "rules/stages.smk"
include: "rules/eval.smk"
include: "rules/design.smk"  # (before aggregate.smk, whose rule waits for a design's driver)
include: "rules/aggregate.smk"
include: "rules/study.smk"

rule all:
    default_target: True
    input: STUDY_DONE if SWEEP.spec.optuna is not None else str(report_dir(RESULTS, SWEEP.name) / "index.html")

tune_gc()  # workflow/big_dag.py: planning a 10,000-run sweep near bare Snakemake's time
# what only loading needed (workflow/big_dag.py: Snakemake copies this namespace into every formatting of a job's
# command). Kept, because jobs read them: SWEEP, RUNS, EVAL_OF, RESULTS, SWEEP_FILE, PYTHON, STAGE_CMD, shlex,
# done_of, _DONE_OF, _ID, stage_command, job_args, SEGMENT_OF, SEGMENT_HOLDING, START_FROM, _EVAL_PATTERN, and
# STAGE_SHELL (a running job evaluates its rule's `shell:` expression again).
forget_load_time_names(globals(), SNAKEMAKE_NAMES, [
    "SNAKEMAKE_NAMES", "cache_resource_signature", "forget_load_time_names", "job_function", "tune_gc", "dry_run",
    "done_path", "report_dir", "rescore_path", "segment_done", "summary_path", "study_dir", "record_members",
    "record_tracking", "legacy_sweeps", "migrate_if_needed", "record_finished", "unrecorded_finished",
    "evaluations_to_copy", "extend", "extensions", "index_finished", "load_sweep", "SweepError",
    "STAGES", "run_stage", "nested_snakemake_args", "add_recorded_runs", "design_done", "design_key", "families",
    # (imports)
    "STAGE", "RULE_FROM_DECLARATION", "EVAL_DONE", "RESCORE_DONE", "SELF_STARTS", "STUDY_DONE", "DESIGN_DONE",
    "pattern", "_stage_rule_functions", "_starts", "_extra", "_sources", "_source", "_ext", "_copies", "_refused",
    "_step", "_group", "_stage", "_inputs", "_args", "_resources", "_wildcard", "_output",  # the rules' definitions
    "_eval_args", "_segment_holding", "_start_input", "_copy_source", "_copy_args", "_rescore_args",  # held by rules
])
