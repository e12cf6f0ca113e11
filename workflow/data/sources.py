"""The training-set registry: where each of the seeds' training sets lives, which fields are read and how they
map to ours (an `Example`: problem, gold answer, demonstration if the set has one).

Like the benchmark registry (workflow/benchmarks/catalog.py), a set loads through the same code from its Hugging
Face id or from a local .jsonl / .parquet file in the set's own fields (`task.datasets[i].path`); the tests run
that code on fixture files in each set's real schema (tests/fixtures/datasets/, whose README records the schemas
and where they were confirmed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workflow.benchmarks import word_problems
from workflow.benchmarks.answers import extract_boxed
from workflow.hub import HubDataset, hub_records, normalized, read_records
from workflow.registry import Registry


@dataclass(frozen=True)
class Example:
    id: str  # <set name>/<the set's own id or row index>
    problem: str  # the bare problem text (any instruction wrapper of the set removed)
    answer: str  # the gold answer (LaTeX), what the reward compares with
    solution: str | None = None  # a worked demonstration ending in \boxed{answer}, for SFT; None if the set has none


@dataclass(frozen=True)
class TrainingSet:
    name: str
    hub: HubDataset | None  # None: generated (`generate`)
    normalize: Callable[[dict[str, Any], int], Example] | None
    demonstrations: bool  # whether examples carry a solution SFT can train on
    keep: Callable[[dict[str, Any]], bool] = field(default=lambda r: True)
    note: str = ""
    revision: str | None = None  # the Hub commit the mapping was checked on (None: whatever the cache holds)
    generate: Callable[[], list[Example]] | None = None  # a generated set: no dataset, no file

    @property
    def synthetic(self) -> bool:
        return self.generate is not None


def _text(messages: Any) -> str:
    """The user turn of a chat-message list (verl-style `prompt` fields), or the string itself."""
    if isinstance(messages, str):
        return messages
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if not users:
        raise ValueError("no user turn in the prompt messages")
    return users[-1]


def _gold(value: Any) -> str:
    """A gold answer as a string: JSON-encoded lists (one answer, or several equivalent forms) give their first."""
    if isinstance(value, str) and value.startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            return value.strip()
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("empty gold answer list")
        value = value[0]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


# DAPO-Math-17k wraps every problem in an instruction for its "Answer:" format; our prompts ask for \boxed{}
_DAPO_HEAD = ("Solve the following math problem step by step. The last line of your response should be of the form "
              "Answer: $Answer (without quotes) where $Answer is the answer to the problem.")
_DAPO_TAIL = 'Remember to put your answer on its own line after "Answer:".'


def _dapo(r: dict, i: int) -> Example:
    text = _text(r["prompt"]).strip()
    if text.startswith(_DAPO_HEAD):
        text = text[len(_DAPO_HEAD):]
    if text.rstrip().endswith(_DAPO_TAIL):
        text = text.rstrip()[: -len(_DAPO_TAIL)]
    index = (r.get("extra_info") or {}).get("index")
    return Example(id=f"dapo_math_17k/{index if index is not None else i}", problem=text.strip(),
                   answer=_gold(r["reward_model"]["ground_truth"]))


def _math_train(r: dict, i: int) -> Example:
    answer = extract_boxed(r["solution"])
    if answer is None:
        raise ValueError("no \\boxed{} answer in the solution")
    return Example(id=f"math_train/{i}", problem=r["problem"].strip(), answer=answer, solution=r["solution"].strip())


# some Skywork-OR1 copies end each problem with verl's usual instruction; ours asks for \boxed{} itself
_STEP_BY_STEP = "Let's think step by step and output the final answer within \\boxed{}."


def _skywork(r: dict, i: int) -> Example:
    index = (r.get("extra_info") or {}).get("index")
    text = _text(r["prompt"]).strip()
    if text.endswith(_STEP_BY_STEP):
        text = text[: -len(_STEP_BY_STEP)]
    return Example(id=f"skywork_or1_math/{index if index is not None else i}", problem=text.strip(),
                   answer=_gold(r["reward_model"]["ground_truth"]))


def _openr1(r: dict, i: int) -> Example:
    target = r["target"]
    demo = target if isinstance(target, str) else next(m["content"] for m in target if m["role"] == "assistant")
    return Example(id=f"openr1_math_46k/{i}", problem=_text(r["prompt"]).strip(),
                   answer=_gold(r["reward_model"]["ground_truth"]), solution=demo.strip())


def _gsm8k_train(r: dict, i: int) -> Example:
    reasoning, _, gold = r["answer"].rpartition("####")
    gold = gold.strip().replace(",", "")
    if not gold:
        raise ValueError("no '#### answer' line")
    # the set's worked answer, its calculator annotations <<48/2=24>> removed, ending in \boxed{} like ours
    steps = re.sub(r"<<[^>]*>>", "", reasoning).strip()
    return Example(id=f"gsm8k_train/{i}", problem=r["question"].strip(), answer=gold,
                   solution=f"{steps}\nThe answer is \\boxed{{{gold}}}.")


def _word_problems() -> list[Example]:
    return [Example(id=f"word_problems/{p.id}", problem=p.question, answer=p.answer, solution=p.solution)
            for p in word_problems.split().train]


# a third-party package adds one (a TrainingSet) through the entry-point group `rlsweep.datasets` (workflow/registry.py)
REGISTRY: Registry[TrainingSet] = Registry("training set", "datasets", base=TrainingSet)
for _t in [
    TrainingSet("dapo_math_17k", HubDataset("BytedTsinghua-SIA/DAPO-Math-17k", None, "train",
                                            ("prompt", "reward_model", "extra_info")), _dapo, demonstrations=False,
                note="the Hub copy repeats each of its ~17k problems many times; the data stage keeps one of each"),
    TrainingSet("math_train", HubDataset("DigitalLearningGmbH/MATH-lighteval", None, "train",
                                         ("problem", "solution")), _math_train, demonstrations=True,
                note="MATH's 7.5k training problems (MATH-500 is drawn from MATH's test split)"),
    TrainingSet("skywork_or1_math", HubDataset("Skywork/Skywork-OR1-RL-Data", None, "math",
                                               ("prompt", "reward_model", "extra_info")), _skywork,
                demonstrations=False),
    TrainingSet("openr1_math_46k", HubDataset("Elliott/Openr1-Math-46k-8192", None, "train",
                                              ("prompt", "target", "reward_model")), _openr1, demonstrations=True,
                note="prompt + DeepSeek-R1 demonstration (target) + answer, at most 8192 tokens"),
    TrainingSet("gsm8k_train", HubDataset("openai/gsm8k", "main", "train", ("question", "answer")), _gsm8k_train,
                demonstrations=True, note="gold = the number after ####"),
    TrainingSet("word_problems", None, None, demonstrations=True, generate=_word_problems,
                note="generated grade-school word problems with worked solutions "
                     "(workflow/benchmarks/word_problems.py); disjoint from the word_problems benchmark"),
]:
    REGISTRY.register(_t.name)(_t)


def get(name: str) -> TrainingSet:
    """The training set; an unknown name fails with the known ones."""
    return REGISTRY.get(name)


def load(name: str, path: str | Path | None = None, revision: str | None = None) -> list[Example]:
    """The set's examples, from `path` if given, else from the Hugging Face cache."""
    t = get(name)
    what = f"training set {name}"
    if t.generate is not None:
        if path is not None:
            raise ValueError(f"{what} is generated, not read from a file: drop its `path`")
        return t.generate()
    records = (read_records(path) if path else
               hub_records(t.hub, revision or t.revision, what=what, path_key="task.datasets[].path", note=t.note))
    return normalized(records, t.normalize, t.keep, what=what, source=str(path or t.hub.hf_id), fields=t.hub.fields)
