"""Graders: what decides that a response answers a benchmark item correctly. In this field the grader moves a score
as much as a method does, so every stored response can be judged by several (`eval.graders`, `rlsweep rescore`).

    name          judges  how
    math_verify   math    the last \\boxed{} vs the gold by math-verify (HF): today's default for math benchmarks
    math_equal    math    the last \\boxed{} vs the gold by the Qwen2.5-Math toolkit's math_equal rules (simpleRL and
                          the mixed-policy papers' evaluation): strings, numbers, tuples, matrices, sympy
    dapo          math    verl's DAPO scorer: "Answer:" line or last \\boxed{}, normalised, then exact string match
    exact         math    the last \\boxed{} equals the gold string: the synthetic tasks' default (their RL reward)
    mc_letter     mc      the letter the response names, mapped back through the shown option order: the default
    mc_text       mc      mc_letter, or else a \\boxed{} holding the correct option's own text

A benchmark's own grader (`Benchmark.grader`) scores it at generation time (eval_samples.correct); the graders
a sweep lists in `eval.graders` judge the same stored responses again (rule `rescore`, table eval_grades) without
generating anything. Each grader judges the benchmark kinds it names and is skipped on the others.

A grader is a class with `grade(response, answer, permutation, choices) -> Verdict` and `close()`, registered by
name with @register; `make(name)` builds one, an unknown name fails with the list of known ones.
"""

from __future__ import annotations

from typing import Callable, ClassVar

from workflow.benchmarks import catalog
from workflow.benchmarks.answers import extract_boxed
from workflow.benchmarks.scoring import LETTERS, MathVerifier, Verdict, extract_letter, score_exact, score_mc
from workflow.registry import Registry


class Grader:
    """Judges responses of the benchmark `kinds` it names. Call order: grade() any number of times, then close()."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]]  # benchmark kinds it judges: "math", "mc"

    def grade(self, response: str, answer: str, permutation: list[int] | None = None,
              choices: tuple[str, ...] | None = None) -> Verdict:
        """`answer`: math, the gold; multiple choice, the index of the correct choice as a string, with the
        `permutation` the sample was shown (option_permutation) and the dataset's `choices`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what grading holds (a worker process)."""

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# the built-ins register below, as this module is imported; a third-party package adds one through the entry-point
# group `rlsweep.graders` (workflow/registry.py)
GRADERS: Registry[type[Grader]] = Registry("grader", "graders", base=Grader)


def register(name: str, kinds: tuple[str, ...]) -> Callable[[type[Grader]], type[Grader]]:
    def add(cls: type[Grader]) -> type[Grader]:
        cls.kinds = frozenset(kinds)
        return GRADERS.register(name)(cls)
    return add


def get(name: str) -> type[Grader]:
    return GRADERS.get(name)


def make(name: str, timeout_s: float = 10.0) -> Grader:
    """A grader ready to use (`timeout_s`: the bound on one comparison of the worker-process graders)."""
    cls = get(name)
    return cls(timeout_s) if issubclass(cls, _WorkerGrader) else cls()


def rescores(grader: str, benchmark: str) -> bool:
    """Whether `grader` judges `benchmark` again (rule rescore): it judges the benchmark's kind and is not the
    benchmark's own grader (whose verdicts eval_samples holds)."""
    b = catalog.get(benchmark)
    return b.kind in get(grader).kinds and grader != b.grader


class _WorkerGrader(Grader):
    """A comparison method of the worker process (verify_worker.py), bounded in time per item."""

    def __init__(self, timeout_s: float = 10.0):
        self.verifier = MathVerifier(timeout_s=timeout_s, method=self.name)

    def grade(self, response, answer, permutation=None, choices=None) -> Verdict:
        return self.verifier.score(response, answer)

    def close(self) -> None:
        self.verifier.close()


@register("math_verify", ("math",))
class MathVerify(_WorkerGrader):
    pass


@register("math_equal", ("math",))
class MathEqual(_WorkerGrader):
    pass


@register("dapo", ("math",))
class Dapo(_WorkerGrader):
    def grade(self, response, answer, permutation=None, choices=None) -> Verdict:
        return self.verifier.judge(answer, response)  # verl's scorer finds the answer in the response itself


@register("exact", ("math",))
class Exact(Grader):
    def grade(self, response, answer, permutation=None, choices=None) -> Verdict:
        return score_exact(response, answer)


@register("mc_letter", ("mc",))
class MCLetter(Grader):
    def grade(self, response, answer, permutation=None, choices=None) -> Verdict:
        return score_mc(response, int(answer), permutation)


def _plain(text: str) -> str:
    return " ".join(text.replace("$", "").split()).strip().rstrip(".").lower()


@register("mc_text", ("mc",))
class MCText(Grader):
    """The letter reader first; a response that names no letter but boxes an option's text is judged by that
    text (models often answer "\\boxed{Paris}" to a lettered question)."""

    def grade(self, response, answer, permutation=None, choices=None) -> Verdict:
        if extract_letter(response, len(permutation)) is not None or not choices:
            return score_mc(response, int(answer), permutation)
        boxed = extract_boxed(response)
        if not boxed:
            return Verdict(False, None)
        shown = [choices[i] for i in permutation]
        hits = [j for j, text in enumerate(shown) if _plain(text) == _plain(boxed)]
        if len(hits) != 1:
            return Verdict(False, boxed)
        return Verdict(permutation[hits[0]] == int(answer), LETTERS[hits[0]])
