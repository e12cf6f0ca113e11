"""Packs: many small table files merged into one, and which rows a reader takes when both exist.

Every stage job writes its own small files (layout.py names them after it). At a thousand runs that is tens of
thousands of files, and a query's time grows with the file count, not only the rows. Compaction (compaction.py)
merges finished stages' files into a pack per table and round: `<table>/packed-<seq>-<hex>.parquet`, every row with
the stem of the file it came from in the column `packed_from`, and in the file's footer:
    rlsweep.pack         {"owners": {"<stage>/<stage id>": [stem, ...], ...},   each packed file's name, by the
                                                                                stage job that wrote it
                          "replaces": [pack file names]}     older packs whose rows this one took over
    rlsweep.pack.prints  [[size, mtime_ns, inode], ...]      each packed file as it was when packed (stems' order)
Every query reads the stems; a sweep's query keeps its stage jobs' stems by owner, not by parsing each name; the
fingerprints are decoded only when a small file of a packed name is still there (a leftover or a rewrite), which
after a compaction is never. At a thousand runs those two were most of a query's fixed cost (issue 64). A pack
written before them holds {"sources": {stem: fingerprint}, "replaces": [...]} under `rlsweep.pack` alone, and reads
as before.

Beside each pack, its manifest `<pack stem>.manifest.json` (written before the pack takes its name) holds the same
owners, fingerprints and replaced packs, with the pack's size and digest (digest.py): a pack cut short loses its
footer, and with it the list of whose rows it held; the manifest keeps it where damage to the pack cannot take it, so
`rlsweep doctor` can name those stage jobs and their sweeps, and put back each one's packed files from where
compaction kept them (compaction.py: the stage job's `rows/` folder). No query reads a manifest.

Compaction writes the pack (atomically), then moves what it packed aside. Whatever moment a reader looks at, or a crash
stops compaction at, `resolve` gives every row exactly once:
- a pack that another readable pack replaces is retired: its rows are read from the newer one;
- a small file still there exactly as it was packed (same size, mtime and inode) is a leftover: its rows are read
  from the pack;
- each stage job's rows come from its newest writing only: its live small files if it has any (a stage that ran
  again after compaction: a forced rerun, `rlsweep doctor --fix`, an Optuna trial annotating its runs row), else
  the pack with the highest seq that holds it. Its rows in older packs are hidden (`hidden`: per pack, the stems
  left out).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import is_pack, pack_seq, parse_table_file, table_file_key
from workflow.results.files import UNREADABLE, arrow_file

SOURCE = "packed_from"  # a pack's column: the stem of the file each row was written to
META_KEY = b"rlsweep.pack"


MANIFEST = ".manifest.json"


def manifest_path(pack: Path) -> Path:
    return pack.with_name(pack.stem + MANIFEST)


@dataclass(frozen=True)
class Manifest:
    """What a pack held, as its manifest says: the stems by stage job ("<stage>/<id>"; "" for names no stage writes),
    each stem's fingerprint (owners' order), the packs it replaced, and its own size and digest."""

    table: str
    owners: dict[str, list[str]]
    prints: list
    replaces: tuple[str, ...]
    size: int | None
    sha256: str | None

    @property
    def jobs(self) -> list[tuple[str, str]]:
        """The stage jobs whose rows the pack held, (stage, stage id)."""
        return [tuple(k.split("/", 1)) for k in self.owners if k]

    def pack(self, path: Path) -> "Pack":
        """The pack as readers would take it if it read (resolve: which of its rows are superseded)."""
        return Pack(path, Sources(self.owners, json.dumps(self.prints).encode()), self.replaces)


def write_manifest(pack: Path, table: str, meta: Mapping[bytes, str], size: int, sha256: str) -> Path:
    """The manifest of `pack` (meta: its footer entries, pack_metadata), written atomically."""
    from workflow.atomic import write_text  # noqa: PLC0415 - (kept out of the query's imports)
    body = json.loads(meta[META_KEY])
    return write_text(manifest_path(pack), json.dumps(
        {"table": table, "owners": body["owners"], "replaces": body["replaces"], "prints": json.loads(meta[PRINTS_KEY]),
         "size": size, "sha256": sha256}, separators=(",", ":")))


def read_manifest(pack: Path) -> Manifest | None:
    """A pack's manifest; None when it has none (a pack written before manifests) or it does not read."""
    try:
        m = json.loads(manifest_path(pack).read_text())
        return Manifest(m["table"], dict(m["owners"]), list(m["prints"]), tuple(m.get("replaces", ())),
                        m.get("size"), m.get("sha256"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pack_holders(pack: Path) -> list[tuple[str, str]] | None:
    """The stage jobs whose rows a pack holds, from its manifest, else from its footer if that reads; None: neither
    says (a pack from before manifests whose footer is gone)."""
    manifest = read_manifest(pack)
    if manifest is not None:
        return manifest.jobs
    try:
        with arrow_file(pack) as f:
            raw = (pq.read_schema(f).metadata or {}).get(META_KEY)
        meta = json.loads(raw) if raw is not None else None
    except UNREADABLE:
        return None
    if not isinstance(meta, dict):
        return None
    if "owners" in meta:
        return [tuple(k.split("/", 1)) for k in meta["owners"] if k]
    table = pack.parent.name
    return list(dict.fromkeys(key for stem in meta.get("sources", {}) if (key := table_file_key(table, stem))))


def fingerprint(path: Path) -> list[int]:
    """What tells a file apart from a rewrite under the same name (writes are renames: a new inode, a new mtime)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


PRINTS_KEY = b"rlsweep.pack.prints"


def pack_metadata(table: str, sources: Mapping[str, list[int]], replaces: list[str]) -> dict[bytes, str]:
    """A pack's footer entries (module docstring) for the files of `table` it packs (stem -> fingerprint)."""
    owners: dict[str, list[str]] = {}
    for stem in sources:
        key = table_file_key(table, stem)
        owners.setdefault("/".join(key) if key else "", []).append(stem)
    compact = {"separators": (",", ":")}
    return {META_KEY: json.dumps({"owners": owners, "replaces": replaces}, **compact),
            PRINTS_KEY: json.dumps([sources[stem] for stems in owners.values() for stem in stems], **compact)}


class Sources(Mapping):
    """A pack's stems -> the fingerprints of the files they were, the fingerprints decoded on first use; `owners`:
    the stems by the stage job that wrote them ((stage, stage id); None for a name no stage writes)."""

    def __init__(self, owners: dict[str, list[str]], prints: bytes | None):
        # (each built on first use: a sweep's query of a compacted store asks only owners and the count)
        self._raw_owners, self._owners, self._stems = owners, None, None
        self._count = sum(map(len, owners.values()))
        self._raw, self._prints = prints, None

    @property
    def owners(self) -> dict[tuple[str, str] | None, list[str]]:
        """The stems by the stage job that wrote them ((stage, stage id); None: a name no stage writes)."""
        if self._owners is None:
            self._owners = {tuple(k.split("/", 1)) if k else None: stems for k, stems in self._raw_owners.items()}
        return self._owners

    def stems(self) -> dict[str, None]:
        if self._stems is None:
            self._stems = dict.fromkeys(stem for stems in self._raw_owners.values() for stem in stems)
        return self._stems

    def __contains__(self, stem: object) -> bool:
        return stem in self.stems()

    def __iter__(self):
        return iter(self.stems())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, stem: str) -> list[int] | None:
        if stem not in self.stems():
            raise KeyError(stem)
        return self.fingerprints()[stem]

    def fingerprints(self) -> dict[str, list[int] | None]:
        """Every stem's fingerprint (None for all when the footer lost them: no small file is then a leftover)."""
        if self._prints is None:
            prints = json.loads(self._raw) if self._raw is not None else None
            ok = isinstance(prints, list) and len(prints) == self._count
            self._prints = dict(zip(self.stems(), prints)) if ok else dict.fromkeys(self.stems())
        return self._prints


@dataclass(frozen=True)
class Pack:
    path: Path
    sources: Mapping[str, list[int] | None]  # stem -> fingerprint of the file when it was packed
    replaces: tuple[str, ...] = ()  # file names of the packs whose rows this one holds


def read_pack(path: Path, schema: pa.Schema) -> Pack | None:
    """The pack a readable table file is, from its schema's footer metadata; None for a stage's own file."""
    footer = schema.metadata or {}
    raw = footer.get(META_KEY)
    if raw is None or not is_pack(path.stem) or SOURCE not in schema.names:
        return None
    meta = json.loads(raw)
    sources = Sources(meta["owners"], footer.get(PRINTS_KEY)) if "owners" in meta else meta["sources"]
    return Pack(path, sources, tuple(meta.get("replaces", ())))


def owner_key(table: str, stem: str) -> str:
    """The writing a file's rows belong to: the file itself, except that a training stage's train_steps files (one
    per checkpoint interval) are one, so a stage that trains again hides every step the packs hold of it."""
    if table != "train_steps":
        return stem
    owner = parse_table_file(table, stem)
    return stem if owner is None else f"{owner.stage}_{owner.stage_id}"


@dataclass
class TableLayout:
    """What a reader of one table takes: the live small files whole, the live packs less their hidden rows."""

    files: list[Path] = field(default_factory=list)  # live small files
    packs: list[Path] = field(default_factory=list)  # live packs, oldest first
    hidden: dict[Path, set[str]] = field(default_factory=dict)  # per live pack: the stems whose rows are superseded
    sources: dict[Path, Mapping[str, list[int] | None]] = field(default_factory=dict)  # per live pack: what it holds
    leftovers: list[Path] = field(default_factory=list)  # small files a live pack holds as they are (skip them)
    retired: list[Path] = field(default_factory=list)  # packs a live pack replaces (skip them)
    replaces: dict[Path, tuple[str, ...]] = field(default_factory=dict)  # per live pack: the packs it replaced

    @property
    def readable(self) -> list[Path]:
        return [*self.files, *self.packs]

    def only(self, keep, keep_owner=None) -> TableLayout:
        """The layout of the rows written under the stems `keep(stem)` accepts (one sweep's stage jobs): other small
        files left out, other stems hidden in the packs, packs with none of them left out. `keep_owner((stage,
        stage id) or None)`: the same question by a stem's stage job, asked of a pack that groups its stems so
        (once per stage job instead of once per stem: what `keep` would answer for each of its stems)."""
        out = TableLayout(files=[f for f in self.files if keep(f.stem)], leftovers=self.leftovers,
                          retired=self.retired)
        for p in self.packs:
            owners = getattr(self.sources[p], "owners", None) if keep_owner is not None else None
            dropped = ({stem for key, stems in owners.items() if not keep_owner(key) for stem in stems}
                       if owners is not None else {stem for stem in self.sources[p] if not keep(stem)})
            hidden = self.hidden[p] | dropped
            if len(hidden) < len(self.sources[p]):
                out.packs.append(p)
                out.hidden[p], out.sources[p], out.replaces[p] = hidden, self.sources[p], self.replaces.get(p, ())
        return out

    def holder(self, stem: str) -> Path | None:
        """The file a reader takes the rows written under `stem` from (None: none, or superseded)."""
        for f in self.files:
            if f.stem == stem:
                return f
        return next((p for p in self.packs if stem in self.sources[p] and stem not in self.hidden[p]), None)


def resolve(table: str, files: list[Path], packs: list[Pack], damaged: list[Pack] = ()) -> TableLayout:
    """Which of one table's readable files (`files`: stages' own, `packs`) a reader takes, and which rows of the
    packs it leaves out (module docstring). `damaged`: packs that do not read, as their manifests describe them; they
    still decide what they would have (the packs they replaced stay retired, the older writings of their stage jobs
    stay hidden: a damaged pack never brings superseded rows back), but none of their rows is read, and a small file
    is no leftover of theirs (it is the intact copy). A damaged pack whose replaced packs are still there (a
    compaction stopped before deleting them) is left out altogether: they hold what it was made of."""
    present = {p.path.name for p in packs}
    damaged = [d for d in damaged if not set(d.replaces) & present]
    broken = {p.path for p in damaged}
    packs = [*packs, *damaged]
    replaced = {name for p in packs for name in p.replaces}
    live = sorted((p for p in packs if p.path.name not in replaced), key=lambda p: pack_seq(p.path.stem))
    out = TableLayout(packs=[p.path for p in live], retired=[p.path for p in packs if p.path.name in replaced],
                      sources={p.path: p.sources for p in live}, hidden={p.path: set() for p in live},
                      replaces={p.path: p.replaces for p in live})
    live_owners = set()
    for f in files:
        packed = [p.sources[f.stem] for p in live if f.stem in p.sources and p.path not in broken]
        try:
            leftover = bool(packed) and fingerprint(f) in packed
        except FileNotFoundError:  # deleted since it was listed: compaction finished with it
            continue
        (out.leftovers if leftover else out.files).append(f)
        if not leftover:
            live_owners.add(owner_key(table, f.stem))
    if len(live) > 1 or live_owners:  # (one pack and no small files: nothing is superseded)
        keys = {stem: owner_key(table, stem) for p in live for stem in p.sources}
        newest: dict[str, Path | None] = {}  # each writing -> the pack it is read from (None: its small files)
        for p in live:
            newest.update(dict.fromkeys((keys[stem] for stem in p.sources), p.path))
        newest.update(dict.fromkeys(live_owners))
        for p in live:
            out.hidden[p.path] = {stem for stem in p.sources if newest[keys[stem]] != p.path}
    for path in broken & set(out.packs):  # (decided with; read never)
        out.packs.remove(path)
        del out.hidden[path], out.sources[path], out.replaces[path]
    return out


def table_layout(directory: Path, table: str, damaged: set[Path] = frozenset()) -> TableLayout:
    """One table directory's layout, from its files' footers (unreadable files are left out: the catalog lists
    them as damaged; an unreadable pack's manifest still takes part). Bytes are not checked here (compaction checks
    what it relies on): `damaged` names packs to take as unreadable."""
    files, packs, broken = [], [], []
    for path in sorted(Path(directory).glob("*.parquet")):
        try:
            if path in damaged:
                raise OSError(f"{path}: damaged")
            with arrow_file(path) as f:  # regular files only: a FIFO would block, a symlink lead out
                schema = pq.read_schema(f)
        except UNREADABLE:
            manifest = read_manifest(path) if is_pack(path.stem) else None
            if manifest is not None:  # (still decides what it superseded: resolve)
                broken.append(manifest.pack(path))
            continue
        pack = read_pack(path, schema)
        (packs if pack else files).append(pack or path)
    return resolve(table, files, packs, broken)
