"""The benchmark registry: every benchmark loads through the same code as its real id, from fixture files in the
dataset's real field schema; missing data is a clear message, not a traceback."""

from __future__ import annotations

from collections import Counter

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import REPO
from workflow.benchmarks.catalog import MATH_SET, OOD_SET, REGISTRY, load
from workflow.hub import DatasetUnavailable, read_records
from workflow.benchmarks.prompts import render

FIXTURES = REPO / "tests" / "fixtures" / "benchmarks"
FIXTURE_OF = {"amc23": "amc.jsonl", "amc83": "amc.jsonl"}


def fixture(name: str):
    return FIXTURES / FIXTURE_OF.get(name, f"{name}.jsonl")


@pytest.mark.parametrize("name", sorted(n for n, b in REGISTRY.items() if not b.synthetic))
def test_every_benchmark_loads_from_a_file_in_its_real_schema(name):
    items = load(name, path=fixture(name))
    assert items and len({i.id for i in items}) == len(items)
    for item in items:
        assert item.question.strip() and item.answer.strip()
        if REGISTRY[name].kind == "mc":
            assert item.choices and 0 <= int(item.answer) < len(item.choices)
        else:
            assert item.choices is None


def test_field_mappings_pick_the_right_gold():
    assert [i.answer for i in load("gsm8k", path=fixture("gsm8k"))] == ["12", "2000"]  # after ####, no commas
    assert [i.answer for i in load("amc83", path=fixture("amc83"))] == ["19", "8", "2.5", "121"]  # floats -> ints
    assert [i.answer for i in load("amc23", path=fixture("amc23"))] == ["2.5", "121"]  # only the 2023 problems
    assert [i.answer for i in load("olympiadbench", path=fixture("olympiadbench"))] == ["8", "3, -3"]
    arc = load("arc_c", path=fixture("arc_c"))
    assert [a.choices[int(a.answer)] for a in arc] == ["the Sun", "sunlight", "meter"]  # labels A-D and 1-4
    gpqa = load("gpqa_diamond", path=fixture("gpqa_diamond"))
    assert gpqa[0].choices[int(gpqa[0].answer)] == "photon"
    mmlu = load("mmlu_pro", path=fixture("mmlu_pro"))
    assert [m.choices[int(m.answer)] for m in mmlu] == ["Paris", "11"] and len(mmlu[0].choices) == 10
    assert load("math500", path=fixture("math500"))[0].id == "test/prealgebra/1.json"


def test_arithmetic_is_a_registry_entry_generated_from_the_task_and_scored_exactly():
    from workflow.config import EvalConfig, TaskConfig
    from workflow.eval.plan import eval_groups
    from workflow.benchmarks.arithmetic import split
    b = REGISTRY["arithmetic"]
    assert b.synthetic and b.exact_match and b.template == "raw" and b.group == "arithmetic"
    task = TaskConfig(n_heldout=16)
    items = load("arithmetic", task=task, limit=10)
    assert len(items) == 10 and [i.id for i in items] == [p.id for p in split(task).heldout[:10]]
    assert not {i.id for i in items} & {p.id for p in split(task).train}  # held out, disjoint by construction
    assert eval_groups(EvalConfig(benchmarks=["arithmetic", "gsm8k"])) == {"arithmetic": ["arithmetic"],
                                                                        "extra": ["gsm8k"]}
    with pytest.raises(ValueError, match="generated from the run's task settings"):
        load("arithmetic")
    with pytest.raises(ValueError, match="eval.paths.*arithmetic.*generated"):
        EvalConfig(paths={"arithmetic": "x.jsonl"})


def test_parquet_and_json_files_load_like_jsonl(tmp_path):
    rows = read_records(fixture("mmlu_pro"))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mmlu_pro.parquet")
    assert load("mmlu_pro", path=tmp_path / "mmlu_pro.parquet") == load("mmlu_pro", path=fixture("mmlu_pro"))


def test_sets_match_the_seed_tables():
    assert set(MATH_SET) == {"math500", "aime24", "aime25", "amc23", "minerva", "olympiadbench"}
    assert set(OOD_SET) == {"arc_c", "gpqa_diamond", "mmlu_pro"}


def test_wrong_schema_and_missing_file_are_clear_errors(tmp_path):
    with pytest.raises(DatasetUnavailable, match=r"record 0 .* expected fields question, answer"):
        load("gsm8k", path=fixture("math500"))
    with pytest.raises(DatasetUnavailable, match="file not found"):
        load("gsm8k", path=tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="unknown benchmark .aime26."):
        load("aime26")


@pytest.mark.slow  # an interpreter importing datasets
def test_dataset_not_cached_says_how_to_fetch_it(tmp_path):
    # the real Hub path, offline with an empty cache: the message names the id and both ways to fix it
    code = "from workflow.benchmarks.catalog import load; load('olympiadbench')"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode != 0
    assert "Hothan/OlympiadBench (OE_TO_maths_en_COMP), split train, is not available here" in res.stderr
    assert f"HF_HOME (now {tmp_path / 'hf'})" in res.stderr.replace("\n", " ") or str(tmp_path / "hf") in res.stderr
    assert "point eval.paths.olympiadbench at a local" in res.stderr and "question, final_answer" in res.stderr


def test_prompt_templates():
    assert render("What is 1+1?").endswith("put your final answer within \\boxed{}.")
    seed = render("What is 1+1?", "seed003")
    assert seed.startswith("System: Your task is to follow") and seed.endswith("Assistant: <think>")
    assert "This is the problem: What is 1+1?" in seed
    assert render("Q:1+2=?A:", "raw") == "Q:1+2=?A:"

    class ChatTokenizer:  # a tokenizer with its own chat template is used as it is
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "|".join(f"{m['role']}:{m['content'][:20]}" for m in messages) + "|assistant:"

    prompt = render("Q", "seed003", ChatTokenizer())
    assert prompt.startswith("system:Your task is") and "|user:This is the problem" in prompt
    assert prompt.endswith("|assistant:")


def test_word_problems_are_generated_held_out_and_their_answers_follow_from_their_numbers():
    from workflow.config import RunConfig
    from workflow.data import sources
    from workflow.benchmarks.word_problems import KINDS
    b = REGISTRY["word_problems"]
    assert b.synthetic and b.kind == "math" and b.group == "extra" and not b.exact_match
    items = load("word_problems")  # fixed: no task settings needed
    assert len(items) == 200 and len({i.id for i in items}) == 200
    assert Counter(i.id.split("-")[0] for i in items) == {k: 40 for k in KINDS}
    for item in items:  # the id is (kind, numbers): recompute the answer from it
        kind, *nums = item.id.split("-")
        a, b_, *c = map(int, nums)
        want = {"add": a + b_, "sub": a - b_, "mul": a * b_, "div": a // b_ if kind == "div" else 0,
                "two_step": a + b_ - (c[0] if c else 0)}[kind]
        assert item.answer == str(want) and int(want) >= 0 and item.question.endswith("?")
    train = sources.load("word_problems")
    assert not {i.id for i in items} & {e.id.removeprefix("word_problems/") for e in train}  # disjoint numbers
    assert all(e.solution.endswith(f"The answer is \\boxed{{{e.answer}}}.") for e in train)
    with pytest.raises(ValueError, match="local engine's tiny character-level models.*word_problems"):
        RunConfig.model_validate({"eval": {"benchmarks": ["word_problems"]}})
