"""`rlsweep doctor`: what is wrong with a sweep's results on disk, and how to recompute it. A sweep's results are
the stage jobs it planned (results/membership.py) in the shared store (results/_store/, layout.py): the doctor
examines those, their table files, the store's leftover temporaries and the sweep's own study journal.

What it checks:
- every table file, read in full: an empty, truncated or non-Parquet file, or a Parquet file whose columns are not
  the table's, is damaged (queries leave it out and warn); a damaged pack (compaction.py) takes many stages' rows
  with it, and each of those stages then shows up below as DONE.json without rows; a readable file under a name no
  stage job writes (layout.TABLE_FILE_RULE) is foreign (queries leave it out and warn);
- the sweep's records of its stage jobs (results/membership.py): an unreadable one is damaged;
- leftover temporaries (`.<name>.tmp-<pid>`, workflow/atomic.py): writes whose process died before the rename;
- each stage directory's DONE.json against the tables: DONE.json present but rows of the stage missing (its runs
  row, any of its train_steps steps, an eval job's rows for one of its benchmarks), and runs rows saying
  `completed` for a stage with no DONE.json.

How recomputing works: Snakemake's targets are the DONE.json files, never table files, so removing a table file
reruns nothing. Nor does removing a DONE.json by itself, when the stages after it are done: Snakemake rebuilds a
missing DONE.json only when it is asked for (`snakemake ... <that DONE.json>`) or a job after it must run (an eval
job's is needed by the summary, an SFT or RL stage's is not). A training stage that reruns resumes from its last
checkpoint and never trains (or logs) the steps before it again, so recomputing train_steps rows means training the
stage again from scratch: without its checkpoints, and without its other train_steps files (a preempted attempt's
off-interval files would hold some steps twice). Once a stage has run again, a plain `snakemake` reruns the stages
after it (their input is newer); an RL stage after a retrained SFT stage resumes at its own final checkpoint, so it
keeps what it learned from the SFT checkpoint it started from.

`--fix` does exactly that, by moving, never deleting: what each problem lists goes to
results/_store/quarantine/<UTC time>/ under its path in the store (a sweep's own file: in the results directory), so
nothing computed is lost; then
`snakemake` recomputes. A stage whose directory holds RUNNING.lock is left alone (it is running, or its job died;
the next run of the stage takes over a dead owner's lock).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from workflow.atomic import parse_temporary, temporary_sibling, write_bytes
from workflow.benchmarks.catalog import REGISTRY
from workflow.layout import (CHECKPOINTS, DONE, StageJob, TableFile, default_journal, pack_mirror, parse_table_file,
                             quarantine_dir, stage_jobs, store_dir, sweep_dir, table_dir, tables_dir, train_steps_files)
from workflow.results import digest
from workflow.results.catalog import Catalog, Damaged, QueryError, sql_str
from workflow.results.files import UNREADABLE, arrow_file, open_regular
from workflow.results.membership import sweeps_of
from workflow.results.packs import Pack, manifest_path, read_manifest, read_pack, resolve, table_layout
from workflow.results.verdicts import check_file
from workflow.runlock import LOCK_NAME
from workflow.results.journal import inspect as inspect_journal

# which id of a sweep's run names the stage's id
_RUN_KEY = {"data": "data_id", "overlap": "overlap_id", "pretrain": "pretrain_id", "sft": "sft_id", "rl": "run_id",
            "eval": "eval_id"}
_TRAINING = ("pretrain", "sft", "rl")  # the stages that write train_steps, a row per step


@dataclass
class Problem:
    kind: str  # damaged | foreign | temporary | done-without-rows | rows-without-done | unrecorded
    subject: Path  # the file or stage directory concerned
    what: str  # what is wrong
    recompute: str  # how the missing results come back (or why nothing needs to)
    move: list[Path] = field(default_factory=list)  # what --fix moves to quarantine
    job: StageJob | None = None
    locked: Path | None = None  # the RUNNING.lock that keeps --fix away
    target: Path | None = None  # the DONE.json to ask Snakemake for
    restore: bytes | None = None  # what --fix writes in place of the moved file (a study journal's intact records)
    replace_with: Path | None = None  # what --fix copies into the place of the (moved) subject: a pack's mirror
    covers: set[StageJob] = field(default_factory=set)  # stage jobs whose missing rows this problem accounts for


@dataclass
class Report:
    sweep: str
    results: str  # the results directory as given (Snakemake names its targets under it)
    root: Path  # the results directory, resolved (paths are shown relative to it)
    problems: list[Problem]
    n_files: int  # readable table files
    n_jobs: int  # the sweep's stage directories
    sweep_file: str | None = None
    n_unsealed: int = 0  # readable table files without a digest (written before digests: results/digest.py)


def affected_runs(damaged: Damaged, runs) -> list[str]:
    """The ids of the sweep's runs (workflow.sweep.expand.Run) whose stage wrote the damaged file (a pack: whose
    stage jobs' rows it held)."""
    wanted = set(damaged.jobs)
    return [r.run_id for r in runs
            if any((stage, getattr(r, key, None)) in wanted for stage, key in _RUN_KEY.items())]


# ------------------------------------------------------------------------------------------------- examine
def examine(results_root: str | Path, sweep: str, sweep_file: str | None = None,
            planned: Callable[[], list] | None = None, also: tuple[str, ...] = ()) -> Report:
    """The sweep's problems. `sweep_file` and `planned` (the stage jobs its plan lists, membership.Member: the
    caller that read the sweep file passes them, called only for a damaged record) let --fix rebuild a damaged record
    of the sweep from its plan. `also`: other sweeps whose stage jobs --fix may mark for recomputing too, where a
    damaged pack without an intact mirror holds rows of theirs (without, they are named and left alone)."""
    root = Path(results_root).resolve()
    catalog = Catalog(root, sweep, deep=True)
    jobs = [j for j in stage_jobs(root) if j.key in catalog.members]
    problems = []
    for d in catalog.damaged:
        problems += damaged_pack(root, d, sweep, catalog.members, also) if d.is_pack else [damaged_file(root, d)]
    problems += [foreign_file(d) for d in catalog.foreign]
    problems += [damaged_record(root, d, sweep, sweep_file, planned) for d in catalog.damaged_members]
    if not (catalog.member_files or catalog.damaged_members or default_journal(root, sweep).exists()):
        # never "healthy" about a sweep it knows nothing of (an Optuna study's journal alone is something to check)
        problems.append(Problem("unrecorded", sweep_dir(root, sweep) / "members",
                                f"no record of which stage jobs sweep {sweep!r} planned: nothing of it can be checked "
                                "or queried", "running the sweep records it first (`snakemake --config "
                                "sweep=SWEEP.yaml`; a dry run, -n, writes nothing)"))
    problems += leftover_temporaries(root, sweep)
    problems += damaged_journal(root, sweep)
    problems += disagreements(root, catalog, jobs,
                              done_with={p.job for p in problems if p.job} | {j for p in problems for j in p.covers})
    unsealed = sum(not digest.is_sealed(p) for paths in catalog.files.values() for p in paths)
    return Report(sweep, str(results_root), root, problems, sum(map(len, catalog.files.values())), len(jobs),
                  sweep_file, unsealed)


def damaged_journal(root: Path, sweep: str) -> list[Problem]:
    """The sweep's Optuna journal (results/<sweep>/optuna.journal) when a line of it does not read (results/journal.py):
    --fix moves it to quarantine and puts back the records before the damage."""
    damage = inspect_journal(default_journal(root, sweep))
    if damage is None:
        return []
    kept = damage.line - 1
    return [Problem("damaged", damage.path, str(damage), f"the study resumes from the {kept} intact record(s): a "
                    "trial whose records were after the damage is lost and proposed anew (its finished runs stay in "
                    "the tables and Snakemake does not train them again)", [damage.path], restore=damage.intact)]


def damaged_record(root: Path, d: Damaged, sweep: str, sweep_file: str | None,
                   planned: Callable[[], list] | None) -> Problem:
    """A sweep's record of its stage jobs (results/membership.py) that does not read: the sweep's views lack what it
    lists. --fix moves it to quarantine and writes it anew: from the sweep file's plan when given, else from the runs
    rows of the stage jobs the sweep computed, with their labels (as `rlsweep migrate` does)."""
    from workflow.results.membership import record_bytes  # noqa: PLC0415 - only for a damaged record
    what = f"unreadable membership record of sweep {sweep!r}: {d.reason}"
    with_file = "`rlsweep doctor SWEEP.yaml --fix` writes it from the sweep file's plan (nothing runs)"
    if sweep_file is not None and planned is not None:
        return Problem("damaged", d.path, what, f"--fix writes it anew from {sweep_file}'s plan (no stage reruns)",
                       [d.path], restore=record_bytes(sweep, planned()))
    computed = computed_by(root, sweep)
    if not computed:
        return Problem("damaged", d.path, what, f"no runs row names sweep {sweep!r}, so only its plan can rebuild it: "
                       f"{with_file}; running the sweep again (`snakemake --config sweep=SWEEP.yaml`) records it anew "
                       "too", [d.path])
    return Problem("damaged", d.path, what, f"--fix writes it anew from the runs rows of the {len(computed)} stage "
                   f"jobs sweep {sweep!r} computed, with their labels (no stage reruns); the stage jobs it reused from "
                   f"other sweeps are missing from that: {with_file}", [d.path], restore=record_bytes(sweep, computed))


def computed_by(root: Path, sweep: str) -> list:
    """The stage jobs (membership.Member) whose runs rows say `sweep` computed them, each with its label there."""
    from workflow.results.membership import Member  # noqa: PLC0415
    try:
        rows = Catalog(root).query(f"SELECT DISTINCT stage, run_id, label FROM runs WHERE sweep = {sql_str(sweep)}")
    except QueryError:  # no readable runs file at all
        return []
    return [Member(r["stage"], r["run_id"], r["label"]) for r in rows.to_pylist()]


def owning_job(root: Path, owner: TableFile) -> StageJob | None:
    """The stage job whose directory and DONE.json go with a table file (an eval job's file names the run or the
    group, not both: the other comes from the directory layout or the benchmark registry)."""
    if owner.stage != "eval":
        return StageJob(owner.stage, owner.stage_id)
    evaluated = (p.parent.name for p in (store_dir(root) / "eval").glob(f"*/{owner.stage_id}"))
    run_id = owner.run_id or next(evaluated, None)  # eval/<run_id>/<eval_id>/...
    group = owner.group or (REGISTRY[owner.benchmark].group if owner.benchmark in REGISTRY else None)
    return StageJob("eval", owner.stage_id, run_id, owner.step, group) if run_id and group else None


def damaged_file(root: Path, d: Damaged) -> Problem:
    where = f"{d.table} file {d.path.name}"
    owner = d.owner
    if owner is None:
        return Problem("damaged", d.path, f"unreadable {where}: {d.reason}",
                       "not a file of rlsweep's (no stage writes that name): nothing to recompute", [d.path])
    what = f"unreadable {where} ({owner}): {d.reason}"
    job = owning_job(root, owner)
    if job is None or not job.dir(root).is_dir():
        return Problem("damaged", d.path, what, "no stage directory holds its stage, so nothing reruns "
                       "it: its rows are gone from the queries either way", [d.path], job)
    return rerun(root, job, "damaged", d.path, what, [d.path], retrain=d.table == "train_steps")


def damaged_pack(root: Path, d: Damaged, sweep: str, mine, also: tuple[str, ...]) -> list[Problem]:
    """A pack that does not read, or whose bytes are not those written: the rows of many stage jobs, often of several
    sweeps. The doctor names each of them, from the pack's manifest (packs.py; its footer may be gone), as readers
    would have taken their rows (less what newer writings superseded), with the sweeps that planned it. They come back
    one of two ways:
    - restored: the pack's mirror (compaction.py), when its bytes are intact and are the pack's (the manifest's
      digest): --fix puts the damaged pack in quarantine and a copy of the mirror in its place, every sweep's rows
      back byte for byte, nothing retrained;
    - recomputed, without an intact mirror: a stage job is marked to run again (`rerun`: its DONE.json, and for
      train_steps its checkpoints, moved aside), with what runs after it listed. For this sweep's stage jobs --fix
      does that; another sweep's it only names, and acts on with `--also SWEEP`, since they are that sweep's results
      to lose. The pack (with its manifest and mirror) goes to quarantine once every stage job whose rows it held is
      marked; until then it stays where it is, and queries go on leaving it out with a warning that names it."""
    table, pack = d.table, d.path
    contents = packed_contents(pack)
    header = f"damaged {table} pack {pack.name}: {d.reason}"
    mirror = intact_mirror(pack)
    if contents is None:
        if mirror is not None:
            return [Problem("damaged", pack, f"{header}; whose rows it held neither a manifest nor its footer says",
                            "--fix restores it from its mirror: nothing reruns", [pack], replace_with=mirror)]
        return [Problem("damaged", pack, f"{header}; neither a manifest nor its footer says whose rows it held (a pack "
                        "from before manifests)", "its stages' rows are gone from the queries; each of those stages "
                        "is listed below as having DONE.json without its rows, and recomputes as that says", [pack])]
    visible = visible_stems(root, table, contents)
    jobs: dict[StageJob | tuple[str, str], None] = {}  # (a stage job without a directory: by its key)
    for stem in visible:
        owner = parse_table_file(table, stem)
        if owner is not None:
            jobs[owning_job(root, owner) or owner.key] = None
    keys = {job: job.key if isinstance(job, StageJob) else job for job in jobs}
    sweeps = sweeps_of(root, set(keys.values()))
    names = {job: [s for s, ks in sweeps.items() if keys[job] in ks] for job in jobs}
    held = ", ".join(f"{s} ({sum(s in names[job] for job in jobs)})" for s in sweeps) or "none"
    what = (f"{header}; it held the rows of {len(jobs)} stage job(s), of sweep(s) {held}: "
            + "; ".join(f"{job if isinstance(job, StageJob) else ' '.join(job)} ({', '.join(names[job]) or 'no sweep'})"
                        for job in sorted(jobs, key=str)))
    if not visible:
        what = f"{header}; every row it held is read from elsewhere (a newer pack or files)"
    covers = {job for job in jobs if isinstance(job, StageJob) and job.key in mine}
    if mirror is not None:
        return [Problem("damaged", pack, what, f"--fix restores it from its mirror ({mirror.relative_to(root)}), "
                        "every sweep's rows back as they were written: nothing reruns", [pack], replace_with=mirror,
                        covers=covers)]
    problems, left = [], {}
    for job in jobs:
        if not isinstance(job, StageJob) or not job.dir(root).is_dir() or not names[job]:
            continue  # no stage directory, or no sweep plans it: nothing to rerun, and no one's results to lose
        if not (job.key in mine or any(s in also for s in names[job])):
            left[job] = names[job]
            continue
        problems.append(rerun(root, job, "damaged", pack, f"{job}: its {table} rows were in damaged pack {pack.name}, "
                              f"whose mirror is gone or damaged too{downstream_note(root, job, mine)}", [],
                              retrain=table == "train_steps"))
    recompute = [f"its mirror is gone or damaged too, so its rows come back only by running their stage jobs again"]
    if problems:
        recompute.append(f"{len(problems)} stage job(s) of this sweep rerun (below)")
    if left:
        others = sorted({s for ss in left.values() for s in ss})
        recompute.append(
            f"the rows of {len(left)} stage job(s) of other sweeps, which --fix for {sweep!r} does not decide: "
            + "; ".join(f"{job} ({', '.join(v)})" for job, v in left.items())
            + f". The pack stays in place (queries go on naming it) until `rlsweep doctor --sweep OTHER --fix` for "
            f"each of {', '.join(others)}, or this --fix with {' '.join(f'--also {s}' for s in others)}, marks them")
    move = [] if left else [p for p in (pack, manifest_path(pack), pack_mirror(pack)) if p.exists()]
    problems.insert(0, Problem("damaged", pack, what, "; ".join(recompute), move, covers=covers))
    return problems


def intact_mirror(pack: Path) -> Path | None:
    """The pack's mirror when it reads in full and is the pack compaction wrote (its digest the manifest's, when the
    pack has a manifest); None otherwise."""
    mirror = pack_mirror(pack)
    try:
        fd = open_regular(mirror)
    except OSError:
        return None
    try:
        if check_file(mirror, fd, deep=True) is not None:
            return None
        verdict = digest.check(fd)
    except UNREADABLE:
        return None
    finally:
        os.close(fd)
    manifest = read_manifest(pack)
    return mirror if manifest is None or manifest.sha256 in (None, verdict.digest) else None


def packed_contents(pack: Path):
    """What a pack held (packs.Pack: stems, fingerprints, packs it replaced): from its manifest, else from its footer
    if that reads; None when neither says."""
    manifest = read_manifest(pack)
    if manifest is not None:
        return manifest.pack(pack)
    try:
        with arrow_file(pack) as f:
            return read_pack(pack, pq.read_schema(f))
    except UNREADABLE:
        return None


def visible_stems(root: Path, table: str, pack) -> list[str]:
    """The stems of a damaged pack whose rows readers would take from it if it read (less what newer packs or small
    files supersede; none if a newer pack replaced it)."""
    layout = table_layout(table_dir(root, table), table)
    others = [Pack(p, layout.sources[p], layout.replaces.get(p, ())) for p in layout.packs if p != pack.path]
    view = resolve(table, [*layout.files, *layout.leftovers], [*others, pack])
    if pack.path not in view.packs:
        return []
    return [stem for stem in pack.sources if stem not in view.hidden[pack.path]]


def downstream_note(root: Path, job: StageJob, mine) -> str:
    """What reruns after `job` once it has run again (their input is newer): the stage jobs made from it, at any
    remove, this sweep's named and other sweeps' counted."""
    after = downstream(root, job)
    if not after:
        return ""
    ours = [j for j in after if j.key in mine]
    shown = ", ".join(map(str, ours[:6])) + (f" and {len(ours) - 6} more" if len(ours) > 6 else "")
    theirs = len(after) - len(ours)
    return (f"; after it, {len(ours)} stage job(s) of this sweep rerun too" + (f" ({shown})" if ours else "")
            + (f", and {theirs} of other sweeps when those run next" if theirs else ""))


def downstream(root: Path, job: StageJob) -> list[StageJob]:
    """The stage jobs made from `job`, directly or not: a stage's config names what it was made from by id
    (`<stage>_id`), an eval job's directory the run it evaluates."""
    made_from: dict[StageJob, set[tuple[str, str]]] = {}
    for j in stage_jobs(root):
        try:
            cfg = json.loads((j.dir(root) / "config.json").read_text())
        except (OSError, ValueError):
            cfg = {}
        parents = {(stage, cfg[key]) for stage, key in _RUN_KEY.items()
                   if stage not in ("eval", "rl") and isinstance(cfg, dict) and isinstance(cfg.get(key), str)}
        if j.stage == "eval" and j.run_id:
            parents.add(("rl", j.run_id))
        made_from[j] = parents - {j.key}
    found, frontier = [], {job.key}
    while frontier:
        step = [j for j, parents in made_from.items() if parents & frontier and j not in found]
        found += step
        frontier = {j.key for j in step}
    return found


def foreign_file(d: Damaged) -> Problem:
    """A readable file in a table's folder under a name no stage job writes: no view reads it, nothing made it that
    could remake it. --fix moves it to quarantine (where DuckDB or pyarrow still read it)."""
    return Problem("foreign", d.path, f"{d.table} file {d.path.name} is no stage job's, so no query reads it: "
                   f"{d.reason}", "nothing to recompute (no stage wrote it); to keep its rows, read it where --fix puts it", [d.path])


def rerun(root: Path, job: StageJob, kind: str, subject: Path, what: str, files: list[Path],
          retrain: bool) -> Problem:
    """The problem, with what makes Snakemake recompute the stage's rows: its DONE.json gone (and asked for), and
    for train_steps rows a training from scratch."""
    jdir = job.dir(root)
    segments = segment_files(root, job)
    # a stage trained in segments (workflow/segments.py) is Snakemake's through DONE_<end>.json, the last segment's
    # the target; its DONE.json no rule makes
    target = max(segments, key=_segment_end) if segments else jdir / DONE
    move = [*files, *[p for p in (jdir / DONE,) if p.is_file()]]
    after = "; then a plain `snakemake` reruns the stages after it (their input is newer)"
    if retrain:
        # its small files by name are right: once it trains again, its first new file hides every row of it that
        # a pack holds (packs.owner_key), so the packed rows need not move; every segment trains again
        own = train_steps_files(root, job.stage, job.stage_id)
        move += [p for p in (*own, jdir / CHECKPOINTS, *segments) if p.exists() and p not in move]
        how = (f"{job} trains again from scratch (with its checkpoints in place it would resume from the last one "
               f"and never log the earlier steps again){after}")
    elif job.stage in _TRAINING:
        if segments and target.is_file():
            move.append(target)  # (the last segment reruns: it resumes at its checkpoint, the run's final step)
        how = f"{job} resumes at its final checkpoint (no training) and writes its runs row again{after}"
    else:
        how = f"{job} runs again" + ("" if job.stage == "eval" else after)
    lock = jdir / LOCK_NAME
    return Problem(kind, subject, what, how, move, job, lock if lock.exists() else None, target)


def segment_files(root: Path, job: StageJob) -> list[Path]:
    """A segmented stage's DONE_<end>.json files (workflow/segments.py): in its directory, or, once --fix moved them,
    under the quarantine (the job's segments, whose last is the Snakemake target that retrains it)."""
    if job.stage != "rl":
        return []
    jdir = job.dir(root)
    found = sorted(jdir.glob("DONE_*.json"), key=_segment_end)
    if found:
        return found
    rel = jdir.relative_to(store_dir(root))
    moved = {p.name for p in quarantine_dir(root).glob(f"*/{rel}/DONE_*.json")}
    return sorted((jdir / name for name in moved), key=_segment_end)


def _segment_end(path: Path) -> int:
    end = path.stem.removeprefix("DONE_")
    return int(end) if end.isdigit() else -1


def leftover_temporaries(root: Path, sweep: str) -> list[Problem]:
    """Temporaries in the store (every sweep's: a dead write is nobody's) and in the sweep's own directory."""
    quarantined = quarantine_dir(root)
    out = []
    for path in sorted([*store_dir(root).rglob(".*.tmp-*"), *sweep_dir(root, sweep).rglob(".*.tmp-*")]):
        parsed = parse_temporary(path)
        if parsed is None or quarantined in path.parents or _being_written(root, path, parsed):
            continue
        out.append(Problem("temporary", path, f"leftover temporary {path.relative_to(root)}: a write by pid "
                           f"{parsed[1]} that never finished (nothing reads it)", "nothing to recompute", [path]))
    return out


def own_temporaries(root: Path, job_dir: Path) -> list[Path]:
    """The temporaries a stage job's earlier attempts left: under its directory, and of the table files it owns.
    Its job removes them on starting, holding RUNNING.lock: no other process writes those files then, so each is
    dead whatever its pid says (a pid may belong to another node)."""
    out = [p for p in job_dir.rglob(".*.tmp-*") if parse_temporary(p) and not any(
        parse_temporary(d) for d in p.parents if job_dir in d.parents)]  # a temporary directory's contents go with it
    for path in tables_dir(root).glob("*/.*.tmp-*"):
        parsed = parse_temporary(path)
        owner = parse_table_file(path.parent.name, Path(parsed[0]).stem) if parsed else None
        job = owning_job(root, owner) if owner else None
        if job is not None and job.dir(root).resolve() == job_dir.resolve():
            out.append(path)
    return sorted(out)


def _being_written(root: Path, path: Path, parsed: tuple[str, int]) -> bool:
    """Whether a temporary may still be in use: its writer's pid lives on this host, or its stage holds
    RUNNING.lock. Either errs towards leaving it alone (a pid of another node may be alive here by chance)."""
    name, pid = parsed
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        pass
    except PermissionError:
        return True
    base = store_dir(root)
    if path.parent.parent == base / "tables":  # a table file: its stage's directory has the lock
        owner = parse_table_file(path.parent.name, Path(name).stem)
        job = owning_job(root, owner) if owner else None
        return job is not None and (job.dir(root) / LOCK_NAME).exists()
    return any((d / LOCK_NAME).exists() for d in path.parents if base in d.parents)


# ------------------------------------------------------------------------------------ DONE.json vs the tables
def _rows(catalog: Catalog) -> tuple[dict[StageJob, dict], dict[tuple[str, str], int], set[tuple]]:
    """The runs rows by stage job, the number of distinct train steps by (stage, id), and the (table, run_id,
    eval_id, step, benchmark) that have eval rows."""
    try:
        runs = catalog.query("SELECT * FROM runs").to_pylist()
        steps = catalog.query("SELECT stage, run_id, count(DISTINCT step) AS n FROM train_steps WHERE step >= 1 "
                              "GROUP BY ALL").to_pylist()
        evals = catalog.query("SELECT DISTINCT 'eval_scores' AS t, run_id, eval_id, step, benchmark FROM eval_scores "
                              "UNION SELECT DISTINCT 'eval_samples', run_id, eval_id, step, benchmark "
                              "FROM eval_samples UNION SELECT DISTINCT 'eval_grades:' || grader, run_id, eval_id, "
                              "step, benchmark FROM eval_grades").to_pylist()
    except QueryError:  # no readable table at all: every DONE.json is missing its rows
        runs, steps, evals = [], [], []
    by_job = {}
    for r in runs:
        job = (StageJob("eval", r["run_id"], r.get("parent_id"), r.get("eval_step"), r.get("eval_group"))
               if r["stage"] == "eval" else StageJob(r["stage"], r["run_id"]))
        by_job[job] = r
    return (by_job, {(s["stage"], s["run_id"]): s["n"] for s in steps},
            {(e["t"], e["run_id"], e["eval_id"], e["step"], e["benchmark"]) for e in evals})


def disagreements(root: Path, catalog: Catalog, jobs: list[StageJob],
                  done_with: set[StageJob]) -> list[Problem]:
    """Stage jobs whose DONE.json and table rows disagree; `done_with`: jobs a damaged file already covers."""
    runs, steps, evals = _rows(catalog)
    out = []
    for job in jobs:
        done = job.dir(root) / DONE
        if job in done_with or not done.is_file():
            continue
        reasons, retrain = missing_rows(job, done, runs, steps, evals)
        if reasons:
            out.append(rerun(root, job, "done-without-rows", job.dir(root),
                             f"{job} has DONE.json but {'; '.join(reasons)}", [], retrain))
        elif job.stage == "eval":
            out += rescores_without_rows(job, done.parent, evals)
    for job, row in runs.items():
        if row.get("status") == "completed" and job not in done_with and not (job.dir(root) / DONE).is_file():
            out.append(Problem("rows-without-done", job.dir(root),
                               f"the runs row of {job} says completed but it has no DONE.json",
                               "the stage runs again and overwrites its rows (if the sweep still has it); until then "
                               "queries count it as completed", job=job, target=job.dir(root) / DONE))
    return out


def missing_rows(job: StageJob, done: Path, runs: dict, steps: dict, evals: set) -> tuple[list[str], bool]:
    """Why the tables lack rows the stage's DONE.json promises, and whether only training again recomputes them."""
    try:
        final = json.loads(done.read_text()).get("step")
    except (OSError, ValueError):
        return ["its DONE.json is unreadable"], False
    row = runs.get(job)
    reasons = (["runs has no row for it"] if row is None else
               [f"its runs row says {row.get('status')}"] if row.get("status") != "completed" else [])
    if job.stage in _TRAINING and final is not None and steps.get((job.stage, job.stage_id), 0) < final:
        reasons.append(f"train_steps holds {steps.get((job.stage, job.stage_id), 0)} of its {final} steps")
        return reasons, True
    if job.stage == "eval":
        for table in ("eval_scores", "eval_samples"):
            lacking = [b for b in _group_benchmarks(done.parent, job.group)
                       if (table, job.run_id, job.stage_id, job.step, b) not in evals]
            reasons += [f"{table} has no rows for {', '.join(lacking)}"] if lacking else []
    return reasons, False


def rescores_without_rows(job: StageJob, job_dir: Path, evals: set) -> list[Problem]:
    """An eval job's rescore markers (rescored/<grader>.json: rule rescore's output) whose eval_grades rows are
    missing: moving the marker aside makes the rescore run again (`rlsweep rescore`, or snakemake when the sweep
    lists the grader in eval.graders)."""
    out = []
    for marker in sorted((job_dir / "rescored").glob("*.json")):
        try:
            judged = list(json.loads(marker.read_text())["benchmarks"])
        except (OSError, ValueError, KeyError, TypeError):
            judged = ["(its marker is unreadable)"]
        lacking = [b for b in judged if (f"eval_grades:{marker.stem}", job.run_id, job.stage_id, job.step, b)
                   not in evals]
        if lacking:
            out.append(Problem("done-without-rows", marker,
                               f"{marker.stem} rescored {job} but eval_grades has no rows for {', '.join(lacking)}",
                               f"`rlsweep rescore SWEEP.yaml --graders {marker.stem}` judges it again (snakemake does "
                               "when the sweep lists the grader)", [marker], job, None, None))
    return out


def _group_benchmarks(job_dir: Path, group: str | None) -> list[str]:
    """The benchmarks an eval job evaluates: its config's benchmarks of its group (none if its config is gone)."""
    try:
        names = json.loads((job_dir / "config.json").read_text())["eval"]["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [b for b in names if b in REGISTRY and REGISTRY[b].group == group]


# ------------------------------------------------------------------------------------------------------ fix
def quarantine(report: Report) -> tuple[Path, list[tuple[Path, Path]]]:
    """Move what each problem lists (except a locked stage's) under quarantine/<UTC time>/, and copy a damaged pack's
    mirror into its place; returns the moves and copies, (from, to)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target, store = quarantine_dir(report.root) / stamp, store_dir(report.root)
    moved = []
    for problem in report.problems:
        if problem.locked is not None:
            continue
        if problem.replace_with is not None:  # (the mirror copied in beside it first: a reader never lacks the rows)
            copy = temporary_sibling(problem.subject)
            shutil.copyfile(problem.replace_with, copy)
        for src in problem.move:
            if not (src.exists() or src.is_symlink()):  # listed by an earlier problem too, and moved with it
                continue
            # a store path keeps its path in the store; a sweep's own file (its journal) its path in the results
            dst = target / src.relative_to(store if store in src.parents else report.root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if problem.replace_with is not None and src == problem.subject:
                os.link(src, dst)  # (aside by a second name, then the copy over it: never a moment without the pack)
                os.replace(copy, src)
                moved += [(src, dst), (problem.replace_with, src)]  # (aside, and the mirror copied in its place)
                continue
            os.replace(src, dst)  # the same file system: a rename, however large a checkpoint directory is
            moved.append((src, dst))
        if problem.restore is not None:
            write_bytes(problem.subject, problem.restore)
    return target, moved


# --------------------------------------------------------------------------------------------------- report
def snakemake_command(report: Report, targets: list[Path]) -> str:
    """The `snakemake` call that rebuilds these DONE.json files, named as the Snakefile names them (targets first:
    --config takes every word after it)."""
    config = [f"sweep={report.sweep_file or 'SWEEP.yaml'}"] + ([f"results={report.results}"]
                                                               if report.results != "results" else [])
    names = [str(Path(report.results) / t.relative_to(report.root)) for t in targets]
    return " ".join(["snakemake", *map(shlex.quote, names), "--config", *map(shlex.quote, config)])


def report_lines(report: Report, moved: list[tuple[Path, Path]] | None = None) -> list[str]:
    """The problems, each with how to recompute it and what --fix moves (paths relative to the results)."""
    def rel(p: Path) -> str:
        return str(p.relative_to(report.root)) if report.root in p.parents else str(p)

    lines = []
    for p in report.problems:
        lines += [f"{p.kind}: {rel(p.subject)}", f"  {p.what}"]
        if p.target is not None:
            first = "move what --fix moves (below) aside, then run " if p.move else "run "
            lines.append(f"  recompute: {first}{snakemake_command(report, [p.target])}: {p.recompute}")
        else:
            lines.append(f"  recompute: {p.recompute}")
        if p.locked is not None:
            lines.append(f"  --fix leaves it alone: {rel(p.locked)} exists (the stage is running, or its job died)")
        else:
            if p.move:
                lines.append(f"  --fix moves: {', '.join(rel(m) for m in p.move)}")
            if p.replace_with is not None:
                lines.append(f"  --fix then copies {rel(p.replace_with)} to {rel(p.subject)}")
    aside = quarantine_dir(report.root)
    back = [(src, dst) for src, dst in moved or [] if aside not in dst.parents]
    if back:
        lines += ["restored from mirrors:", *(f"  {rel(src)} -> {rel(dst)}" for src, dst in back)]
    if moved and len(back) < len(moved):
        lines += ["moved to quarantine:", *(f"  {rel(src)} -> {rel(dst)}" for src, dst in moved if (src, dst) not in back)]
    return lines


def nothing_left(report: Report) -> bool:
    """Whether --fix, once done, leaves nothing to do: every problem moved aside, rewritten or put back, none locked,
    no stage job to recompute, no damaged pack left in place."""
    return all((p.move or p.restore is not None) and p.locked is None and p.target is None for p in report.problems)


def summary_line(report: Report, fixed: bool) -> str:
    if not report.problems and report.n_files == report.n_jobs == 0:
        return f"{report.sweep}: nothing run yet (no table files, no stage directories)"
    unsealed = (f"; {report.n_unsealed} of the table files are from before digests, so a change in one that still "
                "decodes is not seen: the next `rlsweep compact` packs them into sealed packs" if report.n_unsealed
                else "")
    if not report.problems:
        return (f"{report.sweep}: healthy ({report.n_files} table files readable, {report.n_jobs} stage directories "
                f"agree with the tables{unsealed})")
    targets = list(dict.fromkeys(p.target for p in report.problems if p.target is not None and p.locked is None))
    rebuild = f"`{snakemake_command(report, targets)}`, then `snakemake`" if targets else "`snakemake`"
    if fixed and nothing_left(report):
        # each was moved aside (or rewritten) and no stage job has to run again
        return f"{report.sweep}: {len(report.problems)} problem(s) under {report.root} fixed; nothing to recompute"
    then = (f"now run {rebuild} to recompute" if fixed else
            f"`rlsweep doctor --fix` moves what is listed to quarantine (nothing is deleted); then run {rebuild}")
    return f"{report.sweep}: {len(report.problems)} problem(s) under {report.root}; {then}"
