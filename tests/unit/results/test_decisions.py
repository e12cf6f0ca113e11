"""The `decisions` view (what a design of seeds on demand decided): a sealed file per look reads as rows; a damaged one
is left out of the view and reported in the catalog's `left_out`, while the other looks and the tables still
answer. Decision files are never packed, so a compacted store's tables beside them change nothing."""

from __future__ import annotations

from workflow.results import decisions
from workflow.results.catalog import Catalog
from workflow.results.compaction import compact
from workflow.results.membership import Member, record
from workflow.results.writer import write_rows

ROW = {"rounds": 2, "family": "", "a": "rl.update=grpo", "b": "rl.update=sfpo", "verdict": "continue",
       "decided_at": None, "mean_a": 0.5, "mean_b": 0.6, "difference": -0.1, "statistic": 0.1, "boundary": 0.3,
       "spent": 0.0, "error": 0.05, "seeds_a": [0, 1], "seeds_b": [0, 1], "values_a": [0.5, 0.5],
       "values_b": [0.6, 0.6], "run_ids_a": ["a0", "a1"], "run_ids_b": ["b0", "b1"], "gpu_hours": 0.1}


def store(tmp_path, compacted: bool):
    root = tmp_path / "results"
    for i in range(3):
        write_rows(root, "runs", f"rl_00000000000{i}", [dict(run_id=f"00000000000{i}", sweep="d", stage="rl")])
    record(root, "d", [Member("rl", f"00000000000{i}") for i in range(3)])
    if compacted:
        compact(root)
    decisions.write(root, "d", 1, [ROW])
    decisions.write(root, "d", 2, [{**ROW, "verdict": "smaller", "decided_at": 2}])
    return root


def test_a_damaged_decisions_file_is_left_out_and_reported_plain_and_compacted(tmp_path):
    for compacted in (False, True):
        root = store(tmp_path / str(compacted), compacted)
        c = Catalog(root, "d")
        assert c.query("SELECT round, verdict FROM decisions ORDER BY round").to_pylist() == [
            {"round": 1, "verdict": "continue"}, {"round": 2, "verdict": "smaller"}]
        second = decisions.path_of(root, "d", 2)
        data = bytearray(second.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one byte flipped: its digest no longer matches
        second.write_bytes(bytes(data))
        c = Catalog(root, "d")
        assert c.query("SELECT round FROM decisions").to_pylist() == [{"round": 1}]
        assert [d.path for d in c.left_out if d.table == "decisions"] == [second]
        assert c.query("SELECT count(*) AS n FROM runs").to_pylist() == [{"n": 3}]  # the tables still answer
