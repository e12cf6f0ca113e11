"""DuckDB over the Parquet tables: views `runs`, `train_steps`, `eval_samples`, `eval_scores`, read-only.

Read-only is enforced below SQL, where no statement can undo it:
- DuckDB's own file system is switched off (`disabled_filesystems = 'LocalFileSystem'`, external access off, the
  configuration locked), so no statement opens a local file: not COPY ... TO, EXPORT DATABASE, ATTACH, INSTALL,
  read_csv('/etc/passwd'), nor any of them nested inside EXPLAIN ANALYZE or a multi-statement string.
- The views read the table files through a file system registered from Python (SQL cannot register, replace or
  unregister one) that opens the readable table files for reading and nothing else: a write, delete, rename or
  mkdir raises. DuckDB's own Parquet reader still does the reading, so queries run at its speed.
- Before any of that, statements other than SELECT / EXPLAIN are refused, with a friendlier message.

An unreadable file (empty, truncated, not Parquet, or a Parquet file whose columns are not the table's) is left
out of the views and listed in `Catalog.damaged`, so one bad file never takes every query down; so is a readable file
whose name no stage job writes (`Catalog.foreign`: a copy, a file dropped there by hand), in a sweep's views and
every sweep's alike. `Catalog.left_out` is all of them, with the sweeps' unreadable records of their stage jobs.

A table's files are the stages' own small files and the packs compaction merged them into: the views read each row
once, from where packs.resolve says it lives.

The tables hold every sweep's rows once (results/_store/, layout.py); the view `membership` (sweep, stage, stage_id,
label) says which sweeps planned which stage job (results/membership.py); the view `decisions`, what designs of seeds
on demand decided, round by round and pair by pair (results/decisions.py). A catalog of one sweep reads only its
members' files (by name, before opening them) and rows, with `sweep` set to that sweep and an RL run's or eval's
`label` to the sweep's own; a catalog of every sweep reads each row once, `sweep` naming the sweep that computed it.
"""

from __future__ import annotations

import datetime as dt
import os
import resource
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from workflow.errors import UserError
from workflow.layout import (SWEEP_NAME, SWEEP_NAME_RULE, TABLE_FILE_RULE, TableFile, is_pack, parse_table_file,
                             table_dir, table_file_key)
from workflow.results.files import UNREADABLE, PositionalReader, arrow_file, open_regular
from workflow.results import decisions as design_decisions
from workflow.results.membership import MEMBERS, damage, member_files, members, recorded_sweeps
from workflow.results.packs import SOURCE, TableLayout, pack_holders, read_manifest, read_pack, resolve
from workflow.results.schemas import TABLES, schema as table_schema
from workflow.results.verdicts import Verdicts, check_file

_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
PROTOCOL = "rlsweep-ro"  # how the views name the table files: rlsweep-ro:///abs/path.parquet


class QueryError(UserError):
    """SQL that is not read-only, fails, or has nothing to read."""


@dataclass(frozen=True)
class QueryLimits:
    """What one query may take: a runaway (a cross join, `range(10^12)`) is stopped with a message instead of
    holding the machine. The defaults suit a laptop; `rlsweep query --timeout S --memory SIZE` raises them."""

    timeout_s: float = 300.0
    memory: str = "4GB"  # DuckDB's memory_limit (its default is 80% of the machine's memory)


@dataclass(frozen=True)
class Damaged:
    """A file the catalog leaves out, and why: an unreadable table file or members record, or (`foreign`) a readable
    file under a table's folder whose name no stage job writes (layout.TABLE_FILE_RULE)."""

    table: str  # the table whose folder holds it ("members": a sweep's record of its stage jobs)
    path: Path
    reason: str
    foreign: bool = False
    # a pack's: the stage jobs whose rows it held, (stage, stage id) (None: nothing says, a pack from before manifests
    # whose footer is gone)
    holds: list[tuple[str, str]] | None = field(default=None, compare=False)

    @property
    def is_pack(self) -> bool:
        return is_pack(self.path.stem)

    @property
    def owner(self) -> TableFile | None:
        """The stage job whose rows the file was meant to hold (None: a name no stage writes)."""
        return parse_table_file(self.table, self.path.stem)

    @property
    def jobs(self) -> list[tuple[str, str]]:
        """The stage jobs whose rows it held, (stage, stage id): a pack's many (none known: []), a file's one."""
        if self.is_pack:
            return list(self.holds or [])
        return [self.owner.key] if self.owner is not None else []


def sql_str(s: str) -> str:
    """A string literal in DuckDB's SQL."""
    return "'" + s.replace("'", "''") + "'"


# ----------------------------------------------------------------------------------------------- the files
def table_files(results_root: str | Path) -> dict[str, list[Path]]:
    """Every `*.parquet` of each table. Temporaries (`.<name>.tmp-<pid>`) never match."""
    return {table: sorted(table_dir(results_root, table).glob("*.parquet")) for table in TABLES}


def member_of(keys, table: str, stem: str) -> bool:
    """Whether a table file's rows (named by `stem`: a stage's own file, or a pack's source) belong to one of the
    stage jobs `keys` ((stage, stage id) pairs)."""
    return table_file_key(table, stem) in keys


def _compatible(found: pa.DataType, expected: pa.DataType) -> bool:
    """A column type DuckDB reads as the table's own without error (an all-null column, an int for a float)."""
    return (found == expected or pa.types.is_null(found)
            or (pa.types.is_integer(found) and (pa.types.is_integer(expected) or pa.types.is_floating(expected)))
            or (pa.types.is_floating(found) and pa.types.is_floating(expected))
            or (pa.types.is_timestamp(found) and pa.types.is_timestamp(expected))
            or (pa.types.is_string(expected) and (pa.types.is_string(found) or pa.types.is_large_string(found))))


def foreign_columns(table: str, schema: pa.Schema) -> str | None:
    """Why a readable Parquet file is not a file of `table` (None: it is). Every file a stage writes has run_id; a
    column the table also has must have the table's type. Columns the table lacks are ignored (runs' hyperparameters),
    and so are columns missing from the file (an older file: they read as null)."""
    expected = table_schema(table)
    if "run_id" not in schema.names:
        return f"not a file of table {table}: no run_id column (columns: {', '.join(schema.names[:8]) or 'none'})"
    clashes = [f"{f.name} is {f.type}, not {expected.field(f.name).type}" for f in schema
               if f.name in expected.names and not _compatible(f.type, expected.field(f.name).type)]
    return f"not a file of table {table}: {'; '.join(clashes)}" if clashes else None


def read_schema(table: str, fd: int, deep: bool = False, path: Path | None = None,
                verdicts: Verdicts | None = None) -> tuple[pa.Schema | None, str | None]:
    """(the schema of the file open as `fd`, None) when DuckDB can read it as part of `table` and its bytes are those
    written, else (None, why not). The footer tells an empty, truncated or non-Parquet file; the digest (digest.py)
    changed bytes anywhere else, checked once per file identity (`verdicts`, keyed by `path`) or, `deep`, every time
    (rlsweep doctor), which also decodes in full a file written before digests. `fd` stays open."""
    try:
        with arrow_file(fd) as f:
            schema = pq.read_schema(f)
        reason = foreign_columns(table, schema)
        if reason:
            return None, reason
        reason = check_file(path, fd, verdicts, deep) if path is not None else None
        if reason:
            return None, reason
    except UNREADABLE as e:
        return None, str(e).strip().rstrip(".") or type(e).__name__
    return schema, None


def descriptor_budget(wanted: int) -> int:
    """How many table files a catalog may hold open (it reads each through the descriptor it listed it with):
    the process's limit raised to its hard limit if that helps, less a margin for everything else."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if wanted + 256 > soft and soft != resource.RLIM_INFINITY:
        target = wanted + 256 if hard == resource.RLIM_INFINITY else min(hard, wanted + 256)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(soft - 256, 0)


class ReadOnlyFiles(AbstractFileSystem):
    """The only file system the catalog's DuckDB connection has: these files, opened for reading. Everything that
    would change a file raises (DuckDB's CreateDirectory / RemoveFile / MoveFile / a write handle land here).
    `files` maps each path to the descriptor the catalog listed it with (None: opened by name, past the process's
    descriptor limit): DuckDB reads exactly what the listing saw, even if a writer has replaced the file since."""

    protocol = PROTOCOL
    cachable = False  # fsspec would otherwise hand this instance (and its file list) to the next catalog

    def __init__(self, files: dict[str, int | None]):
        super().__init__()
        self.files = files
        self.stats: dict[str, dict] = {}  # DuckDB asks for a file's size and time several times per query
        self.vanished = False  # a file opened by name was gone (a compaction finished meanwhile): list again

    def _listed(self, path: str) -> str:
        path = self._strip_protocol(path)
        if path not in self.files:
            raise PermissionError(f"{path} is not a result table's file (read-only catalog)")
        return path

    def _open(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise PermissionError(f"{path} cannot be written (read-only catalog)")
        path = self._listed(path)
        fd = self.files[path]
        if fd is not None:
            return PositionalReader(os.dup(fd))
        try:
            return PositionalReader.of(path)
        except FileNotFoundError:
            self.vanished = True
            raise

    def info(self, path, **kwargs):
        path = self._listed(path)
        if path not in self.stats:
            fd = self.files[path]
            try:
                st = os.fstat(fd) if fd is not None else os.stat(path)
            except FileNotFoundError:
                self.vanished = True
                raise
            self.stats[path] = {"name": path, "size": st.st_size, "type": "file", "mtime": st.st_mtime}
        return self.stats[path]

    def ls(self, path, detail=True, **kwargs):
        return [self.info(path) if detail else self._listed(path)]

    def modified(self, path):
        return dt.datetime.fromtimestamp(self.info(path)["mtime"], tz=dt.timezone.utc)

    def _refuse(self, path, *args, **kwargs):
        raise PermissionError(f"{path} cannot be changed (read-only catalog)")

    mkdir = makedirs = rmdir = rm = rm_file = _rm = mv = copy = cp_file = put_file = pipe_file = touch = _refuse


# --------------------------------------------------------------------------------------------- the catalog
class Catalog:
    """The result tables under `results_root` (one sweep's, or every sweep's): the readable files of each table,
    the unreadable ones (`damaged`), and read-only SQL over the readable ones."""

    def __init__(self, results_root: str | Path = "results", sweep: str | None = None, deep: bool = False,
                 planned=(), excluding=()):
        """`deep`: decode every file in full, not only its footer (slower; `rlsweep doctor`). `planned`: the
        sweep's stage jobs as its file plans them now (membership.Member: Sweep.members()), members too before
        Snakemake has recorded them (`rlsweep plan` of a sweep that has not run yet sees what it would reuse).
        `excluding`: (stage, stage id) pairs whose own small files are not opened at all (a caller that has read
        them already: `rlsweep watch` asking the rest of the store; rows of theirs that a pack holds still read)."""
        if sweep is not None and not SWEEP_NAME.fullmatch(sweep):  # a path would read outside the results
            raise QueryError(f"sweep {sweep!r}: {SWEEP_NAME_RULE}")
        self.root, self.sweep, self.deep, self._planned = Path(results_root).resolve(), sweep, deep, list(planned)
        # the sweep's stage jobs and labels (None: every sweep's rows)
        self.members = ({**members(self.root, sweep), **{(m.stage, m.stage_id): m.label for m in planned}}
                        if sweep is not None else None)
        # the sweeps' records of their stage jobs: a damaged one is left out of the `membership` view (every other
        # record, and every other sweep, still answers) and reported, like a damaged table file
        self.member_files, self.damaged_members = [], []
        for path in member_files(self.root, sweep):
            reason = damage(path, deep)
            if reason is None:
                self.member_files.append(path)
            else:
                self.damaged_members.append(Damaged("members", path, reason))
        # what designs of seeds on demand decided (the view `decisions`): a damaged file is left out and reported
        self.decision_files, self.damaged_decisions = [], []
        for path in design_decisions.decision_files(self.root, sweep):
            reason = design_decisions.damage(path, deep)
            (self.decision_files if reason is None else self.damaged_decisions).append(
                path if reason is None else Damaged("decisions", path, reason))
        self.layouts: dict[str, TableLayout] = {}  # per table: the live small files and packs (packs.py)
        self.schemas: dict[str, list[pa.Schema]] = {}  # the distinct schemas of each table's small files
        self.pack_schemas: dict[str, list[pa.Schema]] = {}  # and of its packs (without their source column)
        self.damaged: list[Damaged] = []
        self.foreign: list[Damaged] = []  # readable, but under a name no stage job writes: in no view
        self.fds: dict[str, int | None] = {}  # every readable file: the descriptor it was listed with
        listing = table_files(self.root)
        every = {str(p.relative_to(self.root)) for paths in listing.values() for p in paths}
        self.verdicts = Verdicts(self.root)  # the files whose digest was checked (deep: checked again regardless)
        if self.members is not None:  # by name, before opening: another sweep's files cost nothing
            # (a name no stage writes belongs to no sweep: listed only to be reported)
            listing = {t: [p for p in paths if is_pack(p.stem) or table_file_key(t, p.stem) is None
                           or member_of(self.members, t, p.stem)] for t, paths in listing.items()}
        if excluding:
            skip = set(excluding)
            listing = {t: [p for p in paths if is_pack(p.stem) or table_file_key(t, p.stem) not in skip]
                       for t, paths in listing.items()}
        budget = descriptor_budget(sum(map(len, listing.values())))
        for table, paths in listing.items():
            small, packs, broken, schemas = [], [], [], {}
            for path in paths:  # ~0.1 ms a file (threads do not help: building the schema holds the GIL)
                try:
                    fd = open_regular(path)
                except FileNotFoundError:  # removed since the glob (packed by a compaction): not a table file now
                    continue
                except OSError as e:  # a symlink, a FIFO: reported, never followed or read
                    self.damaged.append(Damaged(table, path, e.strerror or str(e)))
                    continue
                schema, reason = read_schema(table, fd, deep, path, self.verdicts)
                pack = read_pack(path, schema) if schema is not None else None
                # a readable file under a name no stage writes is no stage job's: in no view, whoever asks
                foreign = pack is None and table_file_key(table, path.stem) is None
                if schema is None or foreign or len(self.fds) >= budget:
                    os.close(fd)
                if schema is None:
                    self.damaged.append(Damaged(table, path, reason))
                    manifest = read_manifest(path) if is_pack(path.stem) else None
                    if manifest is not None:
                        broken.append(manifest.pack(path))
                    continue
                if foreign:
                    self.foreign.append(Damaged(table, path, f"no stage job writes this name ({TABLE_FILE_RULE})",
                                                foreign=True))
                    continue
                self.fds[str(path)] = fd if len(self.fds) < budget else None
                (packs if pack else small).append(pack or path)
                schemas[path] = schema.remove(schema.get_field_index(SOURCE)) if pack else schema
            layout = resolve(table, small, packs, broken)
            if self.members is not None:
                layout = layout.only(lambda stem, t=table: member_of(self.members, t, stem),
                                     lambda key: key in self.members)
            self.layouts[table] = layout
            self.schemas[table] = _distinct(schemas[p] for p in layout.files)
            self.pack_schemas[table] = _distinct(schemas[p] for p in layout.packs)
        self.verdicts.save(listed=every)
        # a damaged pack: whose rows it held, from its manifest (its footer may be gone)
        self.damaged = [replace(d, holds=pack_holders(d.path)) if is_pack(d.path.stem) else d for d in self.damaged]

    def close(self) -> None:
        """Close the table files (a catalog holds each readable one open from its listing on)."""
        for fd in getattr(self, "fds", {}).values():
            if fd is not None:
                os.close(fd)
        self.fds = {}

    def __del__(self) -> None:
        self.close()

    @property
    def left_out(self) -> list[Damaged]:
        """Every file under the store's table folders and the sweeps' records that no view reads: a query warns
        about each, `rlsweep doctor` lists each."""
        return [*self.damaged_members, *self.damaged_decisions, *self.damaged, *self.foreign]

    @property
    def files(self) -> dict[str, list[Path]]:
        """Each table's files a query reads: live small files and packs."""
        return {table: layout.readable for table, layout in self.layouts.items()}

    def _where(self) -> str:
        return f"sweep {self.sweep!r} of {self.root}" if self.sweep else f"{self.root}"

    def check_available(self) -> None:
        """QueryError unless there is something to query: a missing directory or sweep is a mistake, not a table
        of zero rows."""
        if not self.root.is_dir():
            raise QueryError(f"no results directory {self.root} (set --results or $RLSWEEP_RESULTS)")
        if not any(self.files.values()):
            known = recorded_sweeps(self.root)
            if self.sweep is not None and self.damaged_members:  # (first: why the sweep's own files are not known)
                files = "; ".join(f"{d.path} ({d.reason})" for d in self.damaged_members)
                raise QueryError(f"the record of which stage jobs sweep {self.sweep!r} planned does not read: "
                                 f"{files}. `rlsweep doctor --sweep {self.sweep} --fix` rebuilds it from the runs rows, `rlsweep "
                                 "doctor SWEEP.yaml --fix` from the sweep file's plan")
            if self.damaged or self.foreign:
                raise QueryError(f"every table file under {self._where()} is unreadable or no stage job's "
                                 f"({len(self.damaged) + len(self.foreign)} files); `rlsweep doctor` lists them")
            if self.sweep is not None:
                raise QueryError(f"no results for sweep {self.sweep!r} under {self.root} "
                                 f"(sweeps with results: {', '.join(known) or 'none'})")
            raise QueryError(f"no result tables under {self.root} yet")

    def connect(self, limits: QueryLimits = QueryLimits(), tables=TABLES) -> duckdb.DuckDBPyConnection:
        """A read-only connection with the view of each of `tables` (every table by default) and `membership`.
        Creating a view binds it (opens the first file of each part), so a query makes only the views it reads
        (`tables_read`)."""
        self.check_available()
        con = duckdb.connect(":memory:")
        try:  # no spilling to disk: the catalog writes nothing (past the bound a query stops, saying so)
            con.execute("SET temp_directory = ''")
            con.execute(f"SET memory_limit = {sql_str(limits.memory)}")
        except duckdb.Error as e:
            con.close()
            raise QueryError(f"memory limit {limits.memory!r}: {_message(e)} (a size such as 4GB or 512MB)") from None
        readable = {str(p): self.fds[str(p)] for paths in self.files.values() for p in paths}
        self.file_system = ReadOnlyFiles({**readable, **{str(p): None for p in self.member_files},
                                          **{str(p): None for p in self.decision_files}})
        con.register_filesystem(self.file_system)
        self._create_membership(con)
        source = (_read(self.decision_files, [design_decisions.DECISIONS]) if self.decision_files else
                  f"({_no_rows(design_decisions.DECISIONS)})")
        con.execute(f"CREATE VIEW decisions AS SELECT * FROM {source}")
        for table in tables:
            self._create_view(con, table, table_schema(table))
        # this order: disabling the file system first would refuse the next SET; the lock makes all of it final
        con.execute(f"SET allowed_directories = [{sql_str(f'{PROTOCOL}://{self.root}/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET disabled_filesystems = 'LocalFileSystem'")
        con.execute("SET lock_configuration = true")
        return con

    def _create_membership(self, con: duckdb.DuckDBPyConnection) -> None:
        """The view `membership`: which sweep planned which stage job, under which label (the newest recording)."""
        columns = "sweep, stage, stage_id, arg_max(label, recorded_at) AS label"
        source = (_read(self.member_files, [MEMBERS]) if self.member_files else
                  f"({_no_rows(MEMBERS)})")
        con.execute(f"CREATE VIEW membership AS SELECT {columns} FROM {source} GROUP BY sweep, stage, stage_id")

    def _create_view(self, con: duckdb.DuckDBPyConnection, table: str, schema: pa.Schema) -> None:
        """The readable files, by column name; a column of the table no file has yet reads as null (an older
        file, a table with no files yet), so every query binds on every sweep."""
        con.execute(f"CREATE VIEW _{table}_columns AS {_no_rows(schema)}")
        layout, schemas = self.layouts[table], self.schemas[table] + self.pack_schemas[table]
        parts = []
        if layout.files:
            parts.append(f"SELECT * FROM {_read(layout.files, self.schemas[table])}")
        whole = [p for p in layout.packs if not layout.hidden[p]]
        if whole:
            parts.append(f"SELECT * EXCLUDE ({SOURCE}) FROM {_read(whole, self.pack_schemas[table])}")
        for pack in (p for p in layout.packs if layout.hidden[p]):  # less the stage jobs written anew since (and
            # in a sweep's catalog, other sweeps' stage jobs): whichever of the two lists is the shorter
            hidden, kept = layout.hidden[pack], set(layout.sources[pack]) - layout.hidden[pack]
            which, stems = ("NOT IN", hidden) if len(hidden) <= len(kept) else ("IN", kept)
            parts.append(f"SELECT * EXCLUDE ({SOURCE}) FROM {_read([pack], self.pack_schemas[table])} "
                         f"WHERE {SOURCE} {which} ({', '.join(map(sql_str, sorted(stems)))})")
        if not parts or any(all(name not in s.names for s in schemas) for name in schema.names):
            parts.insert(0, f"SELECT * FROM _{table}_columns")  # only then: a union costs
        rows = " UNION ALL BY NAME ".join(parts)
        if self.sweep is not None:  # the sweep's view: its name, and its labels; runs.computed_by keeps the sweep
            name = sql_str(self.sweep)  # whose job computed the stage (another one's, for a stage this one reused)
            if table == "runs":
                rows = (f"SELECT r.* REPLACE ({name} AS sweep, coalesce(m.label, r.label) AS label), "
                        f"r.sweep AS computed_by FROM ({rows}) r LEFT JOIN membership m "
                        f"ON m.sweep = {name} AND m.stage = r.stage AND m.stage_id = r.run_id")
            else:
                rows = f"SELECT * REPLACE ({name} AS sweep) FROM ({rows})"
        elif table == "runs":
            rows = f"SELECT *, sweep AS computed_by FROM ({rows})"
        con.execute(f"CREATE VIEW {table} AS {rows}")

    def recheck(self) -> bool:
        """List the files again, checking every one in full whatever the verdicts say (as `rlsweep doctor` does);
        True when that finds damage the listing had not (those files are then left out, and in `damaged`). What
        a query that DuckDB cannot decode does: a file whose bytes changed beneath an unchanged identity (bit rot on
        the disk) passed its verdict, and DuckDB's message would not name it."""
        before = {d.path for d in self.damaged}
        self.close()
        self.__init__(self.root, self.sweep, True, self._planned)
        return bool({d.path for d in self.damaged} - before)

    def query(self, sql: str, limits: QueryLimits = QueryLimits()) -> pa.Table:
        return self.queries({"": sql}, limits)[""]

    def queries(self, sqls: Mapping[str, str], limits: QueryLimits = QueryLimits()) -> dict[str, pa.Table]:
        """Several queries by name, over one connection: each connection binds the views its queries read again
        (~0.1 s for all of them), a report's dozen queries paid that a dozen times. Each query has the time bound of
        its own."""
        parsed = {name: _read_only_statements(sql) for name, sql in sqls.items()}
        tables = tables_read([s for statements in parsed.values() for s in statements])
        for attempt in (1, 2):
            con = None
            try:
                con = self.connect(limits, tables)  # (binding the views opens the first file of each)
                return {name: _bounded(con, statements, limits) for name, statements in parsed.items()}
            except duckdb.Error as e:
                if attempt == 1 and self.file_system.vanished:  # packed and removed since the listing: list again
                    self.close()
                    self.__init__(self.root, self.sweep, self.deep, self._planned)
                    continue
                if attempt == 1 and _maybe_damage(e) and self.recheck():  # bytes that changed after their verdict
                    continue
                raise QueryError(_message(e) + (_DAMAGE_HINT if self.deep and _maybe_damage(e) else "")) from None
            finally:
                if con is not None:
                    con.close()


def _bounded(con: duckdb.DuckDBPyConnection, statements: list, limits: QueryLimits) -> pa.Table:
    """Run the statements in a worker thread, so that this one can stop them: past the time bound, or on Ctrl-C
    (a KeyboardInterrupt reaches Python only between bytecodes, never inside DuckDB's call). The wait is on an
    Event, not Thread.join: a KeyboardInterrupt inside join leaves the thread looking finished while it runs."""
    out: dict[str, object] = {}
    done = threading.Event()
    cursor = con.cursor()  # the worker's own handle on the database: this thread may interrupt it meanwhile

    def work() -> None:
        try:
            result = None
            for s in statements:
                result = cursor.sql(s.query).to_arrow_table()
            out["result"] = result
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = e
        finally:
            done.set()

    def stop() -> None:
        # an interrupt that arrives before the worker's statement has started is lost (DuckDB interrupts what
        # runs): interrupt again until the worker is done (or never ran: a thread that was not started)
        while True:
            cursor.interrupt()
            if done.wait(0.1) or not worker.is_alive():
                return

    # A Ctrl-C while the worker starts is noted, not raised: a KeyboardInterrupt inside Thread.start() could leave a
    # query running that nothing stops, and closing the connection then waits for it (hours). Blocking SIGINT in
    # this thread is not enough: the kernel then hands it to one of DuckDB's threads, and Python raises it here at
    # the next bytecode anyway (under a loaded CI the query's start and the test's Ctrl-C met so, and the process
    # never exited). Once the worker runs, a Ctrl-C noted meanwhile is raised where the except below stops it.
    worker = threading.Thread(target=work, name="rlsweep-query", daemon=True)
    noted: list[int] = []
    own = threading.current_thread() is threading.main_thread()  # (only the main thread may set handlers)
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: noted.append(1)) if own else None
        try:
            worker.start()
        finally:
            if own:
                signal.signal(signal.SIGINT, previous)
        if noted:
            raise KeyboardInterrupt
        # waited in short slices: a Ctrl-C that the kernel hands to another thread (one of DuckDB's) only sets
        # Python's flag, which the main thread acts on when it next runs bytecode: a single wait of the whole time
        # bound left Ctrl-C unanswered for minutes on a loaded machine
        deadline = time.monotonic() + limits.timeout_s
        while not done.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                stop()
                raise QueryError(f"stopped after {limits.timeout_s:g} s, the query's time bound (`rlsweep query "
                                 "--timeout SECONDS` raises it)")
    except KeyboardInterrupt:
        stop()
        raise
    finally:
        if done.is_set() or not worker.is_alive():
            cursor.close()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["result"]  # type: ignore[return-value]


def _read(files: list[Path], schemas: list[pa.Schema]) -> str:
    """read_parquet over the files; with one schema (a table's files as one writer writes them) DuckDB binds on the
    first file alone, instead of opening every file to merge their columns by name."""
    listed = ", ".join(sql_str(f"{PROTOCOL}://{p}") for p in files)
    return f"read_parquet([{listed}], union_by_name = {str(len(schemas) > 1).lower()})"


def _distinct(schemas) -> list[pa.Schema]:
    out: list[pa.Schema] = []
    for schema in schemas:
        if not any(schema.equals(s) for s in out):
            out.append(schema)
    return out


_SQL_TYPES = {pa.bool_(): "BOOLEAN", pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.float64(): "DOUBLE",
              pa.string(): "VARCHAR", pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ", pa.list_(pa.int64()): "BIGINT[]",
              pa.list_(pa.float64()): "DOUBLE[]", pa.list_(pa.string()): "VARCHAR[]"}


def _no_rows(schema: pa.Schema) -> str:
    """A SELECT of no rows with the table's columns and types. Plain SQL: handing DuckDB an empty Arrow table
    (register / from_arrow) makes it import pandas, ~0.3 s of every `rlsweep query`."""
    columns = ", ".join(f"CAST(NULL AS {_SQL_TYPES[f.type]}) AS {f.name}" for f in schema)
    return f"SELECT {columns} WHERE false"


# errors of the statement itself: no table file's bytes can be their cause
_STATEMENT_ERRORS = tuple(getattr(duckdb, n) for n in (
    "ParserException", "SyntaxException", "BinderException", "CatalogException", "PermissionException",
    "InterruptException", "OutOfMemoryException", "NotImplementedException") if hasattr(duckdb, n))
_DAMAGE_HINT = (" (DuckDB could not read the rows; every table file was checked again in full and each one's bytes "
                "are those written, so a cause in the files is one from before digests: `rlsweep doctor` decodes "
                "every file and names a damaged one)")


def _maybe_damage(e: duckdb.Error) -> bool:
    """Whether a failed query may have met a damaged file (DuckDB's decoders say so only in their own words)."""
    return not isinstance(e, _STATEMENT_ERRORS) and "(read-only catalog)" not in str(e)


def _message(e: duckdb.Error) -> str:
    """DuckDB's message, and for a refused file a clear `read-only:`. An error raised in our file system arrives
    with its Python traceback: its last line says it."""
    text = str(e).strip()
    if "Traceback (most recent call last)" in text:
        text = text.splitlines()[-1].removeprefix("PermissionError: ")
    if isinstance(e, duckdb.PermissionException) or text.endswith("(read-only catalog)"):
        return f"read-only: the query tried to write a file, or to read one that is not a result table ({text})"
    if isinstance(e, duckdb.OutOfMemoryException):  # (DuckDB's advice that follows is about its own settings)
        return f"{text.splitlines()[0]} (the query's memory bound; `rlsweep query --memory SIZE` raises it)"
    return text


# what a statement that reads the catalog itself names (the views it lists are every table's only when all are made)
_CATALOG_READS = ("duckdb_", "information_schema", "pg_catalog", "sqlite_master", "show", "describe", "summarize",
                  "pragma")


def tables_read(statements: list) -> tuple[str, ...]:
    """The result tables whose views these statements read, in TABLES' order: the tables they name, or every table
    for a statement that names none of them, or reads the catalog's own listings (SHOW TABLES, duckdb_views(),
    ...), or that DuckDB cannot list the tables of (its error then comes from running it)."""
    named: set[str] = set()
    for s in statements:
        text = s.query.lower()
        try:
            found = duckdb.get_table_names(s.query)
        except duckdb.Error:
            return TABLES
        if any(word in text for word in _CATALOG_READS) or not found & {*TABLES, "membership"}:
            return TABLES
        named |= found
    return tuple(t for t in TABLES if t in named)


def _read_only_statements(sql: str) -> list:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(str(e)) from None
    if not statements:
        raise QueryError("empty query")
    bad = [s.type.name for s in statements if s.type not in _ALLOWED]
    if bad:
        raise QueryError(f"read-only: only SELECT / EXPLAIN queries are allowed (got {', '.join(bad)})")
    return statements


def query(sql: str, results_root: str | Path = "results", sweep: str | None = None,
          limits: QueryLimits = QueryLimits()) -> pa.Table:
    """Read-only SQL over the readable table files (a Catalog's `damaged` lists the files left out)."""
    return Catalog(results_root, sweep).query(sql, limits)
