"""Mixed-policy methods on the verl engine, up to the hardware boundary (no Ray, no vLLM): the driver's batch
transformation after generation (mix_batch.py: groups of verl's rows, expert traces, demonstration rows, masks and
per-token weights), the workers' loss (mix_loss.py: micro-batch and data-parallel splits give the same gradient;
without expert tokens it is verl's own ppo_loss), the train_steps columns, and the config's refusals."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import need

need("verl")

from workflow.algos.mix import ON_POLICY  # noqa: E402
from workflow.config import RLConfig  # noqa: E402
from workflow.methods.hpt.algorithm import HPT  # noqa: E402
from workflow.methods.luffy.algorithm import LUFFY  # noqa: E402
from workflow.methods.srft.algorithm import SRFT  # noqa: E402
from workflow.algos.mix_batch import (StepRows, demo_positions, group_positions, loss_plan, padded,  # noqa
                                             rollout_metrics, token_fields, trace_response)

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules


G = 4


def keys_shuffled(n_prompts: int, rng) -> list[str]:
    """verl's TransferQueue keys `{uid}_{session}_{turn}` in the order verl's balancing leaves them."""
    keys = [f"uid-{p:04d}-x_{s}_0" for p in range(n_prompts) for s in range(G)]
    return [keys[i] for i in rng.permutation(len(keys))]


def step_rows(slots_by_group, rewards, rng, lengths=None, entropy=None) -> StepRows:
    """Rows in a shuffled batch order; trace rows' expert tokens = all but the eos."""
    n_prompts = len(slots_by_group)
    keys = keys_shuffled(n_prompts, rng)
    groups = group_positions(keys)
    n = len(keys)
    lengths = lengths if lengths is not None else rng.integers(2, 7, size=n)
    slots, reward, off, ent, adv = [None] * n, np.zeros(n), [None] * n, [None] * n, np.zeros(n)
    r = np.asarray(rewards, float)
    centred = r - r.mean(axis=1, keepdims=True)  # GRPO without std, as verl's grpo with norm_adv_by_std off
    for p, g in enumerate(groups):
        for j, pos in enumerate(g):
            slots[pos], reward[pos], adv[pos] = slots_by_group[p][j], r[p, j], centred[p, j]
            off[pos] = torch.arange(lengths[pos]) < (lengths[pos] - 1 if not slots[pos].generate else 0)
            ent[pos] = torch.as_tensor(entropy[pos] if entropy is not None else rng.uniform(0.5, 2.0, lengths[pos]),
                                       dtype=torch.float32)
    masks = [torch.ones(int(k)) for k in lengths]
    return StepRows(groups=groups, reward=reward, mask=padded(masks), off=padded(off, torch.bool), entropy=padded(ent),
                    advantage=adv, slots=slots)


# ---------------------------------------------------------------------------------------------- the driver's batch
def test_rows_group_by_prompt_in_session_order_whatever_verls_order():
    keys = ["b_1_0", "a_0_0", "b_0_0", "a_1_0", "c_1_0", "c_0_0"]
    assert group_positions(keys) == [[2, 0], [1, 3], [5, 4]]


def test_a_trace_is_the_demonstration_plus_eos_cut_like_a_rollout():
    assert trace_response([5, 6, 7], eos=1, max_len=10) == ([5, 6, 7, 1], 4)  # its eos is the expert's too
    assert trace_response([5, 6, 7], eos=1, max_len=2) == ([5, 6], 2)


def test_luffy_trace_replaces_the_last_session_and_trains_shaped_with_global_token_mean_weights():
    rng = np.random.default_rng(0)
    luffy = LUFFY(n_off=1)
    slots = luffy.rollout_slots([5, 7, 3], G, rng)
    assert [s.generate for s in slots[0]] == [True] * 3 + [False]
    rows = step_rows(slots, [[0, 1, 0, 1], [0, 0, 0, 1], [1, 1, 0, 0]], rng)
    plan, signals = loss_plan(luffy, rows)
    assert plan.metrics["trace_reward"] == pytest.approx(2 / 3)
    tokens = token_fields(luffy, plan, rows, demo_positions(plan, rows), "token-mean", max_len=8, kl_coef=0.0)
    assert float(tokens.w_rl.sum()) == pytest.approx(1.0)  # one token mean over every RL token of the batch
    assert torch.equal(tokens.shaped.bool(), rows.off)  # the expert tokens, and only they, take -f(pi) A
    assert float(tokens.w_sft.sum()) == 0.0
    traces = [pos for pos, s in enumerate(rows.slots) if not s.generate]
    assert float(rows.off[traces].sum()) == tokens.metrics["off_policy_frac"] * float(rows.mask.sum())
    adv = tokens.advantages
    for pos in range(len(rows.slots)):  # each row's GRPO advantage over its mixed group on its tokens
        assert torch.allclose(adv[pos], rows.advantage[pos] * rows.mask[pos])
    assert rollout_metrics(rows)["rollouts"] == 9 and "reward" in rollout_metrics(rows)


def test_loss_agg_token_sum_divides_by_the_constant_max_len():
    rng = np.random.default_rng(1)
    rows = step_rows([[ON_POLICY] * G] * 2, [[0, 1, 0, 1], [1, 0, 0, 0]], rng)
    mix = LUFFY()
    plan, _ = loss_plan(mix, rows)
    tokens = token_fields(mix, plan, rows, {}, "token-sum", max_len=16, kl_coef=0.0)
    assert float(tokens.w_rl.sum()) == pytest.approx(float(rows.mask.sum()) / (8 * 16))


def test_hpt_swaps_a_demonstration_into_a_switched_group_and_drops_its_rollouts_from_the_rl_loss():
    rng = np.random.default_rng(2)
    hpt = HPT(threshold=0, sft_coef=0.5)
    slots = hpt.rollout_slots([5, 5], G, rng)
    rows = step_rows(slots, [[0, 0, 0, 0], [1, 0, 1, 0]], rng)
    plan, _ = loss_plan(hpt, rows)
    demos = demo_positions(plan, rows)
    assert list(demos) == [0] and demos[0] == rows.groups[0][-1]  # prompt 0 (all wrong) -> its last rollout
    # what the hooks do next: that row now holds prompt + demonstration + eos, an SFT-only row
    mask = rows.mask.clone()
    mask[demos[0]] = 0
    mask[demos[0], :6] = 1
    rows.mask, rows.off[demos[0]] = mask, False
    tokens = token_fields(hpt, plan, rows, demos, "token-mean", max_len=8, kl_coef=0.0)
    assert float(tokens.w_rl[rows.groups[0]].sum()) == 0.0 and float(tokens.w_rl.sum()) == pytest.approx(1.0)
    assert float(tokens.w_sft.sum()) == pytest.approx(0.5)  # sft_coef x the token mean over the demonstration
    assert float(tokens.w_sft[demos[0]].sum()) == pytest.approx(0.5)
    assert tokens.metrics["sft_prompt_frac"] == 0.5 and tokens.metrics["sft_weight"] == 0.5
    assert tokens.metrics["sft_frac"] == pytest.approx(6 / (6 + float(rows.mask[rows.groups[1]].sum())))


def test_hpt_refuses_a_plan_that_keeps_every_rollout_and_still_wants_sft():
    rng = np.random.default_rng(3)
    rows = step_rows([[ON_POLICY] * G], [[0, 0, 0, 0]], rng)
    plan, _ = loss_plan(HPT(), rows)
    plan.rl_rows[:] = True
    with pytest.raises(ValueError, match="needs a row the RL loss does not use"):
        demo_positions(plan, rows)


def test_srft_trains_the_trace_with_both_terms_and_signed_rollout_weights():
    rng = np.random.default_rng(4)
    srft = SRFT(sft_coef=0.5, rl_coef=0.1)
    slots = srft.rollout_slots([5, 5], G, rng)
    rows = step_rows(slots, [[1, 0, 0, 1], [0, 1, 1, 1]], rng)
    plan, signals = loss_plan(srft, rows)
    traces = [g[-1] for g in rows.groups]
    h_demo = [float(rows.entropy[t, : int(rows.mask[t].sum())].mean()) for t in traces]
    assert np.allclose(signals["demo_entropy"], h_demo)
    demos = demo_positions(plan, rows)
    assert [demos[p] for p in (0, 1)] == traces  # the trace row carries the SFT term too: same tokens
    tokens = token_fields(srft, plan, rows, demos, "token-mean", max_len=8, kl_coef=0.0)
    n = [float(rows.mask[t].sum()) for t in traces]  # one token mean over both demonstrations, weighted per prompt
    assert float(tokens.w_sft.sum()) == pytest.approx(0.5 * (np.exp(-h_demo[0]) * n[0] + np.exp(-h_demo[1]) * n[1])
                                                      / sum(n))
    assert all(float(tokens.w_rl[t].sum()) > 0 for t in traces)  # ... and its RL (shaped) term
    wrong = rows.groups[0][1]  # a wrong rollout: advantage -1 on every token
    assert torch.allclose(tokens.advantages[wrong], -rows.mask[wrong])
    right = rows.groups[1][1]
    assert float(tokens.advantages[right, 0]) == pytest.approx(0.1 * np.exp(float(signals["seq_entropy"][5])))


# ---------------------------------------------------------------------------------------------- the workers' loss
def mix_batch_td(seed: int = 0, n: int = 8):
    """verl's no-padding GRPO batch (tests/support/verl_cpu.py) with the driver's fields: rows 0 and 5 are expert traces."""
    import verl_cpu
    from verl.utils import tensordict_utils as tu
    td = verl_cpu.grpo_batch(seed=seed, rows=slice(0, n), micro=2, global_rows=n)
    mask = td["response_mask"]  # verl's padded layout here (TransferQueue rows arrive nested: the loss takes both)
    off = torch.zeros_like(mask, dtype=torch.bool)
    off[[0, 5]] = mask[[0, 5]].bool()
    w = mask / mask.sum()
    w_sft = torch.zeros_like(mask)
    w_sft[5] = 0.7 * mask[5] / mask[5].sum()
    for name, value in (("rlsweep_w_rl", w), ("rlsweep_w_kl", w), ("rlsweep_w_sft", w_sft),
                        ("rlsweep_shaped", off.float()), ("rlsweep_kl_coef", torch.zeros_like(mask))):
        td[name] = value
    tu.assign_non_tensor(td, rlsweep_mix={"lam": 0.1})
    return td


def actor_config(**kl):
    from verl.workers.config import FSDPActorConfig
    return FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=2,
                           clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode="token-mean", **kl)


def loss_grad(td, parts: list[slice], dp_size: int = 1, loss=None, config=None) -> tuple[torch.Tensor, float]:
    """d(loss)/d(log-probs) of the whole batch, the loss taken over `parts` of its rows as separate micro-batches
    (or, with dp_size > 1, ranks whose gradients FSDP averages)."""
    from verl.utils import tensordict_utils as tu
    from workflow.engines.verl.workers.mix_loss import mixed_loss
    loss = loss or (lambda c, m, d: mixed_loss(c, m, d, lam=0.1))
    ids = td["input_ids"]
    g = torch.Generator().manual_seed(7)
    logp = (-torch.rand(ids.values().shape[0], generator=g) * 3).requires_grad_(True)
    offsets = ids.offsets()
    total = 0.0
    for part in parts:
        rows = list(range(len(td)))[part]
        micro = tu.index_select_tensor_dict(td, torch.tensor(rows))
        values = torch.cat([logp[offsets[i]: offsets[i + 1]] for i in rows])
        micro_ids = micro["input_ids"]
        tu.assign_non_tensor(micro, dp_size=dp_size, batch_num_tokens=int(td["response_mask"].sum()),
                             global_batch_size=len(td))
        out = {"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=micro_ids.offsets())}
        value, _ = loss(config or actor_config(), out, micro)
        (value / dp_size).backward()  # FSDP's gradient average over ranks
        total += float(value.detach()) / dp_size
    return logp.grad.clone(), total


def test_the_mixed_loss_gradient_is_the_same_for_any_micro_batch_split_and_rank_count():
    td = mix_batch_td()
    whole, loss = loss_grad(td, [slice(0, 8)])
    assert whole.abs().sum() > 0
    for parts in ([slice(i, i + 1) for i in range(8)], [slice(0, 3), slice(3, 8)]):
        split, total = loss_grad(td, parts)
        assert torch.allclose(split, whole, atol=1e-7) and total == pytest.approx(loss, abs=1e-6)
    ranks, _ = loss_grad(td, [slice(0, 4), slice(4, 8)], dp_size=2)
    assert torch.allclose(ranks, whole, atol=1e-7)


def test_without_expert_or_sft_tokens_the_mixed_loss_is_verls_ppo_loss():
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss
    td = mix_batch_td()
    td["rlsweep_shaped"], td["rlsweep_w_sft"] = td["rlsweep_shaped"] * 0, td["rlsweep_w_sft"] * 0
    ours, _ = loss_grad(td, [slice(0, 8)])

    def verl(config, out, data):
        tu.assign_non_tensor(data, global_batch_size=None)
        return ppo_loss(config, out, data)
    theirs, _ = loss_grad(td, [slice(0, 8)], loss=verl)
    assert torch.allclose(ours, theirs, atol=1e-7), (ours - theirs).abs().max()


def test_expert_tokens_get_the_shaped_gradient_and_the_sft_row_its_nll():
    td = mix_batch_td()
    grad, _ = loss_grad(td, [slice(0, 8)])
    # recompute row 0's gradient by hand: -A f(p) has d/dlogp = -A lam p / (p + lam)^2, times its weight
    ids = td["input_ids"]
    g = torch.Generator().manual_seed(7)
    logp = -torch.rand(ids.values().shape[0], generator=g) * 3
    end = int(ids.offsets()[1])
    k = int(td["response_mask"][0].sum())
    p = logp[end - k - 1: end - 1].exp()  # log-prob of response token j sits at position j - 1 (verl's shift)
    adv, w = td["advantages"][0, :k], td["rlsweep_w_rl"][0, :k]
    assert torch.allclose(grad[end - k - 1: end - 1], -adv * 0.1 * p / (p + 0.1) ** 2 * w, atol=1e-7)
    # row 5 is a trace that also carries the SFT term: the shaped gradient plus -w_sft (d(-logp)/dlogp = -1)
    end = int(ids.offsets()[6])
    k = int(td["response_mask"][5].sum())
    p = logp[end - k - 1: end - 1].exp()
    adv, w, w_sft = td["advantages"][5, :k], td["rlsweep_w_rl"][5, :k], td["rlsweep_w_sft"][5, :k]
    assert torch.allclose(grad[end - k - 1: end - 1], -adv * 0.1 * p / (p + 0.1) ** 2 * w - w_sft, atol=1e-7)


def test_each_rows_kl_penalty_takes_its_own_coefficient_and_the_kl_column_stays_the_plain_kl():
    """FAST-GRPO's dynamic KL on verl: the driver's per-row coefficients (rlsweep_kl_coef) weigh the KL term."""
    from workflow.engines.verl.workers.mix_loss import mixed_loss
    td = mix_batch_td()
    td["ref_log_prob"] = td["old_log_probs"] - 0.3 * td["response_mask"]
    config = actor_config(use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=0.0)
    kl_metric = []

    def loss(c, m, d):
        value, metrics = mixed_loss(c, m, d, lam=0.1)
        kl_metric.append(float(metrics["kl_loss"].aggregate()))
        return value, metrics
    without, _ = loss_grad(td, [slice(0, 8)], loss=loss, config=config)
    td["rlsweep_kl_coef"] = torch.zeros_like(td["response_mask"])
    td["rlsweep_kl_coef"][3] = 0.01 * td["response_mask"][3]  # only row 3's group has a coefficient
    with_kl, _ = loss_grad(td, [slice(0, 8)], loss=loss, config=config)
    ids = td["input_ids"]
    row3 = slice(int(ids.offsets()[3]), int(ids.offsets()[4]))
    changed = (with_kl - without).abs() > 1e-9
    assert changed[row3].any() and not changed[: row3.start].any() and not changed[row3.stop:].any()
    assert kl_metric[0] == pytest.approx(kl_metric[1]) and kl_metric[0] > 0  # the KL itself, whatever weighs it


# ---------------------------------------------------------------------------------------------- rows and config
def test_train_steps_row_carries_the_mix_columns():
    from workflow.engines.verl.controller.metrics import train_steps_row
    metrics = {"critic/score/mean": 0.5, "perf/total_num_tokens": 100, "rlsweep/mix/off_policy_frac": 0.25,
               "rlsweep/mix/trace_reward": 1.0, "rlsweep/mix/reward": 0.2, "rlsweep/mix/rollouts": 12,
               "rlsweep/mix/sft_frac": 0.0, "rlsweep/mix/discarded_tokens": 20,
               "actor/rlsweep/sft_loss": 0.3, "actor/rlsweep/rl_loss": -0.1}
    row = train_steps_row(metrics, step=1, rollouts=16, n_params=1000)
    assert row["off_policy_frac"] == 0.25 and row["trace_reward"] == 1.0 and row["sft_frac"] == 0.0
    assert row["reward"] == 0.2 and row["rollouts"] == 12 and row["tokens"] == 120
    assert row["sft_loss"] == 0.3 and row["sft_loss_share"] == pytest.approx(0.75)
    assert row["buffer_size"] is None
    plain = train_steps_row({"critic/score/mean": 0.5}, step=1, rollouts=16)
    assert plain["off_policy_frac"] is None and plain["reward"] == 0.5


def test_verl_runs_every_mixed_policy_method_prefix_rft_through_our_agent_loop():
    from pydantic import ValidationError
    from workflow.config import RunConfig
    from workflow.engines.verl.contract import SEEDED_AGENT_LOOP
    from workflow.engines.verl.job.translate import translate
    from workflow.methods.prefix_rft.verl_adapter import AGENT_LOOP as VERL_AGENT_LOOP
    from workflow.methods.registry import METHODS
    from workflow.strict import format_validation_error
    verl = {"name": "verl", "verl": {"model_path": "m"}}
    agent = "actor_rollout_ref.rollout.agent.default_agent_loop"
    for mix in [n for n in METHODS.builtins if METHODS.get(n).role == "mix"]:  # the shipped ones (not tests' toys)
        keys = translate(RunConfig.model_validate({"rl": {"mix": mix}, "engine": verl, "eval": {"backend": "vllm"}}))
        assert keys["trainer.v1.rlsweep"]["rl"]["mix"] == mix  # the run's whole RL config (contract.run_rl)
        assert keys.get(agent) == (VERL_AGENT_LOOP if mix == "prefix_rft" else SEEDED_AGENT_LOOP)  # both seeded
    verl["verl"]["overrides"] = {agent: "single_turn_agent"}  # would generate without the prefixes
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate({"rl": {"mix": "prefix_rft"}, "engine": verl, "eval": {"backend": "vllm"}})
    assert format_validation_error(e.value)[0].startswith(
        f"engine.verl.overrides.{agent}: rlsweep sets it to 'rlsweep_prefix_rft' for the method prefix_rft")


# ----------------------------------------------------------------------- Prefix-RFT: prefixes inside generation
def prefix_run(**prefix):
    """The verl config a Prefix-RFT run's agent loop reads (translate's keys, nested as Hydra composes them)."""
    from omegaconf import OmegaConf
    from workflow.config import RunConfig
    from workflow.engines.verl.job.translate import translate
    cfg = RunConfig.model_validate({"rl": {"mix": "prefix_rft", "group_size": 4, "steps": 10, "prefix_rft": prefix},
                                    "engine": {"name": "verl", "verl": {"model_path": "m"}},
                                    "eval": {"backend": "vllm"}, "seed": 3})
    keys = translate(cfg)
    tree = OmegaConf.create()
    for key in ("trainer.v1.rlsweep", "data.seed"):
        OmegaConf.update(tree, key, keys[key], force_add=True)
    return cfg, tree


class CharTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def test_the_agent_loop_prefixes_the_sessions_the_driver_expects_with_the_demonstrations_first_tokens():
    from workflow.methods.registry import build_mix
    from workflow.algos.mix_batch import prompt_slots
    from workflow.methods.prefix_rft.verl import session_prefix
    cfg, tree = prefix_run(n_prefixed=2, min_frac=0.2, max_frac=0.8)
    demo = "12+30=\\boxed{42}"  # 15 characters
    tok, seen = CharTokenizer(), set()
    for step in (1, 10):
        for index in range(20):
            info = {"demo": demo, "index": index}
            prefixes = [session_prefix(tree, tok, s, info, step, response_length=64) for s in range(4)]
            slots = prompt_slots(build_mix(cfg.rl), 4, cfg.rl.steps, len(demo), cfg.seed, step, index)
            assert prefixes[:2] == [[], []]  # the first G - n_prefixed sessions are plain rollouts
            for prefix, slot in zip(prefixes[2:], slots[2:]):
                assert prefix == tok.encode(demo)[: slot.prefix] and 3 <= len(prefix) <= 12  # floor(U[.2, .8] x 15)
                seen.add((step, len(prefix)))
            if step == 10:  # the cosine schedule has nearly closed the window: short prefixes only
                assert all(len(p) <= 4 for p in prefixes[2:])
    assert len({k for s, k in seen if s == 1}) > 3  # prompts draw different prefixes (their own generators)
    assert session_prefix(tree, tok, 3, {"demo": demo, "index": 0}, 1, response_length=2) == tok.encode(demo)[:2]
    assert session_prefix(tree, tok, 3, {"index": 0}, 1, response_length=64) == []  # a row without demonstration


def test_the_prefixed_server_continues_prompt_plus_prefix_and_returns_the_prefix_as_generated():
    import asyncio
    from verl.workers.rollout.replica import TokenOutput
    from workflow.methods.prefix_rft.verl import PrefixedServer
    calls = []

    class Server:
        async def generate(self, *, prompt_ids, sampling_params, request_id):
            calls.append((prompt_ids, sampling_params))
            return TokenOutput(token_ids=[9, 9], log_probs=[-0.5, -0.25], stop_reason="completed")

        other = "kept"

    server = PrefixedServer(Server(), prefix=[5, 6, 7], budget=8)
    out = asyncio.run(server.generate(prompt_ids=[1, 2], sampling_params={"temperature": 1.0}, request_id="r"))
    assert calls == [([1, 2, 5, 6, 7], {"temperature": 1.0, "max_tokens": 5})]  # the budget left after the prefix
    assert out.token_ids == [5, 6, 7, 9, 9] and out.log_probs == [0.0, 0.0, 0.0, -0.5, -0.25]
    assert out.stop_reason == "completed" and server.other == "kept"
    asyncio.run(PrefixedServer(Server(), [5] * 8, budget=8).generate(prompt_ids=[1], sampling_params={},
                                                                       request_id="r"))
    assert calls[-1][1]["max_tokens"] == 1  # a prefix as long as the budget: vLLM still generates one token


def test_the_driver_marks_prefix_tokens_off_policy_and_fails_when_the_agent_loop_did_not_prefix():
    from workflow.algos.mix import Slot
    from workflow.engines.verl.controller.mix_hooks import DriverMix

    class Tok:
        eos_token_id = 0

    driver = DriverMix(RLConfig(mix="prefix_rft", max_new_tokens=4), seed=0, tokenizer=Tok())
    driver.demos = [[5, 6, 7, 8, 9]]
    driver.slots, driver.off_len = [ON_POLICY, Slot(prefix=3), Slot(prefix=6)], [0, 0, 0]
    responses = [torch.tensor([1, 2]), torch.tensor([5, 6, 7, 4]), torch.tensor([5, 6, 7, 8])]
    driver._check_prefixes([[0, 1, 2]], responses)
    assert driver.off_len == [0, 3, 4]  # a prefix longer than the response budget is cut at it
    responses[1] = torch.tensor([1, 6, 7, 4])
    with pytest.raises(RuntimeError, match="default_agent_loop"):
        driver._check_prefixes([[0, 1, 2]], responses)


def test_verl_rows_carry_the_demonstration_only_with_a_mix():
    from workflow.config import RunConfig
    from workflow.engines.verl.job.data import rl_rows
    from workflow.stages import parse_stage
    for mix in ("none", "luffy"):
        cfg = RunConfig.model_validate({"rl": {"mix": mix, "steps": 1, "prompts_per_step": 2},
                                        "engine": {"name": "verl", "verl": {"model_path": "m"}},
                                        "eval": {"backend": "vllm"}})
        from workflow.stages import stage_config
        rows = rl_rows(parse_stage("rl", stage_config(cfg, "rl")))
        assert ("demo" in rows[0]["extra_info"]) == (mix != "none")
    assert "\\boxed" in rows[0]["extra_info"]["demo"]



def test_a_mixed_policy_run_on_verl_refuses_more_than_one_update_per_step():
    from pydantic import ValidationError
    from workflow.config import RunConfig
    from workflow.strict import format_validation_error
    base = {"engine": {"name": "verl", "verl": {"model_path": "m", "overrides": {
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16}}}, "rl": {"mix": "luffy", "prompts_per_step": 32},
            "eval": {"backend": "vllm"}}
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate(base)
    assert format_validation_error(e.value)[0].startswith(
        "engine.verl.overrides.actor_rollout_ref.actor.ppo_mini_batch_size: 16: with rl.mix luffy it must be 32")
    base["rl"]["mix"] = "none"  # plain GRPO takes several mini-batches per step as verl does
    RunConfig.model_validate(base)


# ------------------------------------------------------------------------------- ReLIFT's interleaved SFT step
def test_a_demonstration_row_rebuilds_every_per_token_field_at_its_length():
    from workflow.algos.mix_batch import demonstration_row
    template = {"prompts": torch.tensor([7, 8]), "responses": torch.tensor([3, 4, 5]),
                "response_mask": torch.ones(3, dtype=torch.int64), "input_ids": torch.tensor([7, 8, 3, 4, 5]),
                "position_ids": torch.arange(5), "old_log_probs": torch.full((3,), -0.5),
                "advantages": torch.ones(3), "rlsweep_w_rl": torch.full((3,), 0.1), "uid": "u",
                "extra_info": {"demo": "x"}, "num_turns": torch.tensor(1), "attention_mask": torch.ones(5)}
    row = demonstration_row(template, torch.tensor([9]), [1, 2])
    assert row["input_ids"].tolist() == [9, 1, 2] and row["position_ids"].tolist() == [0, 1, 2]
    assert row["prompts"].tolist() == [9] and row["responses"].tolist() == [1, 2]
    assert row["response_mask"].tolist() == [1, 1] and row["attention_mask"].tolist() == [1, 1, 1]
    for name in ("old_log_probs", "advantages", "rlsweep_w_rl"):  # nothing of the RL step's row survives
        assert row[name].tolist() == [0.0, 0.0] and row[name].dtype == torch.float32
    assert row["uid"] == "u" and row["extra_info"] == {"demo": "x"} and int(row["num_turns"]) == 1
    assert set(row) == set(template)  # the fields of verl's batch handle, no more
    whole = demonstration_row({**template, "log_probs": torch.ones(5)}, torch.tensor([9]), [1, 2])
    assert whole["log_probs"].tolist() == [0.0, 0.0, 0.0]  # a per-sequence field: zeros over prompt + response


def test_interleaved_sft_weights_are_one_token_mean_and_padding_rows_weigh_nothing():
    from workflow.algos.mix_batch import sft_weights
    w = sft_weights([torch.ones(3), torch.ones(1), torch.ones(3)], trained=2)
    assert [x.tolist() for x in w] == [[0.25] * 3, [0.25], [0.0] * 3]


class FakeEngine:
    """verl's engine as RuleTrainingWorker sees it: its train_batch (records the lr it stepped at) and its lr
    schedule (counts its steps)."""

    def __init__(self):
        self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
        self.lrs, self.schedule_steps = [], 0

    def train_batch(self, data, loss_function):
        self.lrs.append(self.optimizer.param_groups[0]["lr"])
        return {"metrics": {}}

    def lr_scheduler_step(self):
        self.schedule_steps += 1
        return self.optimizer.param_groups[0]["lr"]


def test_the_interleaved_sft_update_steps_at_the_scaled_lr_and_leaves_the_schedule_alone():
    from functools import partial
    from verl.utils import tensordict_utils as tu
    from workflow.engines.verl.workers.mix_loss import LR_SCALE, MIX_KEY
    from workflow.engines.verl.workers.actor import RuleTrainingWorker
    worker = RuleTrainingWorker.__new__(RuleTrainingWorker)  # no Ray, no model: only the engine hooks
    worker.engine = engine = FakeEngine()
    worker._install_rule_step()
    loss = partial(lambda config, out, data: None, config={})

    def batch(**mix):
        return tu.get_tensordict({"x": torch.zeros(2, 1)}, non_tensor_dict={MIX_KEY: {"lam": 0.1, **mix}})
    engine.train_batch(batch(), loss)  # the RL update: the run's lr, then verl's schedule step
    engine.lr_scheduler_step()
    engine.train_batch(batch(**{LR_SCALE: 0.2}), loss)  # ReLIFT's SFT step: lr x 0.2, no schedule step
    engine.lr_scheduler_step()
    engine.train_batch(batch(), loss)
    engine.lr_scheduler_step()
    assert engine.lrs == pytest.approx([0.5, 0.1, 0.5]) and engine.schedule_steps == 2
    assert engine.optimizer.param_groups[0]["lr"] == 0.5


def test_a_step_with_an_interleaved_sft_update_counts_its_pass_tokens_and_flops():
    from workflow.algos.flops import rl_step_flops, sft_flops
    from workflow.engines.verl.controller.metrics import train_steps_row
    metrics = {"perf/total_num_tokens": 100, "rlsweep/mix/off_policy_frac": 0.0, "rlsweep/mix/buffer_size": 3,
               "rlsweep/mix/interleaved_sft_rows": 2, "rlsweep/mix/interleaved_sft_tokens": 30,
               "rlsweep/mix/interleaved_sft_loss": 1.5}
    row = train_steps_row(metrics, step=1, rollouts=8, n_params=1000)
    assert row["backward_passes"] == row["optimizer_steps"] == 2 and row["tokens"] == 130
    assert row["flops"] == rl_step_flops(1000, 100, 1) + sft_flops(1000, 30)
    assert row["buffer_size"] == 3 and row["interleaved_sft_rows"] == 2 and row["interleaved_sft_loss"] == 1.5
    quiet = train_steps_row({**metrics, "rlsweep/mix/interleaved_sft_tokens": 0}, step=2, rollouts=8, n_params=1000)
    assert quiet["backward_passes"] == 1 and quiet["tokens"] == 100


def test_the_relift_buffer_is_saved_with_verls_checkpoint_and_restored_on_resume(tmp_path, monkeypatch):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from workflow.engines.verl.controller.mix_hooks import DriverMix
    from workflow.engines.verl.controller.trainer import RlsweepTrainer

    def verl_save(trainer):
        (tmp_path / f"global_step_{trainer.global_steps}").mkdir()

    def verl_init_end(trainer):  # verl's set-up resumed at step 3 (its _load_checkpoint) before this hook
        trainer.global_steps = 3
    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", verl_save)
    monkeypatch.setattr(PPOTrainerSync, "on_init_end", verl_init_end)

    def trainer():
        t = RlsweepTrainer.__new__(RlsweepTrainer)  # no Ray: only the checkpoint hooks
        t.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "v1": {"rlsweep": {}}}})
        t._rlsweep_mix = DriverMix(RLConfig(mix="relift", relift={"buffer_size": 4}), seed=0, tokenizer=None)
        t.replay_buffer = SimpleNamespace(poll_interval=2.0)  # verl's default
        return t
    before = trainer()
    before.global_steps = 3
    before._rlsweep_mix.mix.after_step([[[1, 2], [3]], [[4], [5, 6]]], np.asarray([[0.0, 0.0], [1.0, 0.0]]))
    before._save_checkpoint()
    after = trainer()
    after.on_init_end()
    assert after._rlsweep_mix.mix.state_dict() == {"buffer": [[[1, 2], [3]]], "steps": 1}
    assert after.replay_buffer.poll_interval == RlsweepTrainer.REPLAY_POLL_S



def test_the_update_rules_gate_is_saved_with_verls_checkpoint_and_goes_on_after_a_resume(tmp_path, monkeypatch):
    """SFPO's entropy gate lives on verl's driver: a requeued job, or the next segment of a run, resumes from verl's
    checkpoint with the gate's window, count and trip as they were at that step, not a fresh gate (which would
    re-enable fast steps a tripped gate had stopped)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from workflow.engines.verl.controller.trainer import RlsweepTrainer
    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint",
                        lambda t: (tmp_path / f"global_step_{t.global_steps}").mkdir())
    monkeypatch.setattr(PPOTrainerSync, "on_init_end", lambda t: setattr(t, "global_steps", 4))
    rl = {"update": "sfpo", "sfpo": {"K": 2, "window": 3, "tau": 0.5}}

    def trainer():
        t = RlsweepTrainer.__new__(RlsweepTrainer)  # no Ray: only the checkpoint hooks
        t.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "v1": {"rlsweep": {"rl": rl}}}})
        t.replay_buffer = SimpleNamespace(poll_interval=2.0)
        return t
    before = trainer()
    before.global_steps = 4
    for entropy in (1.0, 1.1, 0.9, 5.0):  # a window of 3, then an outlier: the gate trips
        spec = before._gates().before_update(entropy=entropy)
    assert spec["enabled"] is False and before._gates().state_dict()["gate"]["tripped_at"] is not None
    before._save_checkpoint()
    after = trainer()
    after.on_init_end()
    assert after._gates().state_dict() == before._gates().state_dict()
    assert after._gates().before_update(entropy=1.0)["enabled"] is False  # still tripped: plain GRPO goes on
    fresh = trainer()  # what a resume gave before the gate was saved
    assert fresh._gates().before_update(entropy=1.0)["enabled"] is True


def test_a_segment_job_schedules_the_learning_rate_over_the_whole_run(monkeypatch):
    """A segment job's trainer.total_training_steps is its end step (verl's loop stops there), from which verl set the
    optimizer's horizon; our trainer puts the run's back before the workers are built with it."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from workflow.engines.verl.controller.trainer import RlsweepTrainer
    monkeypatch.setattr(PPOTrainerSync, "_init_resource_pool_mgr", lambda t: None)
    t = RlsweepTrainer.__new__(RlsweepTrainer)
    t.config = OmegaConf.create({"trainer": {"total_training_steps": 20, "v1": {"rlsweep": {"rl": {"steps": 60}}}},
                                 "actor_rollout_ref": {"actor": {"optim": {"total_training_steps": 20}}}})
    t.parameter_sync_step, t.role_worker_mapping = 1, {}
    t._init_resource_pool_mgr()
    assert t.config.actor_rollout_ref.actor.optim.total_training_steps == 60

# ------------------------------------------------------------------------------ FAST-GRPO's driver hooks on verl
class FakeQueue:
    """verl's TransferQueue as the driver uses it: rows by key, fields read and written by name."""

    def __init__(self, rows: dict[str, dict]):
        self.rows = rows

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {f: [self.rows[k][f] for k in keys] for f in select_fields}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta
        for name in fields.keys():
            for key, value in zip(keys, fields[name].unbind()):
                self.rows.setdefault(key, {})[name] = value
        return KVBatchMeta(keys=list(keys), tags=list(tags or [{} for _ in keys]), partition_id=partition_id)

    def kv_clear(self, keys, partition_id):
        for key in keys:
            del self.rows[key]


def fast_driver(monkeypatch, rl: dict, scores: list[list[float]], lengths: list[list[int]], place: bool = True):
    """A DriverMix on plain GRPO with FAST-GRPO parts, over a fake queue holding P x G scored rows (prompt p has
    3 + p tokens), after place_traces (unless `place` is False)."""
    from transfer_queue import KVBatchMeta
    from workflow.engines.verl.controller import mix_hooks

    class Tok:
        eos_token_id = 0
    rows, keys = {}, []
    for p, (group_scores, group_lengths) in enumerate(zip(scores, lengths)):
        for s, (score, n) in enumerate(zip(group_scores, group_lengths)):
            key = f"uid{p}_{s}_0"
            rm = torch.zeros(n)
            rm[-1] = score
            rows[key] = {"prompts": torch.arange(3 + p), "responses": torch.ones(n, dtype=torch.int64),
                         "response_mask": torch.ones(n, dtype=torch.int64), "rm_scores": rm,
                         "extra_info": {"index": p}, "data_source": "x", "reward_model": {"ground_truth": "1"}}
            keys.append(key)
    queue = FakeQueue(rows)
    monkeypatch.setattr(mix_hooks, "tq", queue)
    tags = [{"global_steps": 1, "seq_len": len(rows[k]["prompts"]) + len(rows[k]["responses"])} for k in keys]
    batch = KVBatchMeta(keys=keys, partition_id="train", tags=tags, extra_info={})
    driver = mix_hooks.DriverMix(RLConfig(group_size=len(scores[0]), max_new_tokens=8, **rl), 0, Tok())
    if place:
        driver.place_traces(batch, 1)
    return driver, batch, queue


def test_the_thinking_bonus_goes_into_verls_scores_and_the_reward_column_keeps_the_plain_score(monkeypatch):
    from workflow.methods.thinking_reward import ThinkingRewardConfig
    from workflow.methods.thinking_reward.algorithm import ThinkingReward
    scores, lengths = [[1.0, 1.0], [0.0, 0.0]], [[2, 6], [4, 8]]  # an easy prompt solved, a hard one failed
    driver, batch, queue = fast_driver(monkeypatch, {"thinking_reward": {"enabled": True}}, scores, lengths)
    driver.shape_rewards(batch)
    bonus, columns = ThinkingReward(ThinkingRewardConfig(enabled=True)).bonus(
        np.array(scores), np.array(lengths, float), 8, ["", ""], [3, 4])
    got = [[float(queue.rows[f"uid{p}_{s}_0"]["rm_scores"][-1]) for s in range(2)] for p in range(2)]
    assert np.allclose(got, np.array(scores) + bonus) and bonus[0, 0] > bonus[0, 1] > 0
    assert bonus[1, 1] > bonus[1, 0] > 0  # failed on a hard prompt: the longer, the larger (exploration)
    assert driver.fast_columns == pytest.approx(columns)
    assert [driver.score_of[k] for k in batch.keys] == [1.0, 1.0, 0.0, 0.0]  # what `reward` reports


def test_dynamic_kl_gives_each_row_its_groups_coefficient(monkeypatch):
    scores = [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]
    driver, batch, _ = fast_driver(monkeypatch, {"dynamic_kl": {"enabled": True}}, scores, [[3, 3]] * 3)
    driver.shape_rewards(batch)
    batch.keys = batch.keys[::-1]  # verl's _balance_batch reorders the rows
    groups = driver._align(batch.keys)
    rows = StepRows(groups=groups, reward=np.array([driver.score_of[k] for k in batch.keys]),
                    mask=torch.ones(6, 3), off=torch.zeros(6, 3, dtype=torch.bool), entropy=torch.ones(6, 3),
                    advantage=np.zeros(6), slots=driver.slots)
    beta = driver._kl_coef(rows)
    by_key = dict(zip(batch.keys, beta))
    assert [by_key[f"uid{p}_{s}_0"] for p in range(3) for s in range(2)] == pytest.approx(
        [0.001, 0.001, 0.0055, 0.0055, 0.01, 0.01])  # accuracy 0, 0.5, 1: beta_min, the middle, beta_max
    assert driver.fast_columns["kl_coef_mean"] == pytest.approx(0.0055)


def test_the_driver_finds_its_slots_and_demonstrations_by_key_after_verl_reorders_the_batch(monkeypatch):
    from workflow.algos.mix import Slot
    driver, batch, _ = fast_driver(monkeypatch, {}, [[0.0, 1.0], [1.0, 0.0]], [[3, 3], [3, 3]])
    driver.slot_of = {k: Slot(prefix=i) for i, k in enumerate(batch.keys)}  # as place_traces leaves them
    driver.off_of = {k: i for i, k in enumerate(batch.keys)}
    driver.demo_of = {"uid0": [5], "uid1": [6]}
    order = [3, 0, 2, 1]
    keys = [batch.keys[i] for i in order]
    groups = driver._align(keys)
    assert [s.prefix for s in driver.slots] == order and driver.off_len == order
    assert groups == [[2, 0], [1, 3]] and driver.demos == [[6], [5]]  # uid1 first now, its sessions in order
    with pytest.raises(RuntimeError, match="did not plan"):
        driver._align(keys + ["padabc_0_0"])


# ------------------------------------------------------------------------------ Slow2Fast inside verl's step
def group_scores(accuracies: list[float], group_size: int = 4) -> list[list[float]]:
    """Per group, `accuracy x group_size` correct responses (score 1) first, the rest wrong (0)."""
    return [[1.0 if s < round(a * group_size) else 0.0 for s in range(group_size)] for a in accuracies]


def test_slow2fast_drops_the_groups_outside_the_phases_band_from_verls_batch(monkeypatch):
    from workflow.engines.verl.contract import EVICTED_GROUPS, EVICTED_TOKENS
    accuracies = [0.0, 0.25, 0.75, 1.0]  # slow [0.3, 0.99] keeps only 0.75, fast [0.01, 0.7] only 0.25
    rl = {"steps": 2, "slow2fast": {"enabled": True}}
    for step, kept in [(1, 2), (2, 1)]:  # verl's step 1 is progress 0 (slow), step 2 progress 0.5 (fast)
        driver, batch, queue = fast_driver(monkeypatch, rl, group_scores(accuracies), [[5] * 4] * 4, place=False)
        sampled = {EVICTED_GROUPS: 1, EVICTED_TOKENS: 30}  # what verl's sampler dropped and refilled before
        out = driver.keep_groups(batch, step, sampled)
        assert out.keys == [f"uid{kept}_{s}_0" for s in range(4)] and sorted(queue.rows) == out.keys
        dropped_tokens = sum((3 + p + 5) * 4 for p in range(4) if p != kept)  # prompt 3 + p, response 5 tokens
        assert driver.sampling_columns == {"kept_groups": 1, "dropped_groups": 1 + 3, "extra_rollouts": 1 * 4,
                                           "rollouts": (4 + 1) * 4, "dropped_tokens": 30 + dropped_tokens}
        assert not driver.trains_nothing


def test_a_step_slow2fast_leaves_without_a_group_keeps_verls_batch_and_takes_no_update(monkeypatch):
    driver, batch, queue = fast_driver(monkeypatch, {"steps": 2, "slow2fast": {"enabled": True}},
                                       group_scores([0.0, 0.0]), [[5] * 4] * 2, place=False)
    out = driver.keep_groups(batch, 1, {})
    assert out.keys == batch.keys and len(queue.rows) == 8 and driver.trains_nothing
    assert driver.sampling_columns["kept_groups"] == 0 and driver.sampling_columns["dropped_groups"] == 2
    assert driver.sampling_columns["untrained_tokens"] == sum(t["seq_len"] for t in batch.tags)
    off, _, _ = fast_driver(monkeypatch, {"steps": 2}, group_scores([0.0]), [[5] * 4], place=False)
    assert off.keep_groups(batch, 1, {}) is batch and off.sampling_columns == {}  # Slow2Fast off: untouched


def test_rows_verl_pads_the_shrunk_batch_with_weigh_nothing_and_the_kept_rows_are_one_token_mean(monkeypatch):
    from transfer_queue import KVBatchMeta
    from workflow.engines.verl.workers.mix_loss import W_KL, W_RL
    driver, batch, queue = fast_driver(monkeypatch, {"steps": 2, "slow2fast": {"enabled": True}},
                                       group_scores([0.0, 0.75]), [[5, 6, 7, 8], [4] * 4], place=False)
    batch = driver.keep_groups(batch, 1, {})  # keeps uid1 (0.75)
    driver.place_traces(batch, 1)
    driver.shape_rewards(batch)
    for key in batch.keys:  # what verl's old-log-prob and advantage steps add
        n = len(queue.rows[key]["responses"])
        queue.rows[key].update(entropy=torch.ones(n), advantages=torch.full((n,), 0.5), old_log_probs=torch.zeros(n))
    pads = [f"pad9_{i}_0" for i in range(4)]  # verl's upsample_batch_to_divisible_size: 1-token rows, no weight
    for key in pads:
        queue.rows[key] = {"prompts": torch.arange(2), "response_mask": torch.zeros(1, dtype=torch.int64),
                           "entropy": torch.zeros(1), "advantages": torch.zeros(1), "old_log_probs": torch.zeros(1)}
    keys = [pads[0], *batch.keys[:2], *pads[1:], *batch.keys[2:]]  # verl's balancing interleaves them
    tags = {**dict(zip(batch.keys, batch.tags)), **{k: {"is_padding": True, "seq_len": 3} for k in pads}}
    padded_batch = KVBatchMeta(keys=keys, tags=[tags[k] for k in keys], partition_id="train", extra_info={})
    metrics = {}
    planned = driver.plan(padded_batch, metrics)
    assert planned.keys == keys and planned.tags == padded_batch.tags
    assert all(float(queue.rows[k][W_RL].abs().sum()) == 0 and float(queue.rows[k][W_KL].abs().sum()) == 0
               for k in pads)
    assert sum(float(queue.rows[k][W_RL].sum()) for k in batch.keys) == pytest.approx(1.0)  # 16 tokens, 1/16 each
    assert metrics["rlsweep/mix/padding_tokens"] == 12 and metrics["rlsweep/mix/kept_groups"] == 1
    assert metrics["rlsweep/mix/reward"] == 0.75  # the kept group's rows only


def test_a_slow2fast_steps_row_counts_every_token_generated_and_trains_only_the_kept(monkeypatch):
    from workflow.algos.flops import rl_step_flops
    from workflow.engines.verl.controller.metrics import train_steps_row
    step = {"perf/total_num_tokens": 100, "rlsweep/mix/padding_tokens": 12, "rlsweep/mix/dropped_tokens": 50,
            "rlsweep/mix/kept_groups": 1, "rlsweep/mix/dropped_groups": 3, "rlsweep/mix/extra_rollouts": 4,
            "rlsweep/mix/rollouts": 20}
    row = train_steps_row(step, step=1, rollouts=8, n_params=1000, ref_model=True)
    assert row["tokens"] == 88 + 50 and row["rollouts"] == 20  # every sequence sampled, verl's padding left out
    assert (row["kept_groups"], row["dropped_groups"], row["extra_rollouts"]) == (1, 3, 4)
    assert row["flops"] == rl_step_flops(1000, 138, 1, trained_tokens=88, ref_model=True)
    idle = {**step, "rlsweep/mix/padding_tokens": 0, "rlsweep/mix/untrained_tokens": 100,
            "actor/rlsweep/backward_passes": 0, "actor/rlsweep/optimizer_steps": 0}
    row = train_steps_row(idle, step=1, rollouts=8, n_params=1000, ref_model=True)
    assert row["backward_passes"] == row["optimizer_steps"] == 0 and row["tokens"] == 150
    assert row["flops"] == rl_step_flops(1000, 150, 0, trained_tokens=0)  # generation only


class RolloutWorld:
    """TransferQueue as verl's replay buffer sees it in a sync step: every prompt submitted finishes at once with G
    scored sessions, the next accuracy of `accuracies` (refills included)."""

    def __init__(self, accuracies: list[float], group_size: int = 4):
        self.accuracies, self.group_size = list(accuracies), group_size
        self.tags: dict[str, dict] = {}
        self.rows: dict[str, dict] = {}
        self.submitted: list[str] = []

    def submit(self, n: int) -> int:
        for _ in range(n):
            uid = f"u{len(self.submitted)}"
            accuracy = self.accuracies[len(self.submitted)]
            self.submitted.append(uid)
            self.tags[uid] = {"is_prompt": True, "status": "finished", "global_steps": 1}
            for s, score in enumerate(group_scores([accuracy], self.group_size)[0]):
                self.tags[f"{uid}_{s}_0"] = {"seq_len": 10, "global_steps": 1}
                self.rows[f"{uid}_{s}_0"] = {"rm_scores": torch.tensor([0.0, score])}
        return n

    def kv_list(self):
        return {"train": dict(self.tags)}

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.tags.pop(key, None)
            self.rows.pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {f: [self.rows[k][f] for k in keys] for f in select_fields}


@pytest.mark.parametrize("accuracies, trained, evicted", [
    ([0.0, 0.75, 0.25, 0.5], ["u1", "u3"], 2),  # 0.0 and its refill 0.25 evicted, the second refill kept
    ([0.0, 0.75, 0.25, 0.0], ["u1", "u3"], 2),  # the budget (max_rounds 1 x 2 prompts) spent: u3 stays
    ([0.5, 0.75], ["u0", "u1"], 0),
])
def test_verls_sampler_refills_each_group_slow2fast_drops_with_one_prompt_within_its_budget(
        monkeypatch, accuracies, trained, evicted):
    from verl.trainer.ppo.v1 import replay_buffer
    from workflow.methods.slow2fast import verl as slow2fast
    world = RolloutWorld(accuracies)
    monkeypatch.setattr(replay_buffer, "tq", world)
    monkeypatch.setattr(slow2fast, "tq", world)
    rl = {"steps": 4, "prompts_per_step": 2, "group_size": 4, "slow2fast": {"enabled": True, "max_rounds": 1}}
    sampler = slow2fast.Slow2FastSampler(trainer_mode="rlsweep", trainer_config={"rl": rl},
                                         max_off_policy_threshold=None, max_off_policy_strategy="drop",
                                         sampler_kwargs={}, refill_fn=world.submit, poll_interval=0.0)
    world.submit(2)  # verl's step submits its batch's prompts first
    batch, metrics = sampler.sample(global_steps=1, partition_id="train", batch_size=2)
    assert sorted({k.split("_")[0] for k in batch.keys}) == trained and len(batch.keys) == 2 * 4
    assert world.submitted == [f"u{i}" for i in range(2 + evicted)]  # one fresh prompt per evicted group
    assert metrics[slow2fast.EVICTED_GROUPS] == evicted and metrics[slow2fast.EVICTED_TOKENS] == evicted * 4 * 10
