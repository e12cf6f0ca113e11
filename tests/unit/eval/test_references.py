"""references/published.yaml and workflow/report/references.py: the shipped file loads and validates, a broken file
is refused with a message that says where, check() flags exactly the averages the papers' own numbers contradict or
that are over another benchmark set than the seeds', and the report table puts them beside measured rows."""

from __future__ import annotations

import copy

import pytest
import yaml

from helpers import REPO
from workflow.benchmarks.catalog import MATH_SET, OOD_SET
from workflow.report import references
from workflow.report.references import ReferenceError

SHIPPED = REPO / "references" / "published.yaml"

PAPERS = {"demo": {"title": "A demo paper", "reference": "arXiv:0000.00000"}}
ROW = {"paper": "demo", "source": "Table 1", "model": "Demo-1B", "method": "GRPO", "decoding": "greedy",
       "values": {"math500": 40.0, "gsm8k": 60.0, "minerva": 11.66}, "stated": {"Avg.": 37.22},
       "stated_over": {"Avg.": ["math500", "gsm8k", "minerva"]}, "note": ""}


def write(tmp_path, *rows, papers=PAPERS):
    path = tmp_path / "refs.yaml"
    path.write_text(yaml.safe_dump({"papers": papers, "results": list(rows)}, allow_unicode=True))
    return path


def row(**changes):
    out = copy.deepcopy(ROW)
    out.update(changes)
    return out


def recomputed(ref, column, refs=()):
    """The mean of the cells a printed average covers: the row's own, and those of its stated_with rows (the same
    paper, model and method printed under those sources)."""
    names = ref.stated_over.get(column, tuple(ref.values))
    rows = [ref] + [r for r in refs if r.source in ref.stated_with
                    and (r.paper, r.model, r.method) == (ref.paper, ref.model, ref.method)]
    assert len(rows) == 1 + len(ref.stated_with)
    cells = [r.values[n] for r in rows for n in names]
    return sum(cells) / len(cells)


# ------------------------------------------------------------------------------------------------ load
def test_shipped_file_loads_as_fractions():
    refs = references.load(SHIPPED)
    raw = yaml.safe_load(SHIPPED.read_text())
    assert len(refs) == len(raw["results"])
    for ref, printed in zip(refs, raw["results"]):
        assert ref.values and all(0 < v <= 1 for v in ref.values.values()), ref
        assert ref.values == pytest.approx({k: v / 100 for k, v in printed["values"].items()})
        assert ref.title == raw["papers"][ref.paper]["title"]
        assert ref.citation == raw["papers"][ref.paper]["reference"]
        assert all(0 < v <= 1 for v in ref.stated.values())


def test_filter_by_paper_and_model():
    refs = references.load(SHIPPED)
    sfpo = references.load(SHIPPED, papers=["sfpo"])
    assert sfpo == [r for r in refs if r.paper == "sfpo"] and sfpo
    llama = references.load(SHIPPED, models=["Llama-3.1-8B"])
    assert llama == [r for r in refs if r.model == "Llama-3.1-8B"] and llama
    both = references.load(SHIPPED, papers=["sft_then_rl", "sfpo"], models=["Qwen2.5-Math-7B"])
    assert {r.paper for r in both} == {"sft_then_rl", "sfpo"} and {r.model for r in both} == {"Qwen2.5-Math-7B"}


@pytest.mark.parametrize("kind, wanted, choice", [("papers", "no_such_paper", "sft_then_rl"),
                                                   ("models", "GPT-9", "Qwen2.5-Math-7B")])
def test_unknown_filter_names_the_choices(kind, wanted, choice):
    with pytest.raises(ReferenceError) as e:
        references.load(SHIPPED, **{kind: [wanted]})
    assert wanted in str(e.value) and choice in str(e.value) and str(SHIPPED) in str(e.value)


@pytest.mark.parametrize("bad, key, also", [
    (row(values={"math500": 40.0, "aime2024": 10.0}), "aime2024", "aime24"),  # unknown benchmark: lists the known
    (row(seeds=3), "seeds", "stated_over"),  # unknown key: lists the known
    (row(paper="other"), "other", "demo"),  # undeclared paper: lists the declared
    (row(values={"math500": 140.0}), "math500", "[0, 100]"),  # not a percent
    (row(values={"math500": "40"}), "math500", "[0, 100]"),  # not a number
    (row(stated_over={"Avg.": ["math500", "aime24"]}), "aime24", "Avg."),  # averages a column the row lacks
])
def test_broken_file_is_refused_naming_file_row_and_key(tmp_path, bad, key, also):
    path = write(tmp_path, ROW, bad)
    with pytest.raises(ReferenceError) as e:
        references.load(path)
    message = str(e.value)
    assert str(path) in message and "results[1]" in message and key in message and also in message
    if bad["paper"] == "demo":
        assert "demo / GRPO" in message


def test_missing_key_is_refused(tmp_path):
    bad = row()
    del bad["decoding"]
    with pytest.raises(ReferenceError, match=r"results\[0\].*decoding"):
        references.load(write(tmp_path, bad))


# ----------------------------------------------------------------------------------------------- check
def test_check_on_the_shipped_file():
    refs = references.load(SHIPPED)
    flags = references.check(refs)
    tolerance = 0.0007
    # mismatch: exactly the printed averages farther than the tolerance from the mean of their own columns
    far = {(id(r), c) for r in refs for c, v in r.stated.items() if abs(recomputed(r, c, refs) - v) > tolerance}
    mismatches = [f for f in flags if f.kind == "mismatch"]
    assert {(id(f.reference), f.column) for f in mismatches} == far
    for f in mismatches:
        assert abs(recomputed(f.reference, f.column, refs) - f.reference.stated[f.column]) > tolerance
    # on the seeds' own numbers: GXPO's iso-wall-clock table prints nine-cell averages four of its five rows' cells
    # do not give (GRPO's 36.00 is 37.22 from its cells)
    assert {(f.reference.paper, f.reference.source.split(" (")[0], f.reference.method) for f in mismatches} == {
        ("gxpo", "Table 4", m) for m in ("GRPO", "SFPO (K=3)", "SFPO (K=5)", "GXPO (K=5)")}
    # other set: the SFT-then-RL paper's headline averages are over the seeds' sets; its Tables 2 and 3 average a
    # "representative subset" with MMLU-Pro and without Minerva, its Llama table the subset without AIME25
    other = [f for f in flags if f.kind == "other set"]
    # GXPO's budget tables average three benchmarks (math500, gsm8k, minerva) over three budgets: not its headline set
    assert {(f.reference.paper, f.reference.source) for f in other} == {
        ("sft_then_rl", "Table 2"), ("sft_then_rl", "Table 3"), ("sft_then_rl", "Table 4"),
        ("gxpo", "Table 3 (Appendix C.1) (iso-backward-pass), BP=300"),
        ("gxpo", "Table 4 (Appendix C.2) (iso-wall-clock), 12h")}
    for f in other:
        over = set(f.reference.over(f.column))
        assert over not in (set(MATH_SET), set(OOD_SET))
        for name in (over - set(MATH_SET)) | (set(MATH_SET) - over):  # what is in and out, named
            assert name in f.message
    # every row of those tables is flagged, and only its stated average
    flagged = {id(f.reference) for f in other}
    for r in refs:
        if (r.paper, r.source) in {(f.reference.paper, f.reference.source) for f in other}:
            assert id(r) in flagged


def test_mismatch_fires_on_a_wrong_average(tmp_path):
    right = row(method="right")  # 37.22 is the mean of 40, 60, 11.66
    wrong = row(method="wrong", stated={"Avg.": 36.0})
    refs = references.load(write(tmp_path, right, wrong))
    flags = references.check(refs)
    assert [(f.reference.method, f.kind) for f in flags if f.kind == "mismatch"] == [("wrong", "mismatch")]
    message = next(f.message for f in flags if f.kind == "mismatch")
    assert "36.00" in message and "37.22" in message and "minerva" in message


def test_other_set_is_relative_to_the_paper_main_table(tmp_path):
    """A paper whose own suite is not the seeds' (the demo: gsm8k, no AIME) is not flagged on each row; a later
    table averaging another subset is, and no average at all is nothing to check."""
    later = row(source="Table 2", values={"math500": 40.0, "minerva": 11.0}, stated={"Avg": 25.5},
                stated_over={"Avg": ["math500", "minerva"]})
    plain = row(source="Table 3", stated={}, stated_over={})
    flags = references.check(references.load(write(tmp_path, ROW, later, plain)))
    assert [(f.reference.source, f.kind) for f in flags] == [("Table 2", "other set")]


# ----------------------------------------------------------------------------------------------- table
def test_table_beside_measured_rows():
    refs = references.load(SHIPPED, papers=["sft_then_rl", "gxpo"])
    flags = references.check(refs)
    measured = {"grpo": {b: 0.25 for b in MATH_SET} | {"amc83": 0.3}, "sfpo": {"math500": 0.5}}
    t = references.table(refs, measured, flags)
    assert [row[0].text for row in t.rows[:2]] == ["measured: grpo", "measured: sfpo"]
    assert len(t.rows) == len(refs) + len(measured)
    benchmarks = {b for r in refs for b in r.values} | {b for m in measured.values() for b in m}
    assert benchmarks <= set(t.columns)
    assert t.columns.index("math500") < t.columns.index("arc_c") < t.columns.index("gsm8k")
    assert t.columns.index("amc83") < t.columns.index("avg (recomputed)") < t.columns.index("stated avg")
    col = {name: i for i, name in enumerate(t.columns)}
    grpo = t.rows[0]
    assert grpo[col["amc83"]].text == "0.300" and grpo[col["avg (recomputed)"]].text == "0.250"
    assert t.rows[1][col["avg (recomputed)"]].text == "—"  # not all six math benchmarks
    # a flagged average: its cell marked, the flag's message its hover text; the others not marked
    for r, cells in zip(refs, t.rows[len(measured):]):
        mine = [f for f in flags if f.reference is r]
        stated = cells[col["stated avg"]]
        assert (stated.mark == "failed") == bool(mine)
        assert all(f.message in stated.note for f in mine)
        for b, v in r.values.items():
            assert cells[col[b]].text == f"{v:.3f}"
    assert any(f.reference.paper == "sft_then_rl" for f in flags)
    notes = " ".join(t.notes)
    assert ", ".join(MATH_SET) in notes  # the recomputed average's set
    assert "math500, amc23, gsm8k, minerva, olympiadbench" in notes  # GXPO's own Avg. set, spelled out
    assert all(f.message in notes for f in flags)


def test_table_notes_only_the_flags_of_its_rows():
    everything = references.check(references.load(SHIPPED))
    sfpo = references.load(SHIPPED, papers=["sfpo"])
    t = references.table(sfpo, flags=everything)
    assert not any(c.mark for row in t.rows for c in row)
    assert not any("Flagged" in n for n in t.notes)
