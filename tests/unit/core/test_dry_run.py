"""`snakemake -n` writes nothing (issue 46): the Snakefile records a sweep's stage jobs and moves results of the
layout before the store only when Snakemake will run (workflow/dry_run.py reads its command line as it does)."""

from __future__ import annotations

import subprocess

import pytest

from helpers import REPO, SNAKEMAKE, snakemake, write_sweep
from workflow.dry_run import dry_run

ARGVS = [["-n"], ["-np"], ["-pn"], ["-pF"], ["--dry-run"], ["--dryrun"], ["-p"], ["--cores", "2"], ["-c1"],
         ["-dn"], ["-d", "n"], ["--config", "sweep=sweeps/n.yaml", "-c", "2"], ["--config", "sweep=x.yaml", "-n"],
         ["results/_store/rl/x/DONE.json", "-n"], ["-kpn", "--cores", "2"], ["-j", "4", "-k"], ["-sn"], []]


def test_the_dry_run_test_reads_the_command_line_as_snakemake_does():
    from snakemake.cli import get_argument_parser
    parser = get_argument_parser()
    for argv in ARGVS:
        assert dry_run(argv) == parser.parse_known_args(argv)[0].dryrun, argv


@pytest.mark.slow  # a Snakemake plan
def test_a_dry_run_writes_nothing_under_the_results(tmp_path):
    """Before: `snakemake -n` wrote results/<sweep>/members/<digest>.parquet (a run records it: tests/e2e/test_store.py)."""
    sweep = write_sweep(tmp_path / "s.yaml", "s", "grid:\n  rl.lr: [1.0e-4]\nseeds: [0]\n")
    plan = snakemake(tmp_path, sweep, "-n")
    assert plan.returncode == 0 and "Job stats:" in plan.stdout, plan.stderr[-2000:]
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # a Snakemake plan that imports verl
def test_a_verl_sweeps_plan_prints_each_snakemake_line_once(tmp_path):
    """Before: verl's __init__ (imported to validate the sweep) called logging.basicConfig, and every Snakemake
    line printed again through the root logger as `INFO:<time>:...`; and the run ended with ~30 lines of triton's
    nanobind leak report."""
    pytest.importorskip("verl")
    plan = subprocess.run([*SNAKEMAKE, "-n", "--config", "sweep=sweeps/verl_cpu.yaml", f"results={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # (its paths: from the checkout)
    assert plan.returncode == 0, plan.stderr[-2000:]
    out = plan.stdout + plan.stderr
    assert out.count("rule sft:") == 1 and not [line for line in out.splitlines() if line.startswith("INFO:")]
    assert "nanobind: leaked" not in out  # (the Snakefile's gc.freeze kept triton's objects from being finalised)
