"""The math-verify worker: `python -m workflow.eval.verify_worker` reads one JSON [gold, prediction] per line on
stdin and answers one JSON true/false per line on stdout (scoring.MathVerifier runs it and bounds each answer's
time). A plain child process, not multiprocessing: it starts the same way from a stage, a torchrun rank or a Ray
worker (whose main module multiprocessing's spawn would re-run)."""

from __future__ import annotations

import json
import sys


def main() -> int:  # pragma: no cover - runs in the child process
    from math_verify import parse, verify
    for line in sys.stdin:
        gold, pred = json.loads(line)
        try:
            ok = bool(verify(parse(f"${gold}$"), parse(f"${pred}$")))
        except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer
            ok = False
        sys.stdout.write("true\n" if ok else "false\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
