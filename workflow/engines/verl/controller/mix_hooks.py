"""A mixed-policy method (rl.mix) in verl 0.9's driver: the hooks RlsweepTrainer (trainer.py) calls around verl's
own step, reading and rewriting the step's rows in verl's TransferQueue (mix_batch.py decides their content, the
workers' loss is mix_loss.py). verl's PPOTrainer._step_once order, and where each hook sits:

    replay_buffer.sample (rollouts generated AND scored by verl's agent loop; Prefix-RFT's prefixed rollouts by
                          our agent loop, workflow/methods/prefix_rft/verl.py)
    _balance_batch        <- keep_groups: FAST-GRPO's Slow2Fast, the groups outside the phase's accuracy band
                             leave the batch (those verl's sampling did not already drop and refill: workflow/methods/slow2fast/verl.py);
                             place_traces: expert-trace slots replace their session's rollout (scored here);
                             shape_rewards: the rows' own scores kept, FAST-GRPO's thinking bonus added to them
                             (verl then reorders the rows: what the hooks decided is kept by TransferQueue key)
    _compute_old_log_prob    (old log-probs and token entropies of every row, traces included)
    _compute_advantage    <- plan: verl's GRPO over the mixed groups, then the method's loss plan, demonstration
                             rows for the SFT term, per-token weights (and KL coefficients: FAST-GRPO's dynamic
                             KL) -> TransferQueue fields
    _update_actor         <- the batch's MIX_KEY entry: the workers take mix_loss.mixed_loss for it
    (after the update)    <- interleaved_batch: the method's after_step; if it asks for an SFT step (ReLIFT), a
                             batch of demonstration rows of its own, trained by a second update of the actor (the
                             workers scale its lr by the method's lr_scale and leave verl's lr schedule alone)

The method object lives here, on the driver, built from the run's RLConfig (registry.build_mix), as on the local
engine; the workers only see tensors. FAST-GRPO's parts use the same driver on plain GRPO (rl.mix none). Its
state (ReLIFT's buffer) goes into verl's checkpoint (RlsweepTrainer).
"""

from __future__ import annotations

from typing import Any

import uuid

import numpy as np
import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.utils import tensordict_utils as tu

from workflow.algos import part
from workflow.config import RLConfig
from workflow.methods.registry import build_mix, build_parts
from workflow.algos.mix_batch import (StepRows, by_group, demo_positions, demonstration_row, group_positions,
                                             loss_plan, padded, prefix_len, prompt_slots, prompt_uid, rollout_metrics,
                                             sequence_fields, sft_weights, token_fields, trace_response, user_text)
from workflow.engines.verl.contract import (EVICTED_GROUPS, EVICTED_TOKENS, FIELDS, KL_COEF, LR_SCALE, MIX_KEY, SHAPED,
                                            UPDATE_KEY, W_KL, W_RL, W_SFT, phase_progress, reward_fn)

METRIC = "rlsweep/mix/"  # the driver's mix columns in verl's step metrics (metrics.py reads them)


def nested(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def unbind(value) -> list[torch.Tensor]:
    return list(value.unbind()) if isinstance(value, torch.Tensor) else list(value)


class DriverMix:
    def __init__(self, rl: RLConfig, seed: int, tokenizer, extra_fields: tuple[str, ...] = ()):
        """`rl`: the run's RLConfig (contract.run_rl); `extra_fields`: per-token fields verl keeps for this run
        besides ours (ref_log_prob with a reference model, rollout_log_probs when the rollout returns log-probs); a
        replaced row needs them at its length."""
        self.rl = rl
        self.extra_fields = list(extra_fields)
        self.mix = build_mix(self.rl)
        self.seed, self.tokenizer = seed, tokenizer
        self.slots: list = []
        self.off_len: list[int] = []
        self.demos: list[list[int]] = []
        self.discarded_tokens = 0
        self.step_items: list[list[list[int]]] = []  # per prompt of the step: [prompt ids, demonstration ids]
        self.step_rewards = np.zeros((0, 0))  # [P, G] what the policy's sequences scored
        # what place_traces decided, by TransferQueue key (rows) and uid (prompts): verl's _balance_batch then
        # reorders the batch, so plan() finds them by key, not by position
        self.slot_of: dict[str, Any] = {}
        self.off_of: dict[str, int] = {}
        self.demo_of: dict[str, list[int]] = {}
        self.score_of: dict[str, float] = {}  # the policy's own score of each row, before any FAST-GRPO bonus
        self.fast_columns: dict[str, float] = {}
        self.sampling_columns: dict[str, float] = {}  # Slow2Fast's of the step (keep_groups)
        self.trains_nothing = False  # Slow2Fast kept no group: the step takes no update
        self.parts = build_parts(self.rl)  # the parts switched on (FAST-GRPO's), applied on the driver

    def _demo_tokens(self, info: dict) -> list[int]:
        demo = (info or {}).get("demo")
        if not demo:
            raise ValueError(f"rl.mix {self.mix.name}: a training row has no demonstration (extra_info.demo)")
        return self.tokenizer.encode(demo, add_special_tokens=False)

    def keep_groups(self, batch, step: int, metrics: dict):
        """FAST-GRPO's Slow2Fast on the step's groups (their rows' own scores, before any bonus): the groups whose
        accuracy lies outside the band of the phase at `step` leave the batch (their rows are cleared from the
        TransferQueue; verl's sampler already dropped and refilled what its budget allowed, reported in `metrics`).
        With no group left the batch stays whole (verl needs rows to go on) and the step takes no update
        (`trains_nothing`; the local engine's empty step). Returns the batch verl goes on with; the step's columns
        kept_groups, dropped_groups, extra_rollouts and rollouts (every sequence sampled) go into plan's metrics."""
        self.trains_nothing, self.sampling_columns = False, {}
        if not part.filtering(self.parts):
            return batch
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["rm_scores"])
        groups = group_positions(batch.keys)
        scores = by_group(np.asarray([float(s.sum()) for s in unbind(data["rm_scores"])]), groups)
        keep = part.keep(self.parts, scores, phase_progress(step, self.rl.steps))
        evicted, n = int(metrics.get(EVICTED_GROUPS, 0)), self.rl.group_size
        dropped = [pos for g, kept in zip(groups, keep) if not kept for pos in g]
        seq_len = [int(tag["seq_len"]) for tag in batch.tags]
        self.sampling_columns = {"kept_groups": int(keep.sum()), "dropped_groups": evicted + int((~keep).sum()),
                                 "extra_rollouts": evicted * n, "rollouts": (len(groups) + evicted) * n,
                                 # generated, then left out of verl's batch (added to its token count)
                                 "dropped_tokens": int(metrics.get(EVICTED_TOKENS, 0))}
        if not keep.any():
            self.trains_nothing = True
            self.sampling_columns["untrained_tokens"] = sum(seq_len)  # in verl's batch, trained on by no update
            return batch
        if dropped:
            self.sampling_columns["dropped_tokens"] += sum(seq_len[pos] for pos in dropped)
            tq.kv_clear(keys=[batch.keys[pos] for pos in dropped], partition_id=batch.partition_id)
            left = sorted(set(range(len(batch.keys))) - set(dropped))
            batch = batch.select_keys([batch.keys[pos] for pos in left])
        return batch

    def place_traces(self, batch, step: int) -> None:
        """The method's slots for this step; every expert-trace slot's rollout replaced by the trace."""
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["prompts", "responses", "extra_info", "data_source", "reward_model"])
        groups = group_positions(batch.keys)
        infos = list(data["extra_info"])
        on_policy = self.mix.name == "none"  # (FAST-GRPO's parts run on plain GRPO: no demonstrations)
        self.demos = [[] if on_policy else self._demo_tokens(infos[g[0]]) for g in groups]
        self.slots = [None] * len(batch.keys)
        for g, demo in zip(groups, self.demos):
            # the step the rows were sampled at (verl's tag), as the agent loop saw it
            sampled_at = int(batch.tags[g[0]].get("global_steps", step))
            row = prompt_slots(self.mix, len(g), self.rl.steps, len(demo), self.seed, sampled_at,
                               int(infos[g[0]]["index"]))
            for pos, slot in zip(g, row):
                self.slots[pos] = slot
        self.off_len = [0] * len(batch.keys)
        prompts, responses = unbind(data["prompts"]), unbind(data["responses"])
        self._check_prefixes(groups, responses)
        sources, golds = list(data["data_source"]), list(data["reward_model"])
        self.discarded_tokens = 0
        keys, fields, tags = [], [], []
        compute_score = reward_fn()  # verl's reward (rollout/reward.py): a trace scores as a rollout would
        for p, g in enumerate(groups):
            for pos in g:
                if self.slots[pos].generate:
                    continue
                response, self.off_len[pos] = trace_response(self.demos[p][: self.slots[pos].prefix],
                                                             self.tokenizer.eos_token_id, self.rl.max_new_tokens)
                text = self.tokenizer.decode(response, skip_special_tokens=True)
                score = compute_score(sources[pos], text, golds[pos]["ground_truth"], infos[pos])
                self.discarded_tokens += len(prompts[pos]) + len(responses[pos])
                keys.append(batch.keys[pos])
                row = self._row(prompts[pos], response, score)
                if "rollout_log_probs" in self.extra_fields:  # the trace was not sampled: no rollout log-probs
                    row["rollout_log_probs"] = torch.zeros(len(response), dtype=torch.float32, device="cpu")
                fields.append(row)
                tags.append(self._retag(batch, pos, len(prompts[pos]), len(response)))
        self._put(batch, keys, fields, tags)
        self.slot_of = dict(zip(batch.keys, self.slots))
        self.off_of = dict(zip(batch.keys, self.off_len))
        self.demo_of = {prompt_uid(batch.keys[g[0]]): demo for g, demo in zip(groups, self.demos)}

    def _align(self, keys: list[str]) -> list[list[int]]:
        """place_traces' slots, off-policy lengths and demonstrations in the order of `keys` (verl's balanced
        order); returns the groups of positions."""
        unknown = [k for k in keys if k not in self.slot_of]
        if unknown:  # (verl's padding rows are left out by the caller)
            raise RuntimeError(f"rl.mix: verl's step batch has rows the driver did not plan: {unknown[:3]}")
        groups = group_positions(keys)
        self.slots = [self.slot_of[k] for k in keys]
        self.off_len = [self.off_of[k] for k in keys]
        self.demos = [self.demo_of[prompt_uid(keys[g[0]])] for g in groups]
        return groups

    def shape_rewards(self, batch) -> None:
        """After place_traces, before verl's advantages (which read rm_scores): each row's own score kept (the
        reward column and dynamic_kl's group accuracy read it), and with FAST-GRPO's thinking reward each
        response's bonus (workflow/algos/fast_grpo.py) added to its score, so that verl's GRPO sees reward + bonus
        as the local engine's does."""
        with_text = part.reads_prompt_text(self.parts)
        fields = ["rm_scores"] + (["prompts", "response_mask"] if part.shaping(self.parts) else []) + \
            (["raw_prompt"] if with_text else [])
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        scores = [s.float() for s in unbind(data["rm_scores"])]
        self.fast_columns = {}
        self.score_of = {k: float(s.sum()) for k, s in zip(batch.keys, scores)}
        if not part.shaping(self.parts):
            return
        groups = group_positions(batch.keys)
        rewards = by_group(np.asarray([self.score_of[k] for k in batch.keys]), groups)
        lengths = by_group(np.asarray([float(m.sum()) for m in unbind(data["response_mask"])]), groups)
        prompts = unbind(data["prompts"])
        texts = [user_text(data["raw_prompt"][g[0]]) for g in groups] if with_text else [""] * len(groups)
        bonus, self.fast_columns = part.bonus(self.parts, rewards, lengths, self.rl.max_new_tokens, texts,
                                              [len(prompts[g[0]]) for g in groups])
        for p, g in enumerate(groups):
            for j, pos in enumerate(g):
                scores[pos][-1] += float(bonus[p, j])
        self._put(batch, list(batch.keys), [{"rm_scores": s} for s in scores])

    def _check_prefixes(self, groups, responses) -> None:
        """Prefixed rollouts (Prefix-RFT): the agent loop (workflow/methods/prefix_rft/verl.py) put the
        demonstration's first tokens in front of the continuation; their number becomes the row's off-policy length.
        A response that does not start with them means the agent loop did not run (a raw override of
        rollout.agent.default_agent_loop?)."""
        for p, g in enumerate(groups):
            for pos in g:
                slot = self.slots[pos]
                if not (slot.generate and slot.prefix):
                    continue
                k = prefix_len(slot, self.rl.max_new_tokens)
                if responses[pos][:k].tolist() != self.demos[p][:k]:
                    raise RuntimeError(f"rl.mix prefix_rft: rollout {pos} should start with the first {k} tokens of "
                                       "its demonstration, but verl's agent loop did not put them there (is "
                                       "actor_rollout_ref.rollout.agent.default_agent_loop still the one "
                                       "Prefix-RFT's verl adapter sets?)")
                self.off_len[pos] = k

    @staticmethod
    def _row(prompt: torch.Tensor, response: list[int], score: float) -> dict[str, torch.Tensor]:
        row = sequence_fields(prompt, response)
        row["rm_scores"] = torch.zeros(len(response), dtype=torch.float32, device="cpu")
        row["rm_scores"][-1] = score
        return row

    @staticmethod
    def _retag(batch, pos: int, prompt_len: int, response_len: int) -> dict:
        tag = dict(batch.tags[pos])
        tag.update(prompt_len=prompt_len, response_len=response_len, seq_len=prompt_len + response_len)
        batch.tags[pos] = tag  # verl's balancing reads the lengths from these tags
        return tag

    @staticmethod
    def _put(batch, keys: list[str], rows: list[dict], tags: list[dict] | None = None) -> None:
        if not keys:
            return
        fields = {k: nested([r[k] for r in rows]) for k in rows[0]}
        tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=tu.get_tensordict(fields), tags=tags)

    def _rows(self, groups, reward, masks, off, entropy, advantage) -> StepRows:
        return StepRows(groups=groups, reward=reward, mask=padded(masks), off=padded(off, torch.bool),
                        entropy=padded(entropy), advantage=advantage, slots=self.slots)

    def plan(self, batch, metrics: dict):
        """After verl's advantages: the method's plan, the demonstration rows, the per-token fields. Returns the
        batch's new TransferQueue handle (its field list names ours: the workers read only the fields it lists).
        Rows verl padded the batch with (its mini-batch size, e.g. after Slow2Fast dropped groups) get zero
        weights."""
        names = ["prompts", "response_mask", "entropy", "advantages", "old_log_probs"]
        extra = self.extra_fields
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=names + extra)
        real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        keys = [batch.keys[i] for i in real]

        def field(name: str) -> list:
            values = unbind(data[name])
            return [values[i] for i in real]

        groups = self._align(keys)
        masks = [m.float() for m in field("response_mask")]
        # the rows' own scores, as shape_rewards kept them (without a thinking bonus: that one is in the advantages)
        reward = np.asarray([self.score_of[k] for k in keys])
        advantage = np.asarray([float(a[0]) if len(a) else 0.0 for a in field("advantages")])
        entropy = field("entropy")
        off = [torch.arange(len(m), device="cpu") < n for m, n in zip(masks, self.off_len)]
        rows = self._rows(groups, reward, masks, off, entropy, advantage)
        out = rollout_metrics(rows)
        plan, _ = loss_plan(self.mix, rows)
        demos = demo_positions(plan, rows)
        prompts = field("prompts")
        self.step_items = [[prompts[g[0]].tolist(), list(self.demos[p])] for p, g in enumerate(groups)]
        self.step_rewards = rows.by_group(reward)
        demo_keys, fields = [], []
        for p, pos in demos.items():
            if not self.slots[pos].generate:
                continue  # the expert trace carries the demonstration already
            response, _ = trace_response(self.demos[p], self.tokenizer.eos_token_id, self.rl.max_new_tokens)
            row = self._row(prompts[pos], response, 0.0)  # an SFT-only row: no RL term, so no reward
            for k in ["entropy", "advantages", "old_log_probs", *extra]:
                row[k] = torch.zeros(len(response), dtype=torch.float32, device="cpu")
            demo_keys.append(keys[pos])
            fields.append(row)
            self._retag(batch, real[pos], len(prompts[pos]), len(response))
            masks[pos], entropy[pos] = row["response_mask"].float(), row["entropy"]
            off[pos] = torch.zeros(len(response), dtype=torch.bool, device="cpu")
        self._put(batch, demo_keys, fields, [batch.tags[batch.keys.index(k)] for k in demo_keys])
        rows = self._rows(groups, reward, masks, off, entropy, advantage)
        tokens = token_fields(self.mix, plan, rows, demos, self.rl.loss_agg, self.rl.max_new_tokens,
                              self._kl_coef(rows))
        per_token = {W_RL: tokens.w_rl, W_KL: tokens.w_kl, W_SFT: tokens.w_sft, SHAPED: tokens.shaped,
                     KL_COEF: tokens.kl_coef, "advantages": tokens.advantages}
        # every row of the batch in verl's order: a planned row's fields at its length, a padding row's zeros
        at = {i: j for j, i in enumerate(real)}
        lengths = [len(masks[at[i]]) if i in at else len(m) for i, m in enumerate(unbind(data["response_mask"]))]
        fields = {k: nested([v[at[i], :n] if i in at else torch.zeros(n, dtype=v.dtype, device=v.device)
                             for i, n in enumerate(lengths)]) for k, v in per_token.items()}
        planned = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=tu.get_tensordict(fields))
        planned.tags = batch.tags
        planned.extra_info = {**(batch.extra_info or {}), MIX_KEY: self._mix_entry()}
        out.update(tokens.metrics)
        out.update(self.fast_columns)
        out.update(self.sampling_columns)
        out["discarded_tokens"] = self.discarded_tokens
        out["padding_tokens"] = sum(int(tag["seq_len"]) for tag in batch.tags if tag.get("is_padding", False))
        metrics.update({METRIC + k: v for k, v in out.items() if v is not None})
        return planned

    def _kl_coef(self, rows: StepRows) -> float | np.ndarray:
        """The KL penalty's coefficient: rl.kl_coef, or per row its group's from the part that sets it (FAST-GRPO's
        dynamic_kl: from the group's accuracy on the rows' own scores)."""
        beta = part.kl_coef(self.parts, rows.by_group(rows.reward))
        if beta is None:
            return self.rl.kl_coef
        self.fast_columns["kl_coef_mean"] = float(beta.mean())
        out = np.zeros(len(rows.reward))
        for p, g in enumerate(rows.groups):
            out[g] = beta[p]
        return out

    def _mix_entry(self, **extra) -> dict:
        return {"lam": float(self.mix.lam), "fields": list(FIELDS), **extra}

    def interleaved_batch(self, batch, metrics: dict, ranks: int, micro_batch_size: int | None) -> KVBatchMeta | None:
        """After the step's RL update: the method's after_step on what the step's prompts scored; when it asks for
        an SFT step (ReLIFT's buffer is due), that step's batch: one demonstration row per item (prompt + its
        demonstration + eos, cut at max_new_tokens like the RL step's), as new TransferQueue keys the caller clears
        after training. verl splits a batch into equal shares per rank and, without dynamic batching, each share
        into micro-batches of `micro_batch_size` rows: the rows are padded with zero-weight copies to fill them
        (micro-batches no larger than a rank's share). None when no SFT step is due. Writes the method's state
        columns (buffer_size) into `metrics`."""
        due = self.mix.after_step(self.step_items, self.step_rewards)
        metrics.update({METRIC + k: v for k, v in self.mix.step_metrics().items()})
        if not due:
            return None
        fields = list(batch.fields or [])
        template = tq.kv_batch_get(keys=batch.keys[:1], partition_id=batch.partition_id, select_fields=fields)[0]
        template = {name: template[name] for name in fields}
        rows = []
        for prompt, demo in due:
            response, _ = trace_response(demo, self.tokenizer.eos_token_id, self.rl.max_new_tokens)
            rows.append(demonstration_row(template, torch.tensor(prompt, dtype=torch.int64, device="cpu"), response))
        trained = len(rows)
        micro = min(micro_batch_size, -(-trained // ranks)) if micro_batch_size else 1
        rows += [dict(rows[0]) for _ in range(-trained % (ranks * micro))]
        weights = sft_weights([r["response_mask"] for r in rows], trained)
        for row, w in zip(rows, weights):
            row.update({W_SFT: w, **{k: torch.zeros_like(w) for k in (W_RL, W_KL, SHAPED, KL_COEF)}})
        tag = dict(batch.tags[0])
        tags = []
        for row in rows:
            n_prompt, n_response = len(row["prompts"]), len(row["responses"])
            tags.append({**tag, "prompt_len": n_prompt, "response_len": n_response, "seq_len": n_prompt + n_response})
        uid = f"rlsweep-sft{uuid.uuid4().hex}"
        keys = [f"{uid}_{i}_0" for i in range(len(rows))]
        sft = tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, tags=tags,
                              fields=tu.list_of_dict_to_tensordict(rows))
        info = {k: v for k, v in (batch.extra_info or {}).items() if k != UPDATE_KEY}  # verl's own step, one pass
        if micro_batch_size:
            info["micro_batch_size_per_gpu"] = micro
        info.update(global_batch_size=len(rows), mini_batch_size=len(rows), epochs=1,
                    **{MIX_KEY: self._mix_entry(**{LR_SCALE: float(self.mix.lr_scale)})})
        sft.extra_info = info
        self.interleaved = {"interleaved_sft_rows": trained,
                            "interleaved_sft_tokens": sum(len(r["input_ids"]) for r in rows[:trained])}
        return sft

    def interleaved_done(self, actor_metrics: dict, metrics: dict) -> None:
        """The SFT step's columns from its update's (reduced) worker metrics."""
        out = dict(self.interleaved, interleaved_sft_loss=actor_metrics.get("actor/rlsweep/sft_loss"))
        metrics.update({METRIC + k: v for k, v in out.items() if v is not None})
