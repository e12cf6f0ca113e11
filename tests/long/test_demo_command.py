"""The README's demo command itself: the whole demo sweep from a bare `snakemake` (the Snakefile's defaults), then the
README's next commands, `rlsweep query` and `rlsweep gain sweeps/demo.yaml` (each seed above its start, each pooled
interval above 0). `.ci/run` ran these before every landing until issue 58 took them out of CI (~7 of its 35 minutes);
CI runs the demo's DAG end to end, shrunk (tests/e2e/test_smoke.py). Long (~7 min on 2 idle cores):
RLSWEEP_LONG_TESTS=1. The gain under other CPU float kernels: tests/long/test_demo_gain.py, bench/demo_kernels.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO, run_cli
from workflow.report.gain import gains
from workflow.results.catalog import query
from workflow.sweep.expand import load_sweep

# what decides the demo's numbers (as tests/long/test_demo_gain.py), and the Snakefile's defaults (the sweep and the
# results a bare `snakemake` runs); the rules are run in CI, by the demo's smoke sweep
pytestmark = [pytest.mark.long(covers=["sweeps/demo.yaml", "Snakefile", "workflow/engines/local.py",
                                       "workflow/engines/rl_batch.py", "workflow/engines/tiny_lm.py", "workflow/algos/", "workflow/methods/grpo/",
                                       "workflow/methods/sfpo/", "workflow/methods/gxpo/", "workflow/eval/",
                                       "workflow/benchmarks/arithmetic.py", "workflow/report/gain.py"]),
              pytest.mark.timeout(1800)]


def test_the_readmes_demo_command_runs_the_demo_and_rl_beats_its_start(tmp_path):
    """`snakemake` (the README's first command, after the set-up), every job on this machine; then `rlsweep query`
    as the README gives it, one row per RL run; then `rlsweep gain sweeps/demo.yaml`, which exits 0 only when every
    seed of every setting ends above its start and every pooled interval is above 0."""
    results = tmp_path / "results"  # the Snakefile's default is results/ in the checkout: kept apart here
    demo = subprocess.run([sys.executable, "-m", "snakemake", "--config", f"results={results}"], cwd=REPO,
                          capture_output=True, text=True, timeout=1700)
    assert demo.returncode == 0, demo.stderr[-3000:]
    sweep = load_sweep(REPO / "sweeps" / "demo.yaml")
    assert (results / "demo" / "summary.md").is_file() and (results / "demo" / "report" / "index.html").is_file()
    listed = run_cli("--results", str(results), "query", "select run_id, avg(avg_at_k) from eval_scores group by all")
    assert listed.returncode == 0 and all(r.run_id in listed.stdout for r in sweep.runs), listed.stderr
    gain = run_cli("--results", str(results), "gain", "sweeps/demo.yaml")
    assert gain.returncode == 0, gain.stdout + gain.stderr
    assert all(g.shortfalls() == [] for g in gains(sweep, results))
    rows = query("SELECT DISTINCT run_id FROM eval_scores", results, "demo").column(0).to_pylist()
    assert set(rows) >= {r.run_id for r in sweep.runs}  # every RL run evaluated, as the README's query shows
