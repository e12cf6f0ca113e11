"""workflow/big_dag.py's namespace trimming: a Snakefile runs in the module namespace of Snakemake's workflow module,
so dropping one of Snakemake's own names there breaks Snakemake itself (a run failed with `NameError: sys` inside
Workflow.execute before the guard)."""

from __future__ import annotations

import pytest

from workflow.big_dag import forget_load_time_names


def test_load_time_names_are_dropped_and_snakemakes_own_are_refused():
    namespace = {"sys": object(), "config": {}, "_helper": 1, "SWEEP": 2}
    snakemake_names = frozenset({"sys", "config"})
    forget_load_time_names(namespace, snakemake_names, ["_helper", "_never_defined"])
    assert set(namespace) == {"sys", "config", "SWEEP"}

    with pytest.raises(ValueError, match="^sys: Snakemake's own names"):
        forget_load_time_names(namespace, snakemake_names, ["SWEEP", "sys"])
    assert set(namespace) == {"sys", "config", "SWEEP"}  # refused before anything is dropped
