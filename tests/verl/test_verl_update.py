"""The gates of a verl run are decided once, on the driver, and handed to the workers as a spec; the workers'
rules never trip by themselves. Also the trainer's _update_actor around verl's, with a stand-in for the Ray
worker group (the hardware boundary)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workflow.config import RLConfig, RunConfig
from workflow.engines.verl.controller.gates import DriverGates
from workflow.methods.registry import rule_from_settings, rule_settings

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules


def verl_run(**rl) -> RunConfig:
    return RunConfig.model_validate({"engine": {"name": "verl", "verl": {"model_path": "m"}},
                                     "sft": {"enabled": False}, "rl": rl})


def test_sfpo_trigger_is_decided_on_the_driver_from_the_rollout_entropy():
    gates = DriverGates(rule_settings(RLConfig(update="sfpo", sfpo={"window": 3, "tau": 1.0})))
    specs = [gates.before_update(entropy=h) for h in (1.0, 1.01, 0.99, 1.0, 9.0, 1.0)]
    assert [s["enabled"] for s in specs] == [True, True, True, True, False, False]  # off from the spike on, for good
    assert specs[0]["K"] == 3 and specs[0]["alpha"] == 0.8 and specs[0]["update"] == "sfpo"


def test_gxpo_gate_is_fed_the_corrective_norm_the_workers_report():
    gates = DriverGates(rule_settings(RLConfig(update="gxpo", gxpo={"window": 3, "warmup": 3, "tau": 2.0})))
    enabled = []
    for norm in (1.0, 1.1, 0.9, 1.0, 0.0, 50.0, 1.0):
        enabled.append(gates.before_update()["enabled"])
        gates.after_update({"actor/rlsweep/gxpo_gcorr_norm": norm})
    assert enabled == [True] * 6 + [False]  # the 50.0 trips it (the 0.0, no learning signal, is not counted)
    state = gates.state_dict()
    again = DriverGates(rule_settings(RLConfig(update="gxpo", gxpo={"window": 3, "warmup": 3, "tau": 2.0})))
    again.load_state_dict(state)  # a resumed driver stays tripped
    assert again.before_update()["enabled"] is False


def test_grpo_spec_is_never_enabled_and_worker_rules_never_trip_themselves():
    assert DriverGates(rule_settings(RLConfig())).before_update(entropy=5.0)["enabled"] is False
    rule = rule_from_settings(rule_settings(RLConfig(update="gxpo", gxpo={"window": 2, "warmup": 2})),
                              gate_here=False)
    assert rule.gate is None  # the driver's decision is all it follows
    for x in (1.0, 1.0, 1.0, 1e9):
        assert rule.feed_gate({"gxpo_gcorr_norm": x}) is None
    assert rule.enabled
    rule.set_enabled(False)
    assert not rule.enabled


def test_trainer_update_actor_hands_the_spec_over_and_feeds_the_gate_back():
    pytest.importorskip("verl")
    pytest.importorskip("transfer_queue")
    from workflow.engines.verl.job.compose import compose
    from workflow.engines.verl.job.translate import translate
    from workflow.engines.verl.contract import UPDATE_KEY
    from workflow.engines.verl.controller.trainer import RlsweepTrainer
    cfg = verl_run(update="gxpo", prompts_per_step=8, group_size=4, gxpo={"window": 3, "warmup": 3, "tau": 2.0})
    trainer = object.__new__(RlsweepTrainer)  # no Ray: everything but the worker group, which a stand-in plays
    trainer.config = compose(translate(cfg), set())
    assert trainer.config.trainer.v1.trainer_mode == "rlsweep"
    handed = []
    norms = iter([1.0, 1.1, 0.9, 1.0, 40.0, 1.0])

    def update_actor(batch):
        handed.append(dict(batch.extra_info[UPDATE_KEY]))
        return {"metrics": {"mfu": [0.1], "pg_loss": [0.5], "rlsweep/gxpo_gcorr_norm": [next(norms)]}}
    trainer.actor_rollout_wg = SimpleNamespace(update_actor=update_actor)
    tripped = []
    for _ in range(6):
        metrics: dict = {}
        trainer._update_actor(SimpleNamespace(extra_info={}), metrics)
        tripped.append(metrics["rlsweep/gate_tripped"])
    assert [h["enabled"] for h in handed] == [True] * 5 + [False]
    assert tripped == [0.0] * 4 + [1.0, 0.0] and handed[0]["K"] == 5 and handed[0]["update"] == "gxpo"


def step_metrics(step: int) -> dict:
    """A verl step's metrics as the trainer's _compute_metrics sees them."""
    return {"critic/score/mean": 0.25 * step, "actor/entropy": [0.5, 0.7], "actor/pg_clipfrac": 0.1,
            "actor/lr": 1e-6, "response_length/mean": 100.0, "timing_s/step": 3.0, "perf/total_num_tokens": 4096,
            "actor/rlsweep/backward_passes": 3.0, "actor/rlsweep/optimizer_steps": 3.0,
            "actor/rlsweep/loss": -0.1, "actor/rlsweep/grad_norm": 0.4, "actor/rlsweep/alpha": 0.5,
            "actor/rlsweep/gxpo_gcorr_norm": 0.3, "rlsweep/gate_tripped": 0.0}


def metrics_trainer(tmp_path, monkeypatch, steps: int, tracked=None):
    """Our verl trainer without Ray (verl's own _compute_metrics, which reads the transfer queue, stood in for),
    told where its tables go as the verl engine tells it (driver/engine.py log_where)."""
    pytest.importorskip("verl")
    pytest.importorskip("transfer_queue")
    from omegaconf import open_dict
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from workflow.engines.verl.job.compose import compose
    from workflow.engines.verl.job.engine import log_where
    from workflow.engines.verl.job.tiny_model import write_tiny_model
    from workflow.engines.verl.job.translate import translate
    from workflow.engines.verl.controller.trainer import RlsweepTrainer
    from workflow.results.train_log import TrainLog
    cfg = verl_run(update="gxpo", steps=steps, checkpoint_every=2, prompts_per_step=8, group_size=4)
    trainer = object.__new__(RlsweepTrainer)
    trainer.config = compose(translate(cfg), set())
    model = write_tiny_model(tmp_path / "model")  # the driver counts its parameters for train_steps.flops
    out_dir = tmp_path / "rl" / "000000000abc"
    out_dir.mkdir(parents=True)
    with open_dict(trainer.config):
        trainer.config.trainer.v1.rlsweep.log = log_where(TrainLog(tmp_path, "v", "rl", "000000000abc",
                                                                   tracked=tracked), out_dir)
        trainer.config.actor_rollout_ref.model.path = str(model)
    monkeypatch.setattr(PPOTrainer, "_compute_metrics", lambda self, *a, **k: None)  # verl's part reads the TQ
    return trainer, model


def test_verl_step_metrics_land_in_train_steps(tmp_path, monkeypatch):
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from workflow.results.catalog import query
    trainer, model = metrics_trainer(tmp_path, monkeypatch, steps=3)
    saved = []  # (step, steps whose rows were on disk when verl saved)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: saved.append(
        (step, query("SELECT step FROM train_steps ORDER BY step", tmp_path).column("step").to_pylist())))
    for step in (1, 2, 3):
        metrics = step_metrics(step)
        if step in (2, 3):  # verl's loop: save at the interval and at the end, then compute the step's metrics
            trainer._save_checkpoint()
            assert not saved or saved[-1][0] < step  # deferred until the step's row is on disk
        trainer._compute_metrics(None, metrics, {}, global_steps=step, epoch=0)
        if step == 1:  # flushed at the save interval (2) and at the end, not before
            assert not list(tmp_path.rglob("*.parquet"))
    assert saved == [(2, [1, 2]), (3, [1, 2, 3])]  # rows first, then verl's checkpoint (as the local engine)
    rows = query("SELECT * FROM train_steps ORDER BY step", tmp_path).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["reward"] for r in rows] == [0.25, 0.5, 0.75]
    r = rows[0]
    assert (r["entropy"], r["backward_passes"], r["optimizer_steps"]) == (0.6, 3, 3)
    assert (r["rollouts"], r["tokens"]) == (32, 4096)
    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model).parameters())
    assert r["flops"] == 2.0 * n * 4096 + 6.0 * n * 4096 * 3  # generation + 3 passes; no reference model (kl 0)
    assert (r["run_id"], r["stage"], r["alpha"], r["gxpo_gcorr_norm"], r["gate_tripped"]) == ("000000000abc", "rl", 0.5, 0.3,
                                                                                             False)
    assert r["kl"] is None and OmegaConf.select(trainer.config, "trainer.v1.trainer_mode") == "rlsweep"


def test_verl_trainer_reports_each_step_to_the_sweeps_trackers_while_it_trains_and_closes_them_at_its_end(
        tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from workflow.tracking.hook import record_tracking
    from workflow.tracking.runs import tracked_run
    record_tracking(tmp_path, "v", {"tensorboard": {}})
    # a setting whose text OmegaConf would take for an interpolation crosses into verl's process intact
    tracked = tracked_run("rl", "000000000abc", {"rl": {"update": "gxpo"}, "note": "${not.a.key}"}, label="gxpo",
                          seed=1, sweep="v", method="gxpo")
    trainer, _ = metrics_trainer(tmp_path, monkeypatch, steps=3, tracked=tracked)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)
    seen = {}

    def verls_loop(self, agent_loop_manager):  # three steps; verl's global_steps ends one past the last step
        for step in (1, 2, 3):
            self._compute_metrics(None, step_metrics(step), {}, global_steps=step, epoch=0)
            self.global_steps = step + 1
            seen[step] = self._rlsweep_log.trackers is not None and self._rlsweep_log.trackers.alive()
    monkeypatch.setattr(PPOTrainerSync, "fit", verls_loop)
    trainer.fit(None)
    hook = trainer._rlsweep_log.trackers
    assert seen == {1: True, 2: True, 3: True}  # opened at the first step, in the trainer's process: live
    assert not hook.alive() and hook.finished  # fit's end sent what was queued: the run is done
    assert trainer._rlsweep_log.tracked == tracked and trainer._rlsweep_log.tracked.config == tracked.config
    acc = EventAccumulator(str(tmp_path / "v" / "tensorboard" / tracked.folder), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/reward")] == [(1, 0.25), (2, 0.5), (3, 0.75)]
