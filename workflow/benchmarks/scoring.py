"""Scoring responses: math answers through a comparison in a worker process (bounded time per item), multiple
choice by letter. workflow/benchmarks/graders.py names these scorers and the other graders.

Math: the last complete \\boxed{} of the response is extracted (linear time, nested braces handled) and compared
with the gold answer by math-verify, gold first (`verify` is asymmetric), or by another method of the worker
(math_equal, verl's DAPO scorer). math-verify's own timeouts use signals, which do not work in worker threads, so
each comparison runs in a separate worker PROCESS (verify_worker.py) and is abandoned (the worker killed and
restarted) after `timeout_s`: a timeout scores wrong and is reported as such.

Multiple choice: options are shuffled per sample by a permutation derived from (seed, item id, sample index), so
the seed stored with each sample reproduces exactly what the model saw, and across samples the correct option
lands in every position about equally often. The answer letter is read from the usual forms.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from workflow.benchmarks.answers import extract_boxed

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


class MathVerifier:
    """A comparison `method` of verify_worker.py (math-verify by default) in one long-lived worker process, each
    comparison bounded by `timeout_s` seconds: a comparison that takes longer kills the worker (a new one starts
    with the next comparison). `score` judges a response's last \\boxed{}; `judge` hands the worker any text (the
    dapo method reads the whole response).

    Thread-safe: verl's reward manager scores a batch from a thread pool sharing one verifier, so a lock keeps one
    request in flight. Answers are read from the pipe's file descriptor itself: a buffered reader could pull an
    answer into its buffer where select() no longer sees it, or block in readline() for one that never comes."""

    def __init__(self, timeout_s: float = 10.0, method: str = "math_verify"):
        self.timeout_s = timeout_s
        self.method = method
        self._proc: subprocess.Popen | None = None
        self._pending = b""  # bytes read from the worker and not yet consumed (at most a partial line)
        self._lock = threading.Lock()

    def _start(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "workflow.benchmarks.verify_worker"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._pending = b""

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                pipe.close()
        self._proc = None

    def _read_line(self) -> bytes | None:
        """The worker's next answer line, or None when it does not come within `timeout_s` (or the worker died)."""
        deadline = time.monotonic() + self.timeout_s
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:  # end of file: the worker died
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def judge(self, gold: str, text: str) -> Verdict:
        """The worker's verdict on `text` as its method reads it: the extracted answer for math_verify and
        math_equal, the whole response for dapo (whose scorer extracts its own)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                self._proc.stdin.write((json.dumps([self.method, gold, text]) + "\n").encode())
            except (BrokenPipeError, OSError):  # the worker died: a wrong answer, a fresh worker next time
                self._kill()
                return Verdict(False, None)
            line = self._read_line()
            if line is None:
                timed_out = self._proc.poll() is None  # still computing: abandoned; else it died
                self._kill()
                return Verdict(False, None, timed_out)
            ok, extracted = json.loads(line)
            return Verdict(bool(ok), extracted)

    def equivalent(self, gold: str, pred: str) -> tuple[bool, bool]:
        """(equivalent, timed_out)."""
        v = self.judge(gold, pred)
        return v.correct, v.timed_out

    def score(self, response: str, gold: str) -> Verdict:
        """The last \\boxed{} of `response` against `gold`."""
        pred = extract_boxed(response)
        if pred is None or not pred:
            return Verdict(False, pred)
        if pred == gold.strip():  # the common case needs no symbolic comparison
            return Verdict(True, pred)
        ok, timed_out = self.equivalent(gold, pred)
        return Verdict(ok, pred, timed_out)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                try:
                    self._proc.stdin.close()  # the worker's loop ends at end of input
                    self._proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()

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
