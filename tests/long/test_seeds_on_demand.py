"""The shipped design of seeds on demand, sweeps/seeds_on_demand.yaml, from an empty results directory: GRPO vs SFPO
vs GXPO from the demo's SFT start in rounds of 5 seeds. It decides its clear pair before its last round, trains a
later round only for the settings of an open pair, and its report shows the Comparisons section with every pair.
Long (~13 min on 2 idle cores): RLSWEEP_LONG_TESTS=1. What it measured: docs/seeds-on-demand.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO, run_cli
from workflow.design.rounds import read_rounds
from workflow.layout import design_dir

pytestmark = [pytest.mark.long(covers=["sweeps/seeds_on_demand.yaml", "Snakefile", "rules/design.smk",
                                       "workflow/design/", "workflow/report/comparisons.py", "workflow/engines/local.py",
                                       "workflow/methods/grpo/", "workflow/methods/sfpo/", "workflow/methods/gxpo/"]),
              pytest.mark.timeout(2400)]


def test_the_shipped_design_decides_its_clear_pair_early_and_reports_every_pair(tmp_path):
    results = tmp_path / "results"
    run = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--config",
                          "sweep=sweeps/seeds_on_demand.yaml", f"results={results}"], cwd=REPO, capture_output=True,
                         text=True, timeout=2300)
    assert run.returncode == 0, run.stderr[-3000:]
    done = json.loads(next(design_dir(results, "seeds_on_demand").glob("DONE_*.json")).read_text())
    rounds = read_rounds(results, "seeds_on_demand")
    first = rounds[0].decisions
    early = [pair for pair, verdict in first.items() if verdict in ("larger", "smaller")]
    assert early and done["K"] == 2, (first, done)  # a pair decided at round 1 of 2
    assert all(done["decisions"][pair] == first[pair] for pair in early)  # a decision stands
    for r in rounds[1:]:  # a later round trains only the settings of a pair still open before it
        opened = {s for pair, v in rounds[r.number - 2].decisions.items() if v == "continue" for s in pair.split(" | ")}
        assert set(r.settings) == opened
    report = (results / "seeds_on_demand" / "report" / "report.md").read_text()
    section = report[report.index("## Comparisons"):]
    assert all(f"| {a} vs {b} |" in section for a, b in (("grpo", "sfpo"), ("grpo", "gxpo"), ("sfpo", "gxpo")))
    status = run_cli("--results", str(results), "status", "sweeps/seeds_on_demand.yaml")
    assert status.returncode == 0 and "of 3 pair(s) decided" in status.stderr, status.stderr
