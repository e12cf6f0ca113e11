"""The pretrain stage (config.pretrain, issue 59): a capable base at demo scale. The local model trained on plain
arithmetic text (the training problems as equations, no prompt template, no \\boxed{}) before SFT or RL; a stage of
its own whose id follows from its config, shared by every run that names the same base, and the model SFT (or RL
without SFT) starts from and step 0 evaluates."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file

from workflow.benchmarks.arithmetic import split
from workflow.config import PretrainConfig, RunConfig, TaskConfig
from workflow.engines.local import TOKENIZER, text_batch
from workflow.launch import _checkpoint_at, read_done, run_stage
from workflow.results.catalog import query
from workflow.stages import stage_config
from workflow.identity import stable_id

TINY = {"model": {"n_layers": 1, "hidden": 32, "n_heads": 2}, "task": {"n_heldout": 16, "two_step_fraction": 0.5}}
PRETRAIN = {"enabled": True, "steps": 4, "batch_size": 8, "checkpoint_every": 2}


def _weights(ckpt) -> dict[str, torch.Tensor]:
    return load_file(ckpt / "model.safetensors")


def test_the_pretraining_text_is_training_problems_solved_in_plain_styles_and_never_a_held_out_one():
    task = TaskConfig(n_heldout=64, two_step_fraction=0.5)
    pre = PretrainConfig(enabled=True, batch_size=64, qa_fraction=0.3, boxed_fraction=0.1)
    held_out = {p.prompt.removeprefix("Q:").removesuffix("=?A:") for p in split(task).heldout}
    question = r"(\(\d+[-+]\d+\)\*\d+|\d+\+\d+)"
    styles = {"equation": re.compile(rf"{question}=(\d+)"), "qa": re.compile(rf"Q:{question}=\?A:(\d+)"),
              "boxed": re.compile(rf"{question}=\\boxed{{(\d+)}}")}
    counts = dict.fromkeys(styles, 0)
    for step in range(20):
        batch = text_batch(task, pre, step)
        for ids, mask in zip(batch["input_ids"], batch["loss_mask"]):
            n = int((ids != TOKENIZER.PAD).sum())
            text = TOKENIZER.decode(ids[:n].tolist())  # (decode drops the <eos>)
            style, found = next((k, m) for k, rx in styles.items() if (m := rx.fullmatch(text)))
            counts[style] += 1
            q, answer = found.groups()
            assert q not in held_out and str(eval(q)) == answer, text  # a training problem, solved
            assert ids[n - 1] == TOKENIZER.EOS  # each document ends
            assert mask[: n - 1].tolist() == [1.0] * (n - 1) and not mask[n - 1:].any()  # every token but the first
    total = sum(counts.values())  # 1,280 documents: the shares within a few points of the settings
    assert abs(counts["qa"] / total - 0.3) < 0.05 and abs(counts["boxed"] / total - 0.1) < 0.03, counts
    again = text_batch(task, pre, 7)["input_ids"]
    assert torch.equal(again, text_batch(task, pre, 7)["input_ids"])  # a pure function of (seed, step): resumable


def test_a_pretrained_base_is_one_stage_its_runs_share_and_the_model_sft_rl_and_step_0_start_from(tmp_path):
    cfg = {**TINY, "pretrain": PRETRAIN, "sft": {"steps": 1, "batch_size": 4, "lr": 1e-12, "checkpoint_every": 1},
           "rl": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "checkpoint_every": 1},
           "eval": {"at_start": True}}
    runs = [RunConfig.model_validate({**cfg, "seed": s}) for s in (0, 1)]
    pcfg = stage_config(runs[0], "pretrain")
    assert pcfg == stage_config(runs[1], "pretrain")  # the RL seeds share one base
    pretrain_id = stable_id(pcfg)
    base_done = run_stage("pretrain", "pt", pretrain_id, pcfg, results_root=tmp_path)
    base = read_done(base_done)["checkpoint_path"]
    steps = query("SELECT step, flops > 0 AS counted FROM train_steps WHERE stage = 'pretrain' ORDER BY step",
                  tmp_path).to_pylist()
    assert [(r["step"], r["counted"]) for r in steps] == [(s, True) for s in (1, 2, 3, 4)]

    # SFT starts from the base (at lr 1e-12 one step leaves it where it started), and names it in its id
    scfg = stage_config(runs[0], "sft", pretrain_id=pretrain_id)
    assert scfg["pretrain_id"] == pretrain_id
    sft_done = run_stage("sft", "pt", stable_id(scfg), scfg, results_root=tmp_path, base=base_done)
    after_sft = _weights(read_done(sft_done)["checkpoint_path"])
    for name, w in _weights(base).items():
        assert torch.allclose(after_sft[name], w, atol=1e-6), name

    # RL without SFT starts from the base; its step 0 is the base; its runs row names the base as its parent
    no_sft = RunConfig.model_validate({**cfg, "sft": {"enabled": False}})
    rcfg = stage_config(no_sft, "rl", pretrain_id=pretrain_id)
    assert rcfg["pretrain_id"] == pretrain_id and rcfg["sft_id"] is None
    rl_done = run_stage("rl", "pt", stable_id(rcfg), rcfg, results_root=tmp_path, base=base_done)
    assert _checkpoint_at(rl_done, 0).resolve() == base.resolve()
    # what eval_start hands a step-0 job of a run without SFT: the pretrain stage's DONE.json
    assert _checkpoint_at(base_done, 0).resolve() == base.resolve()
    parent, = query(f"SELECT parent_id FROM runs WHERE stage = 'rl' AND run_id = '{stable_id(rcfg)}'",
                    tmp_path).column(0).to_pylist()
    assert parent == pretrain_id


def test_runs_without_a_base_keep_their_ids_and_other_base_settings_are_other_runs():
    plain = RunConfig.model_validate(TINY)
    assert "pretrain_id" not in stage_config(plain, "sft") and "pretrain_id" not in stage_config(plain, "rl")
    assert stage_config(plain, "rl") == stage_config(RunConfig.model_validate({**TINY, "pretrain": {"steps": 9}}),
                                                     "rl")  # settings of a pretraining that is off change nothing
    with pytest.raises(Exception, match="qa_fraction: 0.9 \\+ boxed_fraction 0.2 is more than every document"):
        RunConfig.model_validate({**TINY, "pretrain": {"qa_fraction": 0.9, "boxed_fraction": 0.2}})
    a = RunConfig.model_validate({**TINY, "pretrain": PRETRAIN})
    b = RunConfig.model_validate({**TINY, "pretrain": {**PRETRAIN, "steps": 8}})
    assert stable_id(stage_config(a, "pretrain")) != stable_id(stage_config(b, "pretrain"))


def test_a_base_on_an_engine_that_does_not_pretrain_is_refused_naming_the_key():
    with pytest.raises(Exception) as e:
        RunConfig.model_validate({**TINY, "engine": {"name": "verl", "verl": {"model_path": "rlsweep:tiny"}},
                                  "eval": {"backend": "vllm"}, "pretrain": {"enabled": True}})
    assert "pretrain.enabled" in str(e.value) and "starts from the model it is given" in str(e.value)


def test_step_0_of_a_run_without_sft_is_evaluable_from_a_pretrained_base_only():
    RunConfig.model_validate({**TINY, "pretrain": {"enabled": True}, "sft": {"enabled": False},
                              "eval": {"at_start": True}})
    with pytest.raises(Exception, match="eval.at_start"):
        RunConfig.model_validate({**TINY, "sft": {"enabled": False}, "eval": {"at_start": True}})
