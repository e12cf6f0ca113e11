"""Every query answer prints: lists and structs in every format, and an answer too wide for the terminal stays
readable (one record per block)."""

from __future__ import annotations

import csv
import io
import json

import pyarrow as pa
import pytest

from helpers import cli
from workflow.results.display import FORMATS, print_table
from workflow.results.writer import write_rows

NESTED = pa.table({"run_id": ["0000000000a1", "0000000000a2"], "benchmarks": [["math500", "aime24"], None],
                   "cfg": [{"lr": 1e-4, "k": 4}, {"lr": 5e-5, "k": 8}], "score": [0.5, None]})


def test_lists_and_structs_print_in_every_format(capsys):
    for fmt in FORMATS:
        print_table(NESTED, fmt, width=200)
        out = capsys.readouterr().out
        assert "0000000000a1" in out and "aime24" in out and "5e-05" in out.replace("5.0e-05", "5e-05"), fmt
    print_table(NESTED, "csv")
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert json.loads(rows[0]["benchmarks"]) == ["math500", "aime24"] and rows[1]["benchmarks"] == ""
    assert json.loads(rows[1]["cfg"]) == {"lr": 5e-5, "k": 8}
    print_table(NESTED, "json")
    assert json.loads(capsys.readouterr().out)[0]["benchmarks"] == ["math500", "aime24"]


def test_a_wide_answer_prints_one_record_per_block_and_a_narrow_one_as_a_grid(capsys):
    wide = pa.table({f"column_{i:02d}": [f"value-{i}-a", f"value-{i}-b"] for i in range(80)})
    print_table(wide, "table", width=120)
    out, err = capsys.readouterr()
    assert "80 columns do not fit 120 characters" in err and "2 rows" in err
    assert out.count("-- record ") == 2
    lines = out.splitlines()
    assert all(len(line) <= 120 for line in lines)
    assert "column_79  value-79-b" in out  # every column of every record, whole
    print_table(wide.select(["column_00", "column_01"]), "table", width=120)
    out, err = capsys.readouterr()
    assert "record" not in out and "do not fit" not in err and "value-1-b" in out


def test_repeated_column_names_and_markup_like_text_print_as_they_are(capsys):
    t = pa.table([pa.array(["[red]x[/]"]), pa.array([1])], names=["a", "a"])
    print_table(t, "records", width=80)
    out = capsys.readouterr().out
    assert "[red]x[/]" in out and out.count("a  ") == 2


@pytest.fixture
def runs_with_lists(tmp_path):
    write_rows(tmp_path, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="s", stage="rl", method="grpo", label="x",
                                                      eval_benchmarks=["math500", "arc_c"])])
    return tmp_path


def test_select_star_from_runs_prints_as_csv_and_as_a_readable_table(runs_with_lists):
    out = cli("--results", str(runs_with_lists), "query", "--format", "csv", "SELECT * FROM runs")
    assert out.returncode == 0, out.stderr
    row = next(csv.DictReader(io.StringIO(out.stdout)))
    assert json.loads(row["eval_benchmarks"]) == ["math500", "arc_c"]
    table = cli("--results", str(runs_with_lists), "query", "SELECT * FROM runs", env={"COLUMNS": "100"})
    assert table.returncode == 0 and "one record per block" in table.stderr
    assert "eval_benchmarks" in table.stdout and '["math500", "arc_c"]' in table.stdout
