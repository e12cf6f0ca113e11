"""rlsweep in verl 0.9's controller (its single-controller "driver" process, where the PPO trainer runs; verl
imports this module there through VERL_USE_EXTERNAL_MODULES, set by the verl engine): RlsweepTrainer
(`trainer.v1.trainer_mode: rlsweep`) is verl's sync PPO trainer that puts our worker class (contract.WORKER_CLASS,
workflow/engines/verl/workers/actor.py) in its resource pool and, around verl's `_update_actor`, asks DriverGates for
the update's spec and feeds back the metrics; with rl.mix it runs the method's hooks (mix_hooks.DriverMix) around
verl's balance and advantage steps. It writes the run's train_steps rows and saves the method's and the gate's
state with verl's checkpoints. No verl file is forked or edited.
"""

from __future__ import annotations

import json
from pathlib import Path

import ray
import transfer_queue as tq
from omegaconf import open_dict
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1 import register_trainer
from verl.trainer.ppo.utils import need_reference_policy
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.workers.engine_workers import ActorRolloutRefWorker

from workflow.engines.verl.contract import METRIC_PREFIX, UPDATE_KEY, WORKER_CLASS, param_count, run_rl, train_log
from workflow.engines.verl.controller.gates import DriverGates
from workflow.engines.verl.controller.metrics import train_steps_row
from workflow.methods.registry import rule_settings
from workflow.registry import load_object

MIX_STATE = "rlsweep_mix.json"  # in verl's global_step_N folder: the driver's method state at that checkpoint
GATE_STATE = "rlsweep_gate.json"  # beside it: the driver's gate (SFPO/GXPO's window, seen, tripped) at that checkpoint


@register_trainer("rlsweep")
class RlsweepTrainer(PPOTrainerSync):
    # how often the driver asks verl's replay buffer whether a step's rollouts are in: verl's 2 s lost ~1 s a step on
    # average (generation times came out as whole multiples of 2 s), 4% of a real-model CPU step of ~25 s
    REPLAY_POLL_S = 0.2

    def on_init_end(self):
        """verl's public hook after its set-up, which has resumed from the latest checkpoint (global_steps > 0):
        the method's state saved with that checkpoint (ReLIFT's buffer), and a quicker poll of the replay buffer."""
        super().on_init_end()
        buffer = self.replay_buffer
        buffer.poll_interval = min(getattr(buffer, "poll_interval", self.REPLAY_POLL_S), self.REPLAY_POLL_S)
        path = self._step_folder() / MIX_STATE
        if self.global_steps > 0 and path.exists() and self._driver_mix() is not None:
            self._driver_mix().mix.load_state_dict(json.loads(path.read_text()))
        gate = self._step_folder() / GATE_STATE  # (a requeued job or the next segment: the gate goes on, not anew)
        if self.global_steps > 0 and gate.exists():
            self._gates().load_state_dict(json.loads(gate.read_text()))

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        # verl set the optimizer's schedule horizon from trainer.total_training_steps, which a segment job sets to its
        # end step (engine.py): the horizon is the run's, so a chain schedules the learning rate as one job does
        # (here, after verl's dataloader set-up and before the workers are built with the actor's config)
        with open_dict(self.config):
            self.config.actor_rollout_ref.actor.optim.total_training_steps = \
                run_rl(self.config.trainer.v1.rlsweep).steps * self.parameter_sync_step
        ours = ray.remote(load_object(WORKER_CLASS))  # (the workers' side, by the contract's name)
        for role, cls in list(self.role_worker_mapping.items()):
            if getattr(cls, "__ray_actor_class__", None) is ActorRolloutRefWorker:
                self.role_worker_mapping[role] = ours

    def _driver_mix(self):
        """The run's mixed-policy method on the driver (None for rl.mix none), built on first use."""
        if "_rlsweep_mix" not in self.__dict__:
            rl = run_rl(self.config.trainer.v1.rlsweep)
            self._rlsweep_mix = None
            if rl.mix != "none" or rl.fast_grpo_parts:  # FAST-GRPO's parts are driver hooks on plain GRPO
                from workflow.engines.verl.controller.mix_hooks import DriverMix  # the driver only: it reads verl's TQ
                extra = (["ref_log_prob"] if need_reference_policy(self.config) else []) + \
                    (["rollout_log_probs"] if self.config.actor_rollout_ref.rollout.calculate_log_probs else [])
                self._rlsweep_mix = DriverMix(rl, int(self.config.data.seed), self.tokenizer, tuple(extra))
        return self._rlsweep_mix

    def _balance_batch(self, batch, metrics, *args, **kwargs):
        """Before verl balances the rows over ranks: the groups Slow2Fast keeps, the method's expert traces in place
        of their rollouts (so balancing, old log-probs and advantages all see the trained rows), then the scores
        FAST-GRPO shapes."""
        mix = self._driver_mix()
        if mix is not None:
            batch = mix.keep_groups(batch, self.global_steps, metrics)
            mix.place_traces(batch, self.global_steps)
            mix.shape_rewards(batch)
        return super()._balance_batch(batch, metrics, *args, **kwargs)

    def _compute_advantage(self, batch, metrics: dict):
        """verl's GRPO advantages over the (mixed) groups, then the method's loss plan on them."""
        batch = super()._compute_advantage(batch, metrics)
        mix = self._driver_mix()
        return mix.plan(batch, metrics) if mix is not None else batch

    def _update_actor(self, batch, metrics: dict):
        mix = self._driver_mix()
        if mix is not None and mix.trains_nothing:  # Slow2Fast kept no group: no update (the lr is constant)
            metrics.update({f"actor/{METRIC_PREFIX}backward_passes": 0, f"actor/{METRIC_PREFIX}optimizer_steps": 0,
                            "actor/lr": float(self.config.actor_rollout_ref.actor.optim.lr)})
            return batch
        gates = self._gates()
        spec = gates.before_update(entropy=metrics.get("actor/entropy"))
        batch.extra_info[UPDATE_KEY] = spec
        batch = super()._update_actor(batch, metrics)
        gates.after_update(metrics)
        metrics[f"{METRIC_PREFIX}enabled"] = float(spec["enabled"])
        if gates.last_z is not None:
            metrics[f"{METRIC_PREFIX}gate_z"] = gates.last_z
        metrics[f"{METRIC_PREFIX}gate_tripped"] = float(gates.tripped_now)
        if mix is not None:
            self._interleaved_sft(mix, batch, metrics)
        return batch

    def _gates(self) -> DriverGates:
        """The run's update-rule gate on the driver, built on first use."""
        if "_rlsweep_gates" not in self.__dict__:
            self._rlsweep_gates = DriverGates(rule_settings(run_rl(self.config.trainer.v1.rlsweep)))
        return self._rlsweep_gates

    def _interleaved_sft(self, mix, batch, metrics: dict) -> None:
        """The method's SFT step after the RL update when it asks for one (ReLIFT): a second update of the actor on
        a batch of its own (mix_hooks.DriverMix.interleaved_batch), whose rows leave the TransferQueue after it."""
        actor = self.config.actor_rollout_ref.actor
        micro = None if actor.use_dynamic_bsz else int(actor.ppo_micro_batch_size_per_gpu)
        sft = mix.interleaved_batch(batch, metrics, ranks=self.actor_rollout_wg.world_size, micro_batch_size=micro)
        if sft is None:
            return
        try:
            output = self.actor_rollout_wg.update_actor(sft)
        finally:
            tq.kv_clear(keys=sft.keys, partition_id=sft.partition_id)
        mix.interleaved_done(reduce_metrics(rename_dict(output["metrics"], "actor/")), metrics)

    def _log_where(self) -> dict | None:
        return (self.config.trainer.v1.rlsweep or {}).get("log")  # set by the verl engine: where our tables go

    def _save_checkpoint(self):
        """verl saves a step's checkpoint before it computes the step's metrics; our rows must be on disk before
        the checkpoint is (a run killed in between would resume past rows never written), so with a table to write
        the save waits for _compute_metrics, right after the flush (the local engine's order)."""
        if self._log_where() is None:
            return self._save_now()
        self._rlsweep_save_due = True

    def _save_now(self) -> None:
        """verl's checkpoint of the step, and in its folder the driver's method state (ReLIFT's buffer) and gate."""
        super()._save_checkpoint()
        mix = self.__dict__.get("_rlsweep_mix")
        if mix is not None:
            (self._step_folder() / MIX_STATE).write_text(json.dumps(mix.mix.state_dict()))
        gates = self.__dict__.get("_rlsweep_gates")
        if gates is not None:
            (self._step_folder() / GATE_STATE).write_text(json.dumps(gates.state_dict()))

    def _step_folder(self) -> Path:
        return Path(self.config.trainer.default_local_dir).absolute() / f"global_step_{self.global_steps}"

    def _n_params(self) -> int:
        """The actor's parameter count for train_steps.flops, read once from its model directory."""
        if "_rlsweep_n_params" not in self.__dict__:
            self._rlsweep_n_params = param_count(self.config.actor_rollout_ref.model.path)
        return self._rlsweep_n_params

    def fit(self, *args, **kwargs):
        """verl's loop; then the trackers get their bounded time to send what is queued (verl returns from its last
        step without on_train_end). The run is finished when this process trained its last step, not a segment's."""
        try:
            return super().fit(*args, **kwargs)
        finally:
            log = self.__dict__.get("_rlsweep_log")
            if log is not None:
                log.close(finished=self.global_steps > run_rl(self.config.trainer.v1.rlsweep).steps)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        """verl's metrics of the step, then our train_steps row; at a save: flush, then verl's checkpoint."""
        out = super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        log, where = self.__dict__.get("_rlsweep_log"), self._log_where()
        if log is None and where:
            log = self._rlsweep_log = train_log(where, "rl", total=run_rl(self.config.trainer.v1.rlsweep).steps,
                                                until=getattr(self, "total_training_steps", None))  # a segment's end
            # a run verl resumed from its checkpoint at global_steps - 1: rows an earlier attempt flushed after
            # that checkpoint are recomputed now (the local engine does the same, see TrainLog.discard_after)
            log.discard_after(global_steps - 1)
        if log is not None:
            rollouts = self.config.data.train_batch_size * self.config.actor_rollout_ref.rollout.n
            log.record(**train_steps_row(metrics, global_steps, rollouts, self._n_params(),
                                         ref_model=need_reference_policy(self.config)))
            if self.__dict__.pop("_rlsweep_save_due", False):
                log.flush()
                self._save_now()
        return out


class RlsweepTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's v1 task runner, unchanged, defined here: Ray imports a remote class's module in the process that runs
    it, so this module, and trainer_mode rlsweep with it, is imported in the runner's process alone. Listed in
    VERL_USE_EXTERNAL_MODULES it was imported in every verl process (vLLM's, the agent loops', the reward's): ~940
    modules and 73,000 objects each, which every full garbage collection there walked."""


TASK_RUNNER = ray.remote(RlsweepTaskRunner)  # what controller/ppo.py hands run_ppo
