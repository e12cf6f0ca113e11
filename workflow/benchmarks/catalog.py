"""The benchmark registry: where each dataset lives, how its fields map to ours, which prompt it uses.

Every benchmark is loaded by the same code whether it comes from its Hugging Face id (through the `datasets`
cache) or from a local .jsonl / .parquet file in the dataset's own field schema (`path:`): records -> `normalize`
-> `Item`. The tests run that code on small fixture files in each dataset's real schema.

Names say which variant they are where the field disagrees (see shared notes on evaluation): `amc23` is the
40-problem AMC 2023 subset, `amc83` the full 83-problem AMC12 2022+2023 set; `minerva` is the 272-problem Minerva
set, not lm-eval's `minerva_math` (= the whole MATH set with a Minerva prompt).

`arithmetic` is the synthetic held-out set of the local engine's task: generated from the run's `task` settings,
not read from a dataset, and scored by an exact match with the gold (what its RL reward checks).

Revisions: an entry's `revision` pins the Hub commit; entries without one (all, so far: the build machines cannot
reach the Hub to look them up) read whatever the cache holds. A sweep pins its own with `eval.revisions`, so a
dataset update on the Hub never changes its numbers silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from workflow.hub import HubDataset, hub_records, normalized, read_records
from workflow.registry import Registry
from workflow.benchmarks import word_problems
from workflow.benchmarks.arithmetic import split

Kind = Literal["math", "mc"]
Group = Literal["math", "ood", "extra", "arithmetic"]


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    answer: str  # math: the gold answer (LaTeX); mc: the index of the correct choice, as a string
    choices: tuple[str, ...] | None = None  # mc only, in the dataset's order (shuffled per sample at eval time)


@dataclass(frozen=True)
class Benchmark:
    name: str
    kind: Kind
    group: Group  # the seeds' tables average over the math group and over the ood group separately
    hf_id: str | None
    config: str | None
    split: str
    fields: tuple[str, ...]  # the dataset fields we read (named in error messages and docs)
    normalize: Callable[[dict[str, Any], int], Item] | None
    keep: Callable[[dict[str, Any]], bool] = field(default=lambda r: True)
    template: str | None = None  # a prompt template of its own (workflow/benchmarks/prompts.py); None: eval.template
    note: str = ""
    # The Hub commit the numbers were validated on. None until someone with Hub access has checked one: then
    # load() reads whatever the cache holds, and a sweep pins its own with eval.revisions.
    revision: str | None = None
    # synthetic: generated from the run's task settings (`generate(task)`), no dataset; what the local engine's
    # tiny character-level models can answer
    generate: Callable[[Any], list[Item]] | None = None
    exact_match: bool = False  # math scored by the last \boxed{} equal to the gold, not math-verify

    @property
    def synthetic(self) -> bool:
        return self.generate is not None

    @property
    def grader(self) -> str:
        """The grader that scores it at generation time (workflow/benchmarks/graders.py): eval_samples.correct."""
        return "exact" if self.exact_match else "mc_letter" if self.kind == "mc" else "math_verify"


# ---------------------------------------------------------------------------------------------- normalizers
def _num(x: Any) -> str:
    """AMC stores answers as floats (142.0); print integers as integers."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _math(q: str, a: str, id_: str | None = None) -> Callable[[dict, int], Item]:
    def normalize(r: dict, i: int) -> Item:
        return Item(id=str(r[id_]) if id_ and r.get(id_) is not None else str(i), question=r[q], answer=_num(r[a]))
    return normalize


def _olympiad(r: dict, i: int) -> Item:
    answers = [a.strip().strip("$") for a in r["final_answer"]]
    return Item(id=str(r.get("id", i)), question=r["question"], answer=", ".join(answers))


def _gsm8k(r: dict, i: int) -> Item:
    gold = r["answer"].split("####")[-1].strip().replace(",", "")
    return Item(id=str(i), question=r["question"], answer=gold)


def _arc(r: dict, i: int) -> Item:
    labels = list(r["choices"]["label"])
    return Item(id=str(r["id"]), question=r["question"], answer=str(labels.index(r["answerKey"])),
                choices=tuple(r["choices"]["text"]))


def _gpqa(r: dict, i: int) -> Item:
    choices = (r["Correct Answer"], r["Incorrect Answer 1"], r["Incorrect Answer 2"], r["Incorrect Answer 3"])
    return Item(id=str(r.get("Record ID") or i), question=r["Question"], answer="0",
                choices=tuple(c.strip() for c in choices))


def _arithmetic(task: Any) -> list[Item]:
    if task is None:
        raise ValueError("benchmark arithmetic is generated from the run's task settings: pass task=")
    return [Item(id=p.id, question=p.prompt, answer=p.answer) for p in split(task).heldout]


def _word_problems(task: Any) -> list[Item]:
    """The held-out word problems: fixed, whatever the run's task (workflow/benchmarks/word_problems.py)."""
    return [Item(id=p.id, question=p.question, answer=p.answer) for p in word_problems.split().heldout]


def _mmlu_pro(r: dict, i: int) -> Item:
    return Item(id=str(r["question_id"]), question=r["question"], answer=str(int(r["answer_index"])),
                choices=tuple(r["options"]))


# the built-ins, in the order the default benchmark sets list them; a third-party package adds one (a Benchmark) through
# the entry-point group `rlsweep.benchmarks` (workflow/registry.py)
BUILTIN: list[Benchmark] = [
    Benchmark("math500", "math", "math", "HuggingFaceH4/MATH-500", None, "test",
              ("unique_id", "problem", "answer"), _math("problem", "answer", "unique_id")),
    Benchmark("aime24", "math", "math", "HuggingFaceH4/aime_2024", None, "train",
              ("id", "problem", "answer"), _math("problem", "answer", "id")),
    Benchmark("aime25", "math", "math", "math-ai/aime25", None, "test",
              ("problem", "answer"), _math("problem", "answer", "id")),
    Benchmark("amc23", "math", "math", "AI-MO/aimo-validation-amc", None, "train",
              ("id", "problem", "answer", "url"), _math("problem", "answer", "id"),
              keep=lambda r: "2023" in r["url"], note="the 40 AMC 2023 problems"),
    Benchmark("amc83", "math", "extra", "AI-MO/aimo-validation-amc", None, "train",
              ("id", "problem", "answer", "url"), _math("problem", "answer", "id"),
              note="all 83 AMC12 2022 + 2023 problems"),
    Benchmark("minerva", "math", "math", "math-ai/minervamath", None, "test",
              ("question", "answer"), _math("question", "answer")),
    Benchmark("olympiadbench", "math", "math", "Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train",
              ("id", "question", "final_answer"), _olympiad),
    Benchmark("gsm8k", "math", "extra", "openai/gsm8k", "main", "test",
              ("question", "answer"), _gsm8k, note="gold = the number after ####"),
    Benchmark("arc_c", "mc", "ood", "allenai/ai2_arc", "ARC-Challenge", "test",
              ("id", "question", "choices", "answerKey"), _arc),
    Benchmark("gpqa_diamond", "mc", "ood", "Idavidrein/gpqa", "gpqa_diamond", "train",
              ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
              _gpqa, note="gated on the Hub: accept its terms, then `huggingface-cli login`"),
    Benchmark("mmlu_pro", "mc", "ood", "TIGER-Lab/MMLU-Pro", None, "test",
              ("question_id", "question", "options", "answer_index"), _mmlu_pro),
    Benchmark("arithmetic", "math", "arithmetic", None, None, "heldout", ("prompt", "answer"), None,
              template="raw", generate=_arithmetic, exact_match=True,
              note="the synthetic held-out set of the run's task (task.split_seed, task.n_heldout)"),
    Benchmark("word_problems", "math", "extra", None, None, "heldout", ("question", "answer"), None,
              generate=_word_problems,
              note="200 generated grade-school word problems (5 kinds), disjoint from the word_problems training set"),
]
REGISTRY: Registry[Benchmark] = Registry("benchmark", "benchmarks", base=Benchmark)
for _b in BUILTIN:
    REGISTRY.register(_b.name)(_b)

MATH_SET = tuple(b.name for b in BUILTIN if b.group == "math")
OOD_SET = tuple(b.name for b in BUILTIN if b.group == "ood")


def get(name: str) -> Benchmark:
    """The benchmark; an unknown name fails with the known ones."""
    return REGISTRY.get(name)


# ------------------------------------------------------------------------------------------------- loading
def load(name: str, path: str | Path | None = None, revision: str | None = None, limit: int | None = None,
         task: Any = None) -> list[Item]:
    """The benchmark's items, from `path` if given, else from the Hugging Face cache; a synthetic benchmark's
    from the run's task settings `task`."""
    b = get(name)
    if b.synthetic:
        return b.generate(task)[:limit]
    what = f"benchmark {name}"
    records = (read_records(path) if path else
               hub_records(HubDataset(b.hf_id, b.config, b.split, b.fields), revision or b.revision, what=what,
                           path_key=f"eval.paths.{name}", note=b.note))
    items = normalized(records, b.normalize, b.keep, what=what, source=str(path or b.hf_id), fields=b.fields)
    return items[:limit]
