"""Our update rules in verl 0.9's FSDP workers (Ray actors, one per rank). No verl file is forked or edited: the
trainer (workflow/engines/verl/controller/trainer.py) puts RuleActorRolloutRefWorker in its resource pool, by the
name the contract gives (contract.WORKER_CLASS), and Ray imports this module in each worker process.

- RuleTrainingWorker: verl's TrainingWorker whose engine step (`engine.train_batch`, called once per mini-batch by
  TrainingWorker.train_batch, which also steps the LR scheduler once) is replaced by our rule around verl's own
  forward_backward_batch / optimizer (rule_step.rule_train_batch), following the spec the controller put in the
  batch (contract.UPDATE_KEY). Batches without a spec (SFT, critic) take verl's own step. A mixed-policy batch
  (rl.mix) trains with mix_loss.mixed_loss instead of verl's ppo_loss, in either step.
- RuleActorRolloutRefWorker: verl's ActorRolloutRefWorker with `actor_worker_cls = RuleTrainingWorker`.
"""

from __future__ import annotations

from functools import partial

from verl.utils import tensordict_utils as tu
from verl.utils.metric.utils import AggregationType, Metric
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from workflow.algos.schedules import scaled_lr
from workflow.engines.verl.contract import METRIC_PREFIX, UPDATE_KEY
from workflow.engines.verl.workers.mix_loss import LR_SCALE, mixed_loss, planned
from workflow.engines.verl.workers.rule_step import rule_train_batch
from workflow.methods.registry import rule_from_settings


class RuleTrainingWorker(TrainingWorker):
    def reset(self):
        super().reset()  # builds the engine (engine.initialize())
        self._install_rule_step()

    def _install_rule_step(self) -> None:
        engine = self.engine
        if getattr(engine, "_rlsweep_verl_step", None) is not None:
            return
        engine._rlsweep_verl_step = verl_step = engine.train_batch
        self._rlsweep_rules: dict[str, object] = {}

        def train_batch(data, loss_function):
            mix = planned(data)
            if mix is not None:  # a mixed-policy batch: the driver's per-token weights, our loss (mix_loss.py)
                loss_function = partial(mixed_loss, config=loss_function.keywords["config"], lam=mix["lam"])
            # an interleaved SFT step (ReLIFT): verl's step at a scaled lr, and the schedule step that
            # TrainingWorker.train_batch takes after it held back (the schedule counts RL steps)
            self._rlsweep_hold_schedule = mix is not None and LR_SCALE in mix
            if self._rlsweep_hold_schedule:
                with scaled_lr(engine.optimizer, mix[LR_SCALE]):
                    return verl_step(data, loss_function)
            spec = tu.get_non_tensor_data(data=data, key=UPDATE_KEY, default=None)
            if spec is None:
                return verl_step(data, loss_function)
            rule = self._rule_for(spec)
            outputs, stats = rule_train_batch(engine, data, loss_function, rule)
            if engine.is_mp_src_rank_with_outputs():
                outputs["metrics"]["grad_norm"] = stats.grad_norm
                for k, v in stats.as_row().items():  # the same on every rank; verl averages Metrics over ranks
                    if isinstance(v, (int, float)):  # (a bool too: a rule's own number may be one)
                        outputs["metrics"][METRIC_PREFIX + k] = Metric(AggregationType.MEAN, float(v))
            return outputs

        engine.train_batch = train_batch
        schedule_step = engine.lr_scheduler_step

        def lr_scheduler_step():
            if self.__dict__.pop("_rlsweep_hold_schedule", False):  # (the lr the schedule stands at)
                return engine.optimizer.param_groups[0]["lr"]
            return schedule_step()

        engine.lr_scheduler_step = lr_scheduler_step

    def _rule_for(self, spec: dict):
        """The run's rule without a gate of its own, told the driver's decision (a disabled rule is single-pass
        GRPO and frees its snapshot buffers)."""
        key = repr(sorted((k, v) for k, v in spec.items() if k != "enabled"))
        if key not in self._rlsweep_rules:
            self._rlsweep_rules[key] = rule_from_settings(spec, gate_here=False)
        rule = self._rlsweep_rules[key]
        rule.set_enabled(bool(spec.get("enabled", False)))
        return rule


class RuleActorRolloutRefWorker(ActorRolloutRefWorker):
    actor_worker_cls = RuleTrainingWorker
