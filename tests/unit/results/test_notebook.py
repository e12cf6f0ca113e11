"""Issue 82, item 5: the tables in a notebook. docs/results.md's example runs as written (the final accuracy per
setting, a reward curve drawn with matplotlib) on tables small enough to check by hand; the answer converts to
pandas in one call, says plainly what is missing when polars is not installed, shows itself in Jupyter without
pandas, and keeps `rlsweep query`'s read-only guarantee."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import REPO, write_sweep
from workflow.layout import eval_file, train_steps_file
from workflow.results.catalog import QueryError
from workflow.results.membership import record
from workflow.results.notebook import Answer, sql
from workflow.results.writer import write_rows

ACC = {"grpo": [0.2, 0.4], "sfpo": [0.6, 0.8]}  # final avg@k per seed


@pytest.fixture
def results(tmp_path):
    from workflow.sweep.expand import load_sweep
    sweep = load_sweep(write_sweep(tmp_path / "nb.yaml", "nb", "grid:\n  rl.update: [grpo, sfpo]\nseeds: [0, 1]\n"))
    root = tmp_path / "results"
    for run in sweep.runs:
        m, seed, steps = run.method, run.config.seed, run.config.rl.steps
        write_rows(root, "runs", f"rl_{run.run_id}", [dict(run_id=run.run_id, sweep="nb", stage="rl", method=m,
                                                         label=run.label, seed=seed, status="completed")])
        write_rows(root, "train_steps", train_steps_file("rl", run.run_id, 1, steps), [dict(
            run_id=run.run_id, sweep="nb", stage="rl", step=s, reward=0.1 * s + (m == "sfpo")) for s in
            range(1, steps + 1)])
        write_rows(root, "eval_scores", eval_file(run.run_id, run.eval_id, steps, "arithmetic"), [dict(
            run_id=run.run_id, eval_id=run.eval_id, sweep="nb", step=step, benchmark="arithmetic", k=2, avg_at_k=a)
            for step, a in ((0, 0.1), (steps, ACC[m][seed]))])
    record(root, "nb", sweep.members())
    return root


def example() -> str:
    text = (REPO / "docs" / "results.md").read_text()
    return re.search(r"<!-- notebook-example -->\n```python\n(.*?)```", text, re.S).group(1)


def test_the_docs_example_runs_and_gives_the_final_accuracy_per_setting(results, tmp_path):
    code = example().replace('results, sweep = "results", "demo"', f'results, sweep = {str(results)!r}, "nb"')
    assert code != example()  # (the example's first line is what this test swaps)
    out = subprocess.run([sys.executable, "-c", "import matplotlib; matplotlib.use('Agg')\n" + code], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "reward.png").stat().st_size > 1000
    lines = out.stdout.splitlines()
    assert "rl.update=sfpo" in lines[1] and "0.7" in lines[1] and "rl.update=grpo" in lines[2]  # best first


def test_an_answer_converts_and_shows_itself_and_writes_nothing(results, monkeypatch):
    a = sql("SELECT label, count(*) AS n FROM runs GROUP BY label ORDER BY label", results, "nb")
    assert isinstance(a, Answer) and len(a) == 2 and a.column_names == ["label", "n"]
    assert a.to_pandas()["n"].tolist() == [2, 2] and a.to_arrow().num_rows == 2
    assert "<th>label</th>" in a._repr_html_() and "rl.update=grpo" in a._repr_html_()
    monkeypatch.setitem(sys.modules, "polars", None)  # not installed
    with pytest.raises(ImportError, match="pip install polars"):
        a.to_polars()
    with pytest.raises(QueryError):
        sql(f"COPY (SELECT 1) TO '{results}/x.csv'", results, "nb")
    assert not (results / "x.csv").exists()
