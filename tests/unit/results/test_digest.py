"""Every byte a reader believes is checked (issue 80): each table file carries its SHA-256 (workflow/results/digest.py),
a query checks it once per file identity (verdicts.py) and leaves a file that fails out with a warning that names it;
a query DuckDB cannot decode checks every file again in full; compaction never copies a file that fails.

At 7e72833 a pack with 256 bytes flipped at a third answered `rlsweep query` with other numbers, exit 0, no warning."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import run_cli
from test_compaction import SWEEP, counts, files, write_run
from workflow.layout import is_pack, table_dir
from workflow.results import compaction, digest
from workflow.results.catalog import Catalog, query
from workflow.results.compaction import compact
from workflow.results.membership import Member, record
from workflow.results.packs import read_manifest
from workflow.results.verdicts import Verdicts
from workflow.results.writer import to_arrow, write_rows

# the query: every column of every row, hashed and summed per run
EVERY_COLUMN = "SELECT run_id, count(*), sum(hash(COLUMNS(*))) FROM train_steps GROUP BY ALL ORDER BY 1"


def flip(path: Path, at: float = 1 / 3, n: int = 256) -> None:
    """Invert `n` bytes at a fraction `at` of the file's data, before its footer (which stays as it was: the issue's
    damage; a small pack's footer, its list of stems, can be most of the file)."""
    data = bytearray(path.read_bytes())
    data_end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    i = 4 + int((data_end - 4) * at)
    n = min(n, data_end - i)
    data[i:i + n] = bytes(b ^ 0xFF for b in data[i:i + n])
    path.write_bytes(bytes(data))


def steps_file(root: Path, run: str = "0000000000a1", n: int = 3) -> Path:
    return write_rows(root, "train_steps", f"rl_{run}_000001-{n:06d}",
                      [dict(run_id=run, sweep="s", stage="rl", step=i, loss=0.5 * i, reward=i / 7) for i in range(1, n + 1)])


@pytest.fixture
def store(tmp_path) -> Path:
    """Three finished RL runs with their evaluations and a running one, compacted: one sealed pack per table."""
    for i in range(3):
        write_run(tmp_path, i)
    write_run(tmp_path, 9, finished=False, status="running")
    record(tmp_path, SWEEP, [Member(stage, f"{base + i:012x}") for i in (0, 1, 2, 9)
                             for stage, base in (("rl", 0xd0), ("eval", 0xe0))])
    compact(tmp_path)
    return tmp_path


def pack_of(root: Path, table: str) -> Path:
    return next(p for p in files(root, table) if is_pack(p.stem))


def test_every_changed_byte_of_a_written_file_is_found(tmp_path):
    """A bit flipped anywhere in a file the writer sealed, each position in turn: the digest fails, or the footer
    no longer reads (which the catalog already reports). None passes, not even in the digests' own entries."""
    data = steps_file(tmp_path).read_bytes()
    assert digest.check_path(steps_file(tmp_path)).ok and digest.check_path(steps_file(tmp_path)).sealed
    probe, passed = tmp_path / "probe.parquet", []
    for i in range(len(data)):
        changed = bytearray(data)
        changed[i] ^= 0x01
        probe.write_bytes(bytes(changed))
        if digest.check_path(probe).ok:
            try:
                pq.read_metadata(probe)
            except Exception:  # noqa: BLE001 - any way the footer fails to read is a report
                continue
            passed.append(i)
    assert passed == [], f"{len(passed)} of {len(data)} changed bytes passed, first at {passed[:5]}"


def test_a_file_from_before_digests_reads_as_before(tmp_path):
    steps_file(tmp_path)
    legacy = table_dir(tmp_path, "train_steps") / "rl_0000000000a2_000001-000003.parquet"
    pq.write_table(to_arrow("train_steps", [dict(run_id="0000000000a2", sweep="s", stage="rl", step=1)]), legacy)
    assert digest.check_path(legacy) == digest.UNSEALED
    assert query("SELECT count(DISTINCT run_id) AS n FROM train_steps", tmp_path).to_pylist() == [{"n": 2}]


def test_packs_are_sealed_and_their_manifests_name_their_stage_jobs(store):
    for table in ("runs", "train_steps", "eval_scores", "eval_samples"):
        pack = pack_of(store, table)
        verdict = digest.check_path(pack)
        assert verdict.ok and verdict.sealed, table
        manifest = read_manifest(pack)
        assert manifest.sha256 == verdict.digest and manifest.size == pack.stat().st_size
        assert {stage for stage, _ in manifest.jobs} <= {"rl", "eval"} and len(manifest.jobs) >= 3


@pytest.mark.parametrize("sweep", [None, SWEEP])
def test_a_pack_changed_inside_its_data_is_left_out_and_named_never_answered_in_silence(store, sweep):
    """The issue's case: 256 bytes flipped at a third of the train_steps pack, its footer intact. The query leaves
    the pack out, and says so: that it is a pack, whose rows it held, which sweeps they belong to."""
    intact = run_cli("--results", str(store), "query", "--format", "csv", EVERY_COLUMN,
                     *(["--sweep", sweep] if sweep else []))
    assert intact.returncode == 0 and "warning" not in intact.stderr, intact.stderr
    pack = pack_of(store, "train_steps")
    flip(pack)
    res = run_cli("--results", str(store), "query", "--format", "csv", EVERY_COLUMN, *(["--sweep", sweep] if sweep else []))
    assert res.returncode == 0, res.stderr
    assert res.stdout != intact.stdout  # (the pack's rows are gone from the answer ...)
    assert f"left out damaged train_steps pack {pack}" in res.stderr  # (... and the answer says so)
    assert "the rows of 3 stage jobs, of sweep(s) s (3)" in res.stderr and "bytes are not those written" in res.stderr
    # only the unfinished run's small files answer
    assert [line.split(",")[0] for line in res.stdout.splitlines()[1:]] == ['"0000000000d9"']


def test_a_verdict_spares_the_hash_until_the_file_is_another(tmp_path, monkeypatch):
    """A file is hashed once per identity: the next query trusts the verdict; a rewrite (a new inode), a change in
    place, and a change in place with its mtime set back (`touch -r`, which cannot set ctime) are each hashed again."""
    path = steps_file(tmp_path)
    hashed = []  # the catalog's checks (a writer hashes what it writes too)
    real = digest.check
    monkeypatch.setattr(digest, "check", lambda fd, size=None: hashed.append(size) or real(fd, size))
    Catalog(tmp_path).close()
    Catalog(tmp_path).close()
    assert len(hashed) == 1
    steps_file(tmp_path)  # rewritten: the same bytes but another file
    Catalog(tmp_path).close()
    assert len(hashed) == 2
    st = path.stat()
    flip(path, at=0.4, n=4)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # its size and mtime as they were
    time.sleep(0.01)
    damaged = Catalog(tmp_path).damaged
    assert len(hashed) == 3 and [d.path for d in damaged] == [path] and "not those written" in damaged[0].reason


def test_bytes_changed_beneath_a_trusted_identity_are_named_when_duckdb_cannot_read_them(tmp_path):
    """Bit rot: bytes change on the disk and the file's identity does not, so its verdict still holds. A query that
    DuckDB cannot decode then checks every file again in full and leaves the damaged one out, naming it, instead of
    failing with DuckDB's bare decoder message (`don't know what type`, which names no file)."""
    steps_file(tmp_path, "0000000000a1", 2000)
    bad = steps_file(tmp_path, "0000000000a2", 2000)
    flip(bad)
    verdicts = Verdicts(tmp_path.resolve())  # what a check before the damage left: trusted as it is now
    verdicts.remember(bad.resolve(), bad.stat(), digest.locate(os.open(bad, os.O_RDONLY), bad.stat().st_size)[0][1])
    verdicts.save()
    assert Catalog(tmp_path).damaged == []  # the verdict holds: no hash
    res = run_cli("--results", str(tmp_path), "query", EVERY_COLUMN, "--format", "csv")
    assert res.returncode == 0, res.stderr
    assert f"left out" in res.stderr and str(bad.resolve()) in res.stderr and "not those written" in res.stderr
    assert [line.split(",")[0] for line in res.stdout.splitlines()[1:]] == ['"0000000000a1"']


def test_a_damaged_file_from_before_digests_is_named_not_a_bare_decoder_message(tmp_path):
    """No digest to check, and DuckDB fails to decode it (a page's compressed bytes changed): the query checks the
    files in full (decoding those without a digest), finds it, and says which file it left out. (A change such a
    file decodes without error is what it cannot see: docs/results.md.)"""
    steps_file(tmp_path, "0000000000a1", 2000)
    legacy = table_dir(tmp_path, "train_steps") / "rl_0000000000a2_000001-002000.parquet"
    pq.write_table(to_arrow("train_steps", [dict(run_id="0000000000a2", sweep="s", stage="rl", step=i, loss=i * 0.37)
                                             for i in range(1, 2001)]), legacy)
    flip(legacy, at=0.1, n=16)
    res = run_cli("--results", str(tmp_path), "query", EVERY_COLUMN, "--format", "csv")
    assert res.returncode == 0 and str(legacy) in res.stderr, res.stderr
    assert [line.split(",")[0] for line in res.stdout.splitlines()[1:]] == ['"0000000000a1"']


def test_compaction_refuses_a_damaged_file_and_never_launders_it(store, monkeypatch):
    """A damaged pack is not merged into the next one (which every check would then believe), nor is a damaged small
    file packed: each stays where it is, the compaction says so, and queries go on naming it."""
    before = counts(store)
    pack = pack_of(store, "eval_samples")
    flip(pack)
    write_run(store, 3)
    record(store, SWEEP, [Member("rl", f"{0xd3:012x}"), Member("eval", f"{0xe3:012x}")])
    small = next(p for p in files(store, "eval_samples") if "0000000000d3" in p.name)
    flip(small, at=0.3, n=8)
    monkeypatch.setattr(compaction, "MAX_PACKS", 1)  # the one pack there would be merged into the next
    done = {c.table: c for c in compact(store)}
    assert set(done["eval_samples"].refused) == {pack, small}
    assert "refused 2 damaged file(s)" in done["eval_samples"].note and pack.name in done["eval_samples"].note
    assert pack.is_file() and small.is_file() and not digest.check_path(pack).ok
    newest = max((p for p in files(store, "eval_samples") if is_pack(p.stem)), key=lambda p: p.name)
    assert newest == pack or digest.check_path(newest).ok  # whatever was packed is intact, and holds none of it
    assert pack.name not in (read_manifest(newest).replaces if newest != pack else ())
    assert {d.path for d in Catalog(store, SWEEP).damaged} == {pack, small}
    assert counts(store)["runs"] == before["runs"] + 3  # the other tables' rows, the new run's included



def test_a_pack_from_before_digests_is_named_by_doctor_and_sealed_by_the_next_compaction(store):
    """A store packed before digests (7e72833 and earlier) has packs a change can pass unseen; doctor says how many
    such files there are, and the next compaction merges such a pack, decoded in full, into a sealed one."""
    from workflow.results.doctor import examine, summary_line
    before = counts(store)
    pack = pack_of(store, "eval_scores")
    meta = pq.read_metadata(pack).metadata
    old = {k: v for k, v in meta.items() if k.decode() not in (digest.KEY, digest.KEY2)}
    pq.write_table(pq.read_table(pack).replace_schema_metadata(old), pack)  # the footer of a pack from then
    assert not digest.is_sealed(pack)
    report = examine(store, SWEEP)
    assert report.problems == [] and report.n_unsealed == 1
    assert "1 of the table files are from before digests" in summary_line(report, fixed=False)
    done = {c.table: c for c in compact(store)}
    assert done["eval_scores"].merged == 1 and not pack.exists()
    assert digest.is_sealed(pack_of(store, "eval_scores")) and counts(store) == before
    assert examine(store, SWEEP).n_unsealed == 0
