"""Scoring responses: math answers through math-verify (bounded time per item), multiple choice by letter.

Math: the last complete \\boxed{} of the response is extracted (linear time, nested braces handled) and compared
with the gold answer by math-verify, gold first (`verify` is asymmetric). math-verify's own timeouts use signals,
which do not work in worker threads, so each comparison runs in a separate worker PROCESS and is abandoned (the
worker killed and restarted) after `timeout_s`: a timeout scores wrong and is reported as such.

Multiple choice: options are shuffled per sample by a permutation derived from (seed, item id, sample index), so
the seed stored with each sample reproduces exactly what the model saw, and across samples the correct option
lands in every position about equally often. The answer letter is read from the usual forms.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import re
from dataclasses import dataclass

import numpy as np

from workflow.eval.answers import extract_boxed

LETTERS = "ABCDEFGHIJKLMNOP"


@dataclass(frozen=True)
class Verdict:
    correct: bool
    extracted: str | None
    timed_out: bool = False


# ------------------------------------------------------------------------------------------------------- math
def score_exact(response: str, gold: str) -> Verdict:
    """The last \\boxed{} equals the gold string exactly: the synthetic task's rule (its RL reward and its
    held-out benchmark)."""
    pred = extract_boxed(response)
    return Verdict(pred == gold, pred)


def _verify_worker(conn) -> None:  # pragma: no cover - runs in the child process
    from math_verify import parse, verify
    while True:
        msg = conn.recv()
        if msg is None:
            return
        gold, pred = msg
        try:
            ok = bool(verify(parse(f"${gold}$"), parse(f"${pred}$")))
        except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer
            ok = False
        conn.send(ok)


class MathVerifier:
    """math-verify in one long-lived worker process, each comparison bounded by `timeout_s` seconds."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._ctx = mp.get_context("spawn")  # no fork of a multi-threaded torch process
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_verify_worker, args=(child,), daemon=True)
        self._proc.start()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
        self._proc = self._conn = None

    def equivalent(self, gold: str, pred: str) -> tuple[bool, bool]:
        """(equivalent, timed_out)."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((gold, pred))
        if self._conn.poll(self.timeout_s):
            return bool(self._conn.recv()), False
        self._kill()
        return False, True

    def score(self, response: str, gold: str) -> Verdict:
        pred = extract_boxed(response)
        if pred is None or not pred:
            return Verdict(False, pred)
        if pred == gold.strip():  # the common case needs no symbolic comparison
            return Verdict(True, pred)
        ok, timed_out = self.equivalent(gold, pred)
        return Verdict(ok, pred, timed_out)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None:
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
        self._proc = self._conn = None

    def __enter__(self) -> "MathVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------ multiple choice
def option_permutation(n: int, seed: int, item_id: str, sample_idx: int) -> list[int]:
    """perm[j] = the dataset index of the option shown at position j (letter LETTERS[j])."""
    key = int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "little")
    return [int(i) for i in np.random.default_rng([seed, key, sample_idx]).permutation(n)]


_BOXED_LETTER = re.compile(r"^\(?\s*([A-P])\s*\)?(?:[.:]|\s|$)")
_ANSWER_IS = re.compile(r"(?i:answer)\s*(?:(?i:is)|:)?\s*:?\s*\(?\s*([A-P])\s*\)?(?![A-Za-z])")
_LINE_START = re.compile(r"^\s*\(?([A-P])[.):](?:\s|$)", re.MULTILINE)
# LaTeX / Markdown wrappers models put around a letter: \boxed{\text{(C)}}, \textbf{(C)}, $\mathrm{C}$, **(C)**
_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox)\s*\{([^{}]*)\}")
_MARKUP = re.compile(r"\$|\*\*")


def _unwrap(text: str) -> str:
    """The text with letter-wrapping markup removed (innermost first; three levels is more than models nest)."""
    for _ in range(3):
        text, n = _WRAPPER.subn(r"\1", text)
        if not n:
            break
    return _MARKUP.sub("", text)


def extract_letter(text: str, n_choices: int) -> str | None:
    """The answer letter: \\boxed{C} / \\boxed{(C)} first, then "the answer is (C)" / "Answer: C", then a line
    starting "C." or "(C)"; the last occurrence of the first form found. Markup around the letter (\\text{},
    \\textbf{}, \\mathrm{}, $...$, **...**) is ignored. Letters beyond n_choices are ignored."""
    valid = set(LETTERS[:n_choices])
    boxed = extract_boxed(text)
    if boxed:
        m = _BOXED_LETTER.match(_unwrap(boxed).strip())
        if m and m.group(1) in valid:
            return m.group(1)
    tail = _unwrap(text[-20_000:])
    for pattern in (_ANSWER_IS, _LINE_START):
        found = [m.group(1) for m in pattern.finditer(tail)]
        found = [f for f in found if f in valid]
        if found:
            return found[-1]
    return None


def score_mc(response: str, answer_index: int, permutation: list[int]) -> Verdict:
    letter = extract_letter(response, len(permutation))
    if letter is None:
        return Verdict(False, None)
    return Verdict(permutation[LETTERS.index(letter)] == answer_index, letter)


def format_mc(question: str, choices: tuple[str, ...], permutation: list[int]) -> str:
    options = "\n".join(f"{LETTERS[j]}. {choices[i]}" for j, i in enumerate(permutation))
    return f"{question}\n\n{options}\n\nAnswer with the letter of the correct option, as \\boxed{{X}}."
