"""Whether the running `snakemake` was asked for a dry run, known while the Snakefile is read.

A dry run must write nothing (no membership record, no migration: the Snakefile does both before planning), but
Snakemake learns that it is one only after reading the Snakefile (its executor plugin is chosen afterwards), and
its `onstart` hook, which does run only for real, runs after planning and not at all when there is nothing to do.
So the Snakefile reads Snakemake's own command line, as Snakemake's parser would (tests/unit/core/test_dry_run.py checks the
two agree): building that parser costs ~0.5 s, paid by every snakemake call of a sweep; this costs microseconds.
"""

from __future__ import annotations

import sys

# Snakemake 9's one-letter options: those that take no value, and (the rest) those that do
_FLAGS = frozenset("DFSafhklnptv")
LONG = ("--dry-run", "--dryrun")


def dry_run(argv: list[str] | None = None) -> bool:
    """True when `argv` (default: this process's command line) asks Snakemake for a dry run: `--dry-run`,
    `--dryrun`, or `-n` alone or in a cluster of one-letter flags (`-np`), before any option that takes a value
    (in `-dn` the n is -d's value)."""
    for arg in sys.argv[1:] if argv is None else argv:
        if arg == "--":
            break
        if arg in LONG:
            return True
        if len(arg) > 1 and arg[0] == "-" and arg[1] != "-":
            for letter in arg[1:]:
                if letter == "n":
                    return True
                if letter not in _FLAGS:  # an option taking a value: the rest of the cluster is that value
                    break
    return False
