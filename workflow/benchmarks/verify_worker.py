"""The grader worker: `python -m workflow.benchmarks.verify_worker` reads one JSON [method, gold, text] per line on
stdin and answers one JSON [correct, extracted] per line on stdout (scoring.MathVerifier runs it and bounds each
answer's time). Methods (workflow/benchmarks/graders.py names them):

    math_verify   text: the extracted answer; math-verify's verify(parse(gold), parse(text))
    math_equal    text: the extracted answer; workflow/benchmarks/math_equal.py
    dapo          text: the whole response; verl's DAPO scorer (verl.utils.reward_score.math_dapo.compute_score:
                  the last "Answer:" line, else the last \\boxed{} of the response's end, both normalised by its
                  normalize_final_answer, compared with the normalised gold as strings)

A plain child process, not multiprocessing: it starts the same way from a stage, a torchrun rank or a Ray worker
(whose main module multiprocessing's spawn would re-run)."""

from __future__ import annotations

import json
import sys


def _math_verify(gold: str, pred: str) -> tuple[bool, str]:
    from math_verify import parse, verify
    return bool(verify(parse(f"${gold}$"), parse(f"${pred}$"))), pred


def _math_equal(gold: str, pred: str) -> tuple[bool, str]:
    from workflow.benchmarks.math_equal import math_equal
    return math_equal(pred, gold), pred


_dapo_module = None


def _dapo(gold: str, response: str) -> tuple[bool, str | None]:
    global _dapo_module
    if _dapo_module is None:
        _dapo_module = _verl_file("utils/reward_score/math_dapo.py")
    out = _dapo_module.compute_score(response, gold)
    return bool(out["acc"]), out["pred"]


def _verl_file(relative: str):
    """One module file of the installed verl, loaded by itself: math_dapo.py needs only `re`, while importing it
    as verl.utils... runs verl's package init (4 s here: Ray, torch, triton, and triton's exit-time warnings)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("verl")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("grader dapo uses verl's DAPO scorer: verl is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    module_spec = importlib.util.spec_from_file_location(f"_verl_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


METHODS = {"math_verify": _math_verify, "math_equal": _math_equal, "dapo": _dapo}


def main() -> int:  # pragma: no cover - runs in the child process
    for line in sys.stdin:
        method, gold, text = json.loads(line)
        try:
            ok, extracted = METHODS[method](gold, text)
        except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer
            ok, extracted = False, None
        sys.stdout.write(json.dumps([ok, extracted]) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
