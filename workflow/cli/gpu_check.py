"""`rlsweep gpu-check`: every stage and method for a few steps on this node's GPU, one table, an exit code
(workflow/gpu_check.py says what runs)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from workflow.cli.common import err


def cmd_gpu_check(a) -> int:
    from workflow import gpu_check as gc

    cuda, device = gc.device_line()
    if not cuda and not a.allow_cpu:
        err.print(f"gpu-check: {device}: nothing to check on this machine. Run it on a GPU node (e.g. srun --gpus 1 "
                  "rlsweep gpu-check), or with --allow-cpu to run the same checks on the CPU (the wiring, not the "
                  "devices).")
        return gc.EXIT_NO_GPU
    engines = ["local", "verl"] if a.engine == "all" else [a.engine]
    root, tmp = gc.workdir(a.keep)
    err.print(f"gpu-check: on {device}; stage jobs under {root}" + ("" if a.keep else " (removed at the end)"))
    outcomes = []
    try:
        if "local" in engines:
            checks = gc.select(gc.local_checks(a.steps, a.sft_steps), a.only)
            outcomes += gc.run_local(checks, root / "local", cuda, say=err.print)
        if "verl" in engines:
            from workflow import gpu_check_verl as gv
            outcomes += gv.run_verl(root / "verl", cuda, a.steps, a.verl_model, a.only, say=err.print,
                                    required=a.engine == "verl")
    finally:
        if tmp is not None:
            tmp.cleanup()
    Console(highlight=False, width=200).print(gc.table(outcomes, f"rlsweep gpu-check on {device}"))
    if a.json:
        Path(a.json).write_text(json.dumps({"device": device, "checks": [o.as_row() for o in outcomes]}, indent=1))
    if a.markdown:
        Path(a.markdown).write_text(gc.markdown(outcomes) + "\n")
    failed = [o.name for o in outcomes if not o.passed]
    if failed:
        err.print(f"gpu-check: [red]{len(failed)} of {len(outcomes)} failed or did not run[/]: {', '.join(failed)}")
        return 1
    err.print(f"gpu-check: all {len(outcomes)} passed on {device}")
    return 0
