#!/usr/bin/env python3
"""Thin entry point the Snakemake rules call: run one stage of one run (see workflow/launch.py)."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["rescore"]:  # judging stored responses needs no torch (workflow/eval/rescore.py)
        from workflow.eval.rescore import main
        sys.exit(main(sys.argv[2:]))
    from workflow.launch import main
    sys.exit(main())
