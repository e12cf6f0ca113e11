"""FAST-GRPO's Slow2Fast sampling inside verl 0.9's step: which groups a phase keeps is the part's `keep`
(workflow/methods/slow2fast/algorithm.py, the local engine's rule; any filtering part's, workflow/algos/part.py);
this is where verl drops and refills them.

Two places, in the order verl's step reaches them:

    replay_buffer.sample  <- Slow2FastSampler (rl.slow2fast.refill resample): verl's replay buffer evicts a finished
                             group outside the phase's accuracy band and verl's own refill replaces it with ONE fresh
                             prompt (the exact refill its DAPO filter uses), at most max_rounds x prompts_per_step
                             prompts a step; the step's batch is then full of kept groups, or the budget is spent
    _balance_batch        <- mix_hooks.DriverMix.keep_groups (both refills): the groups still outside the band leave
                             the batch (train on fewer; verl pads the batch back to its mini-batch size with rows of
                             no weight); a step left without a group takes no update

The local engine refills in whole rounds of prompts_per_step prompts; verl refills one prompt per dropped group.
The sampler reports what it dropped through the step's metrics (contract.EVICTED_*), which the driver reads. This is
Slow2Fast's verl half, beside its card; it meets the engine only through workflow/engines/verl/contract.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

from workflow.algos import part
from workflow.algos.mix_batch import prompt_uid
from workflow.engines.verl.contract import EVICTED_GROUPS, EVICTED_TOKENS, phase_progress, run_rl
from workflow.methods.registry import build_parts


class Slow2FastSampler(ReplayBufferAsync):
    """verl's replay buffer (trainer_mode rlsweep is not "sync", so ReplayBufferAsync) with Slow2Fast as its group
    filter. verl builds it from `trainer.v1.sampler.custom_sampler` (its verl adapter sets it: verl_adapter.py) and passes the run's
    `trainer.v1.rlsweep` section as `trainer_config` (contract.run_rl reads the run's RL config from it).
    ReplayBufferAsync.sample polls TransferQueue; on each poll it asks _dapo_filtered_keys which finished groups to
    evict, clears them and calls refill_fn with their number."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rl = run_rl(self.trainer_config)
        self.parts = build_parts(self.rl)  # the filtering ones decide (workflow/algos/part.py)
        self.progress = 0.0
        self.budget = 0  # refill prompts left this step
        self.judged: set[str] = set()  # finished groups already judged this step (kept ones stay kept)
        self.evicted_groups = self.evicted_tokens = 0

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        self.progress = phase_progress(global_steps, self.rl.steps)
        self.budget = part.refill_rounds(self.parts) * batch_size
        self.judged.clear()
        self.evicted_groups = self.evicted_tokens = 0
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        metrics.update({EVICTED_GROUPS: self.evicted_groups, EVICTED_TOKENS: self.evicted_tokens})
        return batch, metrics

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """The newly finished groups to evict: outside the phase's band, while the step's refill budget lasts (a
        group outside it after that stays, and DriverMix.keep_groups drops it from the batch). Returns verl's
        (uids, {metric value: count}) pair; the count breakdown (a DAPO diagnostic) stays empty."""
        if partition_id == "val":
            return set(), Counter()
        new = sorted(self.finished_keys[partition_id] - self.judged)
        self.judged.update(new)
        keys = [k for k in self.partitions[partition_id] if prompt_uid(k) in set(new)]
        if not new or not keys:
            return set(), Counter()
        data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])
        by_uid: dict[str, list[float]] = defaultdict(list)
        for key, score in zip(keys, list(data["rm_scores"])):
            by_uid[prompt_uid(key)].append(float(score.sum()))
        evict = set()
        for uid in new:
            if uid not in by_uid or self.budget <= 0:
                continue
            if not part.keep(self.parts, np.asarray([by_uid[uid]]), self.progress)[0]:
                evict.add(uid)
                self.budget -= 1
        self.evicted_groups += len(evict)
        self.evicted_tokens += sum(int(tag.get("seq_len", 0)) for k, tag in self.partitions[partition_id].items()
                                   if prompt_uid(k) in evict)
        return evict, Counter()
