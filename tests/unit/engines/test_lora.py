"""LoRA (`model.lora`) on the local engine: the update rules act on the adapters only, the base weights stay
bit-identical, checkpoints hold the adapter (resume) and the merged model (evaluation), and a killed LoRA RL stage
resumes to the uninterrupted run's weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import SFT_FOR_RL, kill_and_resume_rl
from rule_problems import reference_gxpo_point
from workflow.config import LoRAConfig, ModelConfig, RunConfig
from workflow.engines import lora
from workflow.engines.local import demonstrations, sft_accumulate
from workflow.engines.tiny_lm import TOKENIZER, build_model, load_model
from workflow.launch import run_stage
from workflow.methods.gxpo.algorithm import GXPO
from workflow.methods.sfpo.algorithm import SFPO
from workflow.results.catalog import query
from workflow.stages import stage_config
from workflow.identity import stable_id

LORA = LoRAConfig(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj"))


def _wrapped(seed: int = 0):
    model = build_model(ModelConfig(n_layers=2, hidden=32, n_heads=2), TOKENIZER.vocab_size, seed).double()
    return lora.wrap(model, LORA, seed)


def _base_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


BATCH = demonstrations([("Q:12+30=?A:", "\\boxed{42}"), ("Q:(3+4)*5=?A:", "3+4=7,7*5=35\\boxed{35}"),
                        ("Q:55+17=?A:", "\\boxed{72}"), ("Q:(9-2)*3=?A:", "9-2=7,7*3=21\\boxed{21}")])


def _closure(model, opt):
    def closure():
        opt.zero_grad(set_to_none=True)
        return torch.tensor(sft_accumulate(model, BATCH, 2))
    return closure


def test_only_the_adapters_train_and_the_wrapped_model_starts_as_the_model():
    plain = build_model(ModelConfig(n_layers=2, hidden=32, n_heads=2), TOKENIZER.vocab_size, 0).double()
    model = _wrapped()
    params = lora.trainable(model)
    # rank x (in + out) per target module per layer: q_proj 32 -> 32, v_proj 32 -> 16 (2 heads x 8, no GQA here)
    expected = sum(LORA.rank * (m.in_features + m.out_features) for n, m in plain.named_modules()
                   if n.rsplit(".", 1)[-1] in LORA.target_modules)
    assert sum(p.numel() for p in params) == expected < sum(p.numel() for p in model.parameters()) // 10
    ids = BATCH["input_ids"]
    assert torch.equal(model(input_ids=ids).logits, plain(input_ids=ids).logits)  # B = 0: the same function
    with pytest.raises(ValueError, match=r"model.lora.target_modules: \['qproj'\] name no linear layer.*q_proj"):
        lora.wrap(plain, LoRAConfig(target_modules=("qproj",)), 0)


def test_gxpo_with_lora_is_its_definition_on_the_adapter_and_leaves_the_base_bit_identical():
    model = _wrapped()
    params = lora.trainable(model)
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    _closure(model, opt)()
    opt.step()  # one plain step first: B leaves 0, so A has a gradient and every adapter coordinate is active
    base = _base_state(model)
    trace = []
    inner = _closure(model, opt)

    def closure():
        before = [p.detach().clone() for p in params]
        loss = inner()
        trace.append((before, [p.grad.detach().clone() for p in params]))
        return loss

    stats = GXPO(K=5, alpha=0.7, eps=1e-12, max_grad_norm=None).step(params, opt, closure)
    assert stats.backward_passes == 3 and len(trace) == 3
    (theta0, g0), (theta1, g1), (theta_rep, _) = trace
    # theta2 (after the second AdamW step) rebuilt independently: a twin replays the plain step, then takes the
    # two probes' gradients as AdamW steps
    twin = _wrapped()
    twin_params = lora.trainable(twin)
    twin_opt = torch.optim.AdamW(twin_params, lr=1e-2, weight_decay=0.01)
    _closure(twin, twin_opt)()
    twin_opt.step()
    assert all(torch.equal(p.detach(), t) for p, t in zip(twin_params, theta0))
    for g in (g0, g1):
        for p, gi in zip(twin_params, g):
            p.grad = gi.clone()
        twin_opt.step()
    theta2 = [p.detach() for p in twin_params]
    expected = reference_gxpo_point(theta0, g0, theta1, g1, theta2, 5, 0.7, 1e-12)
    assert [t.shape for t in theta_rep] == [p.shape for p in params]  # the probes are adapter-sized
    for got, exp in zip(theta_rep, expected):
        assert torch.allclose(got, exp, rtol=1e-9, atol=1e-12)
    after = _base_state(model)
    assert after.keys() == base.keys() and all(torch.equal(after[k], base[k]) for k in base)
    assert any(not torch.equal(a, b) for a, b in zip(theta0, [p.detach() for p in params]))  # the adapter moved


def test_sfpo_with_lora_keeps_the_base_bit_identical():
    model = _wrapped(1)
    params = lora.trainable(model)
    opt = torch.optim.AdamW(params, lr=1e-2)
    base = _base_state(model)
    rule = SFPO(K=3, alpha=0.8)
    for _ in range(3):
        rule.step(params, opt, _closure(model, opt))
    after = _base_state(model)
    assert all(torch.equal(after[k], base[k]) for k in base)
    assert any(not torch.equal(p.detach(), torch.zeros_like(p)) for n, p in model.named_parameters()
               if "lora_B" in n)


# ------------------------------------------------------------------------------------ stages, checkpoints, resume
RL = {"steps": 12, "prompts_per_step": 8, "group_size": 8, "checkpoint_every": 3, "max_new_tokens": 20,
      "update": "gxpo", "lr": 3e-3}


@pytest.fixture(scope="module")
def lora_sft(sft_for_rl):
    """A (full fine-tuning) SFT checkpoint with mixed RL rewards; the RL runs of this module add LoRA."""
    return sft_for_rl, RunConfig.model_validate({**SFT_FOR_RL, "rl": RL, "model": {**SFT_FOR_RL["model"],
                                                                                   "lora": {"rank": 4, "alpha": 8.0}}})


@pytest.mark.slow
def test_lora_is_in_the_run_id_only_when_set(lora_sft):
    _, cfg = lora_sft
    plain = cfg.model_copy(update={"model": cfg.model.model_copy(update={"lora": None})})
    assert "lora" not in stage_config(plain, "rl", sft_id="s")["model"]
    assert stage_config(cfg, "rl", sft_id="s")["model"]["lora"]["rank"] == 4
    assert stable_id(stage_config(cfg, "rl", sft_id="s")) != stable_id(stage_config(plain, "rl", sft_id="s"))


@pytest.mark.slow
def test_a_killed_lora_rl_stage_resumes_its_adapter_to_the_uninterrupted_weights(lora_sft, tmp_path):
    sft, cfg = lora_sft
    sft_id = json.loads(sft.read_text())["id"]
    rcfg = stage_config(cfg, "rl", sft_id=sft_id)
    run_id = stable_id(rcfg)
    ref_done = run_stage("rl", "lora", run_id, rcfg, results_root=tmp_path / "ref", init=sft)

    root = tmp_path / "killed"
    done = kill_and_resume_rl("lora", run_id, rcfg, sft, root, RL["steps"])
    final = done.parent / json.loads(done.read_text())["checkpoint"]
    ref_final = ref_done.parent / json.loads(ref_done.read_text())["checkpoint"]
    # the adapter resumed: the killed-and-resumed run ends on the uninterrupted run's adapter, bit for bit
    got_a, ref_a = (load_file(d / lora.ADAPTER / "adapter_model.safetensors") for d in (final, ref_final))
    assert got_a.keys() == ref_a.keys() and all(torch.equal(got_a[k], ref_a[k]) for k in ref_a)
    assert any(k.endswith("lora_B.weight") and ref_a[k].abs().sum() > 0 for k in ref_a), "RL did not move B"
    # the checkpoint's model is the merged one: the SFT weights where no adapter sits, W + (alpha/r) B A where one does
    init = load_file(sft.parent / json.loads(sft.read_text())["checkpoint"] / "model.safetensors")
    merged = load_file(final / "model.safetensors")
    assert merged.keys() == init.keys()
    for k in init:
        if k.endswith(".weight") and any(f".{m}." in k for m in cfg.model.lora.target_modules):  # q, k, v, o_proj
            prefix = "base_model.model." + k.rsplit(".weight", 1)[0]
            delta = 2.0 * got_a[f"{prefix}.lora_B.weight"] @ got_a[f"{prefix}.lora_A.weight"]
            assert torch.allclose(merged[k], init[k] + delta, atol=1e-6), k
        else:
            assert torch.equal(merged[k], init[k]), k
    load_model(final)  # an ordinary Hugging Face directory: what the eval stage loads
    steps = "SELECT step, loss, reward, backward_passes FROM train_steps WHERE stage = 'rl' ORDER BY step"
    assert query(steps, root).to_pylist() == query(steps, tmp_path / "ref").to_pylist()
