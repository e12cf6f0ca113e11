"""Where everything a sweep produces lives on disk, in one place and with no heavy imports (the Snakefile, the
CLI and the study driver read it without importing torch).

Stage outputs are named by their ids (content hashes of each stage's config), so they live once in a store that
every sweep of a results directory shares: a sweep that needs a stage another sweep finished (the same SFT, a
baseline RL run) reuses it. A sweep's own directory keeps what is the sweep's alone.

    results/_store/                     shared by all sweeps (`_`: no sweep's name starts so)
      data/<data_id>/  overlap/<id>/    a datasets task's prepared rows and their overlap checks
      pretrain/<pretrain_id>/           a pretrained base (config.pretrain): the same files as an SFT stage's
      sft/<sft_id>/                     one SFT stage: DONE.json, RUNNING.lock, config.json, checkpoints/step_N/,
                                        LIVE.json (its step between checkpoints), SLURM.json (its SLURM job),
                                        job.log (a local job's stderr; a SLURM job's is submitit's log)
      rl/<run_id>/                      one RL stage (the same files; PRUNED.json when an Optuna pruner stopped it)
      eval/<run_id>/<eval_id>/step_<N>/<group>/DONE.json   one eval job: an RL checkpoint x a benchmark group
      tables/<table>/*.parquet          runs, train_steps, eval_samples, eval_scores (file names: below); one row
                                        set per stage job, whichever sweep ran it (its `sweep` column); each file
                                        sealed with its digest (results/digest.py); packs with their manifests
      mirrors/<table>/packed-*.parquet  a copy of each pack, what `rlsweep doctor --fix` restores a damaged one from
      quarantine/<time>/...             what `rlsweep doctor --fix` moved aside (same relative paths)
    results/<sweep>/
      members/<digest>.parquet          the stage jobs the sweep planned (results/membership.py): its views
      summary.md                        the aggregate stage's table
      report/                           `rlsweep report`: index.html, report.md, queries.sql, figures/*.png|svg
      optuna.journal                    an Optuna study's default storage
      study/trials/trial_N.json         the parameters of every trial the study driver started
      study/logs/trial_N.log            each trial's nested snakemake output

Every function takes strings too, so the Snakefile can pass wildcard patterns ("{run_id}") as ids.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# a stage's id (workflow/identity.py: a hash of its config) is this many hex digits; it names the stage's directory and
# table files, and a name without one is no stage job's (_TABLE_FILE below)
ID_LENGTH = 12
DONE = "DONE.json"  # a stage's last write; the file Snakemake waits for
LIVE = "LIVE.json"  # a training job's step and last metrics between checkpoints (workflow/live.py), for `watch`
JOB_LOG = "job.log"  # a local stage job's stderr, appended by each of its attempts (workflow/capture.py keep_log)
SLURM_RECORD = "SLURM.json"  # the SLURM job the executor last submitted for a stage job (workflow/slurm/executor.py)
CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step_(\d{6,})$")
# a sweep's name names its directory results/<name>/: one plain path component, never "..", never absolute
SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SWEEP_NAME_RULE = "must be 1-64 characters of letters, digits, '_', '.', '-' (it names results/<name>/)"


def sweep_dir(results_root: str | Path, sweep: str) -> Path:
    """results/<sweep>/; a name that is not a sweep's (a path: "../x", "/abs") is refused, so nothing outside the
    results directory is ever read or written as a sweep's."""
    if not SWEEP_NAME.fullmatch(sweep):
        raise ValueError(f"sweep name {sweep!r}: {SWEEP_NAME_RULE}")
    return Path(results_root) / sweep


STORE = "_store"
STAGES = ("data", "overlap", "pretrain", "sft", "rl", "eval")  # the stages with outputs in the store, upstream first


def store_dir(results_root: str | Path) -> Path:
    """results/_store/: every stage output of every sweep, once, by id."""
    return Path(results_root) / STORE


def stage_dir(results_root: str | Path, stage: str, stage_id: str, run_id: str | None = None,
              step: int | str | None = None, group: str | None = None) -> Path:
    """A stage's directory in the store, or (stage eval) one eval job's: the run, the eval id, the step, the group."""
    return _stage_dir_under(store_dir(results_root), stage, stage_id, run_id, step, group)


def stage_dir_text(results_root: str, stage: str, stage_id: str, run_id: str | None = None,
                   step: int | str | None = None, group: str | None = None) -> str:
    """stage_dir as a string, made without a Path: `rlsweep watch` names ~20,000 job directories at its first look
    at a 10,000-run sweep, and each `/` of a Path costs ~2 us (a string join ~0.1)."""
    return "/".join((results_root.rstrip("/") or "/", STORE, *_stage_parts(stage, stage_id, run_id, step, group)))


def _stage_parts(stage: str, stage_id: str, run_id: str | None, step: int | str | None,
                 group: str | None) -> tuple[str, ...]:
    """A stage job's directory below a directory laid out as the store: the one place that says how."""
    if stage == "eval":
        return "eval", str(run_id), stage_id, f"step_{step}", str(group)
    return stage, stage_id


def _stage_dir_under(base: Path, stage: str, stage_id: str, run_id: str | None, step: int | str | None,
                     group: str | None) -> Path:
    """A stage job's directory in `base`, a directory laid out as the store (or a sweep's before the store)."""
    return base.joinpath(*_stage_parts(stage, stage_id, run_id, step, group))


def done_path(results_root: str | Path, stage: str, stage_id: str, run_id: str | None = None,
              step: int | str | None = None, group: str | None = None) -> Path:
    return stage_dir(results_root, stage, stage_id, run_id, step, group) / DONE


def segment_done(results_root: str | Path, stage: str, stage_id: str, end: int | str) -> Path:
    """What the segment job of a training stage that ends at step `end` writes last (workflow/segments.py): beside
    the stage's checkpoints, so an evaluation handed it finds the checkpoint of its step as it finds a DONE.json's."""
    return stage_dir(results_root, stage, stage_id) / f"DONE_{end}.json"


def tables_dir(results_root: str | Path) -> Path:
    """_store/tables/: one folder per table. Only results/ lists them (results/rows.py reads a stage job's rows)."""
    return store_dir(results_root) / "tables"


def table_dir(results_root: str | Path, table: str) -> Path:
    return tables_dir(results_root) / table


def members_dir(results_root: str | Path, sweep: str) -> Path:
    """results/<sweep>/members/: which stage jobs of the store the sweep planned (results/membership.py)."""
    return sweep_dir(results_root, sweep) / "members"


def summary_path(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "summary.md"


def report_dir(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "report"


def quarantine_dir(results_root: str | Path) -> Path:
    return store_dir(results_root) / "quarantine"


@dataclass(frozen=True)
class StageJob:
    """One stage job: a stage and its id; an eval job also has the RL run it evaluates, the step and the group."""

    stage: str
    stage_id: str
    run_id: str | None = None
    step: int | None = None
    group: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(stage, stage id): what a sweep's membership records (an eval id already names its run)."""
        return self.stage, self.stage_id

    def dir(self, results_root: str | Path) -> Path:
        return stage_dir(results_root, self.stage, self.stage_id, self.run_id, self.step, self.group)

    def dir_under(self, base: str | Path) -> Path:
        """Its directory in `base`, laid out as the store (stage_jobs(root=base) found it there)."""
        return _stage_dir_under(Path(base), self.stage, self.stage_id, self.run_id, self.step, self.group)

    def __str__(self) -> str:
        if self.stage == "eval":
            return f"eval {self.stage_id} of run {self.run_id} (step {self.step}, {self.group})"
        return f"{self.stage} {self.stage_id}"


def stage_jobs(results_root: str | Path, root: Path | None = None) -> list[StageJob]:
    """Every stage job that has a directory in the store (or under `root`, laid out as the store is)."""
    root = store_dir(results_root) if root is None else root
    found = [StageJob(stage, p.name) for stage in STAGES if stage != "eval"
             for p in sorted((root / stage).glob("*")) if p.is_dir()]
    for p in sorted((root / "eval").glob("*/*/step_*/*")):
        job = eval_job_at(p)
        if job is not None and p.is_dir():
            found.append(job)
    return found


def eval_job_at(job_dir: str | Path) -> StageJob | None:
    """The eval job a directory belongs to (eval/<run_id>/<eval_id>/step_<N>/<group>), None if it is none."""
    p = Path(job_dir)
    step = p.parent.name.removeprefix("step_")
    if not p.parent.name.startswith("step_") or not step.isdigit() or p.parent.parent.parent.parent.name != "eval":
        return None
    return StageJob("eval", p.parent.parent.name, p.parent.parent.parent.name, int(step), p.name)


# ---------------------------------------------------------------------------------------------- table files
# Every stage job writes its own files, named after it, so a file says whose rows it holds (`rlsweep status` and
# `rlsweep doctor` map an unreadable file back to its stage):
#   runs/<stage>_<id>[_<step>_<group>]           a stage job's row (an eval job adds its step and group)
#   train_steps/<stage>_<id>_<first>-<last>      a training stage's steps, one file per checkpoint interval
#   eval_samples|eval_scores/<run_id>_<eval_id>_step<step>_<benchmark>   one benchmark of one eval job
#   eval_grades/<run_id>_<eval_id>_step<step>_<benchmark>-<grader>    another grader's verdicts on its samples
#   <table>/packed-<seq>-<hex>                    many finished stages' files merged into one (results/packs.py)
PACK_PREFIX = "packed-"  # no stage's file name starts so: the patterns below all need a `_` before any `-`


def pack_file(seq: int, token: str) -> str:
    """A pack's name: `seq` orders a table's packs (the newer holds a stage job's newer rows), `token` is random."""
    return f"{PACK_PREFIX}{seq:06d}-{token}"


def pack_seq(stem: str) -> int:
    return int(_PACK.match(stem)["seq"])


_PACK = re.compile(rf"^{PACK_PREFIX}(?P<seq>\d{{6,}})-[0-9a-f]+$")


def is_pack(stem: str) -> bool:
    return _PACK.match(stem) is not None


def runs_file(stage: str, stage_id: str, step: int | None = None, group: str | None = None) -> str:
    return f"{stage}_{stage_id}" + (f"_{step}_{group}" if stage == "eval" else "")


def train_steps_file(stage: str, run_id: str, first: int, last: int) -> str:
    return f"{stage}_{run_id}_{first:06d}-{last:06d}"


def pack_mirror(pack: str | Path) -> Path:
    """The copy compaction keeps of a pack (`_store/tables/<table>/<pack>`): `_store/mirrors/<table>/<pack>`, out of
    every table folder (no query lists it), from where `rlsweep doctor --fix` restores a damaged pack."""
    pack = Path(pack)
    return pack.parent.parent.parent / "mirrors" / pack.parent.name / pack.name


def train_steps_files(results_root: str | Path, stage: str, run_id: str) -> list[Path]:
    """Every train_steps file of one training stage, in step order."""
    return sorted(table_dir(results_root, "train_steps").glob(f"{stage}_{run_id}_*.parquet"))


def eval_file(run_id: str, eval_id: str, step: int, benchmark: str) -> str:
    return f"{run_id}_{eval_id}_step{step:06d}_{benchmark}"


def grades_file(run_id: str, eval_id: str, step: int, benchmark: str, grader: str) -> str:
    """eval_grades: one grader's verdicts on one benchmark of one eval job (benchmark and grader names hold no `-`)."""
    return f"{eval_file(run_id, eval_id, step, benchmark)}-{grader}"


def rescore_path(results_root: str | Path, eval_id: str, run_id: str, step: int | str, group: str,
                 grader: str) -> Path:
    """The rescore job's output: eval/<run_id>/<eval_id>/step_<N>/<group>/rescored/<grader>.json, in its eval job's
    directory (what the grader found, per benchmark)."""
    return stage_dir(results_root, "eval", eval_id, run_id, step, group) / "rescored" / f"{grader}.json"


# One rule for which table files are stage jobs' (every writer goes through results/writer.write_rows, which refuses
# any other name): a stage job's file names a stage and carries content ids (ID_LENGTH hex digits), so
# `zz_foreign` or `rl_r1` in runs/ is no stage job's, and every view and `rlsweep doctor` report it (issue 45)
_STAGE = "|".join(STAGES)
_ID = rf"[0-9a-f]{{{ID_LENGTH}}}"
_TABLE_FILE = {
    "runs": re.compile(rf"^(?P<stage>{_STAGE})_(?P<stage_id>{_ID})(?:_(?P<step>\d+)_(?P<group>[a-z]+))?$"),
    "train_steps": re.compile(rf"^(?P<stage>{_STAGE})_(?P<stage_id>{_ID})_(?P<first>\d{{6,}})-(?P<last>\d{{6,}})$"),
    "eval_samples": re.compile(rf"^(?P<run_id>{_ID})_(?P<stage_id>{_ID})_step(?P<step>\d{{6,}})_(?P<benchmark>.+)$"),
}
_TABLE_FILE["eval_scores"] = _TABLE_FILE["eval_samples"]
_TABLE_FILE["eval_grades"] = re.compile(rf"^(?P<run_id>{_ID})_(?P<stage_id>{_ID})_step(?P<step>\d{{6,}})_"
                                        r"(?P<benchmark>[^-]+)-(?P<grader>[a-z0-9_]+)$")
TABLE_FILE_RULE = ("a stage job's is <stage>_<id>... in runs and train_steps, <run id>_<eval id>_step<N>_<benchmark>"
                   f"[-<grader>] in the eval tables, each id {ID_LENGTH} hex digits")


@dataclass(frozen=True)
class TableFile:
    """Whose rows a table file holds: the stage job that wrote it (stage eval: run_id is the evaluated RL run)."""

    stage: str
    stage_id: str
    run_id: str | None = None
    step: int | None = None
    group: str | None = None  # runs rows of eval jobs
    benchmark: str | None = None  # eval_samples / eval_scores / eval_grades
    grader: str | None = None  # eval_grades (its rows come from the rescore job of the eval job)
    first: int | None = None  # train_steps: the steps the file holds
    last: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(stage, stage id) of the stage job that wrote it (StageJob.key)."""
        return self.stage, self.stage_id

    def __str__(self) -> str:
        if self.grader is not None:
            return f"{self.grader}'s verdicts on {self.benchmark} at step {self.step} of eval {self.stage_id} of run {self.run_id}"
        if self.benchmark is not None:
            return f"{self.benchmark} at step {self.step} of eval {self.stage_id} of run {self.run_id}"
        if self.first is not None:
            return f"steps {self.first}-{self.last} of {self.stage} {self.stage_id}"
        if self.group is not None:
            return f"eval {self.stage_id} (step {self.step}, {self.group})"
        return f"{self.stage} {self.stage_id}"


_EVAL_TABLES = ("eval_samples", "eval_scores", "eval_grades")


def parse_table_file(table: str, stem: str) -> TableFile | None:
    """The stage job behind a table file's name (without .parquet); None for a name no stage writes."""
    m = _TABLE_FILE[table].match(stem) if table in _TABLE_FILE else None
    if m is None:
        return None
    g = {k: v for k, v in m.groupdict().items() if v is not None}
    ints = {k: int(g[k]) for k in ("step", "first", "last") if k in g}
    if table in _EVAL_TABLES:
        return TableFile("eval", g["stage_id"], run_id=g["run_id"], step=ints["step"], benchmark=g["benchmark"],
                         grader=g.get("grader"))
    if table == "runs" and (g["stage"] == "eval") != ("group" in g):
        return None  # only an eval job's runs file names a step and a group
    return TableFile(g["stage"], g["stage_id"], group=g.get("group"), **ints)


def table_file_key(table: str, stem: str) -> tuple[str, str] | None:
    """(stage, stage id) of the stage job whose rows a table file (or a pack's source) holds: what a sweep's
    membership records (StageJob.key); None for a name no stage writes. parse_table_file's answer, read from the
    match alone: a sweep's query asks it of every stem a pack holds (tens of thousands at a thousand runs)."""
    m = _TABLE_FILE[table].match(stem) if table in _TABLE_FILE else None
    if m is None:
        return None
    if table in _EVAL_TABLES:
        return "eval", m["stage_id"]
    if table == "runs" and (m["stage"] == "eval") != (m["group"] is not None):
        return None  # (as parse_table_file: only an eval job's runs file names a step and a group)
    return m["stage"], m["stage_id"]


# ---------------------------------------------------------------------------------------------- checkpoints
def step_dir(checkpoints: str | Path, step: int) -> Path:
    """`checkpoints/step_000040`: a complete checkpoint (written to a temporary and renamed into place)."""
    return Path(checkpoints) / f"step_{step:06d}"


def list_checkpoints(checkpoints: str | Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint, oldest first."""
    root = Path(checkpoints)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(checkpoints: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(checkpoints)
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------- Optuna studies
def study_dir(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "study"


def default_journal(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "optuna.journal"


def trial_record(results_root: str | Path, sweep: str, number: int) -> Path:
    return study_dir(results_root, sweep) / "trials" / f"trial_{number:05d}.json"


def trial_records(results_root: str | Path, sweep: str) -> list[Path]:
    return sorted((study_dir(results_root, sweep) / "trials").glob("trial_*.json"))


def trial_log(results_root: str | Path, sweep: str, number: int) -> Path:
    return study_dir(results_root, sweep) / "logs" / f"trial_{number:05d}.log"


def design_dir(results_root: str | Path, sweep: str) -> Path:
    """results/<sweep>/design/: a design of seeds on demand, its rounds and decisions (workflow/design/)."""
    return sweep_dir(results_root, sweep) / "design"


def design_done(results_root: str | Path, sweep: str, key: str, budget: float | None) -> Path:
    """A design driver's DONE file: named by the design (workflow/design/rounds.py design_key: a changed design is
    another target, which the driver refuses with a message) and its budget (a raised one continues the design)."""
    return design_dir(results_root, sweep) / (f"DONE_{key}" + (f"_b{budget:g}" if budget is not None else "") + ".json")


def round_record(results_root: str | Path, sweep: str, number: int) -> Path:
    return design_dir(results_root, sweep) / "rounds" / f"round_{number:03d}.json"


def round_records(results_root: str | Path, sweep: str) -> list[Path]:
    return sorted((design_dir(results_root, sweep) / "rounds").glob("round_*.json"))


def round_log(results_root: str | Path, sweep: str, number: int) -> Path:
    return design_dir(results_root, sweep) / "logs" / f"round_{number:03d}.log"


def decisions_dir(results_root: str | Path, sweep: str) -> Path:
    """results/<sweep>/design/decisions/: one Parquet file per look, the catalog's view `decisions`."""
    return design_dir(results_root, sweep) / "decisions"

