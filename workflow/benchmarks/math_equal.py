"""`math_equal`: the rule-plus-sympy answer comparison of the Qwen2.5-Math evaluation toolkit's lineage (ToRA,
DeepSeek-Math), which simpleRL and the mixed-policy papers report with; our own implementation of its rules.

    1. the answers as strings, after the toolkit's kind of normalisation (LaTeX spacing, \\left/\\right, \\dfrac,
       \\text{}, units, degrees, `x = 3` -> `3`, thousands commas), compared case-insensitively;
    2. as numbers (fractions and percentages too): equal within a relative 1e-4, the gold also taken as a
       percentage (gold, gold/100, gold*100: "50%" and "0.5" agree, as the toolkit's include_percentage does; so
       "200" is right for a gold of 2 too, a leniency of the toolkit's that the report's disagreements show);
    3. tuples and intervals element by element, brackets equal; a bare comma list (several answers) as a multiset;
       matrices element by element;
    4. symbolically: both parsed by latex2sympy, equal when simplify(a - b) == 0 or their numeric values are close.

Why not verl's copy (verl.utils.reward_score.prime_math.grader.math_equal): in verl 0.9.1 its symbolic step uses
`timeout_limit`, a decorator, as a context manager; the error is swallowed, so the symbolic comparison never runs
and "1/2" vs "0.5" scores wrong (tests/unit/eval/test_graders.py pins the difference). It runs in the grader worker process
(verify_worker.py), which bounds its time.
"""

from __future__ import annotations

import math
import re

_SPACING = re.compile(r"(?<!\\)\\[,;:! ]|\\quad|\\qquad|\\displaystyle|\\left|\\right|\\big|\\Big")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox|mathbf)\s*\{([^{}]*)\}")
_UNITS = re.compile(r"(?:\\text\{\s*)?\b(?:units?|cm|m|km|meters?|inches|inch|feet|ft|degrees?|dollars?|cents?|"
                    r"hours?|minutes?|seconds?|mph|sq|square|students|points|ways|days?)\b\s*\}?(?:\^[23])?\s*$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_FRAC = re.compile(r"^(-?)\\frac\{([^{}]+)\}\{([^{}]+)\}$")
_MATRIX = re.compile(r"^\\begin\{[pbvB]?matrix\}(.*)\\end\{[pbvB]?matrix\}$", re.S)
_FRAC_SHORTHAND = re.compile(r"\\frac(\d)(\d)")  # \frac12 -> \frac{1}{2}, as the toolkit's fix_fracs
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?!.*=)")


def normalize(answer: str) -> str:
    s = str(answer).strip().strip("$").strip()
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\dbinom", "\\binom")
    s = _SPACING.sub("", s)
    s = _FRAC_SHORTHAND.sub(r"\\frac{\1}{\2}", s)
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "%").replace("\\$", "")
    s = _ASSIGNMENT.sub("", s)  # "x = 3" -> "3" (one variable on the left, one equals sign)
    s = _UNITS.sub("", s).strip()
    for _ in range(3):
        s, n = _TEXT.subn(r"\1", s)
        if not n:
            break
    s = s.strip().rstrip(".").strip()
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if s.startswith("."):
        s = "0" + s
    return s.replace(" ", "")


def _number(s: str) -> float | None:
    """The number `s` writes (3, -2.5, 1/2, \\frac{1}{2}, 50%), or None."""
    percent = s.endswith("%")
    s = s.rstrip("%")
    m = _FRAC.match(s)
    try:
        if m:
            value = float(m[2]) / float(m[3]) * (-1 if m[1] else 1)
        elif re.fullmatch(r"-?\d+/\d+", s):
            num, den = s.split("/")
            value = float(num) / float(den)
        else:
            value = float(s)
    except (ValueError, ZeroDivisionError):
        return None
    if not math.isfinite(value):
        return None
    return value / 100 if percent else value


def _numbers_equal(pred: float, gold: float) -> bool:
    return any(math.isclose(pred, g, rel_tol=1e-4, abs_tol=1e-12) for g in (gold, gold / 100, gold * 100))


def _split_top(s: str) -> list[str]:
    """`s` split at commas outside brackets and braces."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _matrix(s: str) -> list[list[str]] | None:
    m = _MATRIX.match(s)
    if not m:
        return None
    return [[c for c in row.split("&")] for row in m[1].split("\\\\") if row.strip()]


def _symbolic_equal(pred: str, gold: str) -> bool:
    from latex2sympy2_extended import latex2sympy
    from sympy import N, simplify
    try:
        a, b = latex2sympy(pred), latex2sympy(gold)
    except Exception:  # noqa: BLE001 - unparsable LaTeX: not equal
        return False
    for x, y in ((a, b),) if not (hasattr(a, "lhs") and hasattr(b, "lhs")) else ((a.lhs - a.rhs, b.lhs - b.rhs),):
        try:
            if simplify(x - y) == 0:
                return True
        except Exception:  # noqa: BLE001
            pass
        try:
            if math.isclose(complex(N(x)).real, complex(N(y)).real, rel_tol=1e-4) and \
                    math.isclose(complex(N(x)).imag, complex(N(y)).imag, abs_tol=1e-9):
                return True
        except Exception:  # noqa: BLE001 - symbols left: not a number
            pass
    return False


def math_equal(pred: str | None, gold: str) -> bool:
    """Whether the extracted answer `pred` equals `gold` under the rules of this module's docstring."""
    if pred is None:
        return False
    p, g = normalize(pred), normalize(gold)
    if not p:
        return False
    if p.lower() == g.lower():
        return True
    pn, gn = _number(p), _number(g)
    if pn is not None and gn is not None:
        return _numbers_equal(pn, gn)
    pm, gm = _matrix(p), _matrix(g)
    if pm is not None or gm is not None:
        return (pm is not None and gm is not None and len(pm) == len(gm)
                and all(len(r) == len(s) and all(math_equal(x, y) for x, y in zip(r, s)) for r, s in zip(pm, gm)))
    bracketed = all(len(x) > 1 and x[0] in "([" and x[-1] in ")]" for x in (p, g))
    if bracketed and "," in p and "," in g:  # tuples and intervals: brackets must agree
        ps, gs = _split_top(p[1:-1]), _split_top(g[1:-1])
        return (p[0], p[-1]) == (g[0], g[-1]) and len(ps) == len(gs) and all(map(math_equal, ps, gs))
    ps, gs = _split_top(p), _split_top(g)
    if len(gs) > 1 or len(ps) > 1:  # several answers: each gold matched by its own prediction, any order
        if len(ps) != len(gs):
            return False
        left = list(ps)
        for y in gs:
            hit = next((i for i, x in enumerate(left) if math_equal(x, y)), None)
            if hit is None:
                return False
            left.pop(hit)
        return True
    return _symbolic_equal(p, g)
