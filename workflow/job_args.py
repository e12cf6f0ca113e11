"""The command line of one stage job, as the Snakefile's rules hand it to scripts/stage.py: built from the stage's
declaration (workflow/stages.py `Stage.options`), so a rule can pass only what the job's parser
(workflow/launch.py, built from the same declaration) takes.

Planning 10,000 runs evaluates every rule's params function and formats every placeholder of every job's command
several times; one pre-quoted string per job (instead of five fields) keeps planning near bare Snakemake's time
(bench/plan_dag.py).
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from workflow.stages import stage_of


def job_args(stage: str, stage_id: str, *, sweep: str, results: str, inputs: Mapping[str, Any] | None = None,
             lock: bool = True, max_train_overlap: float | None = None, **options: Any) -> str:
    """The options of `stage`'s job for stage id `stage_id`, quoted, as ONE string. `inputs`: the rule's named
    inputs, each the file of the stage option of that name (the SFT stage's DONE.json as `init`, ...). `lock`: the
    job holds the stage's lock (not a rescore job, which writes only its grader's rows). `max_train_overlap`: the
    sweep's limit, passed when the job checks overlaps. `options`: the job's other declared options; an option the
    stage does not declare is refused, naming the ones it has."""
    spec = stage_of(stage)
    # --wait-for-twin: another driver (a second snakemake, an Optuna trial) running the same stage is waited for and
    # its result used, never refused: a refused job would make Snakemake delete the other's DONE.json
    args = ["--sweep", sweep, "--id", stage_id, *(["--wait-for-twin"] if lock else [])]
    named = dict(inputs.items()) if inputs is not None else {}
    for name, value in named.items():
        option = spec.option(name)
        args += [option.flag, *(value if option.many else [value])]
    if "overlap" in named and max_train_overlap is not None:
        options["max_train_overlap"] = max_train_overlap
    config = options.pop("config", None)
    for name, value in options.items():
        args += [spec.option(name).flag, str(value)]
    if config is not None:
        args += ["--config", config]
    return " ".join(shlex.quote(str(a)) for a in [*args, "--results", results])
