#!/usr/bin/env python3
"""Thin entry point the Snakemake rules call: run one stage of one run (see workflow/launch.py)."""

import sys

from workflow.launch import main

if __name__ == "__main__":
    sys.exit(main())
