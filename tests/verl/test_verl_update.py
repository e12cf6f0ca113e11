"""The gates of a verl run are decided once, on the driver, and handed to the workers as a spec; the workers'
rules never trip by themselves. Also the trainer's _update_actor around verl's, with a stand-in for the Ray
worker group (the hardware boundary)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workflow.config import RLConfig, RunConfig
from workflow.engines.verl.inside.gates import DriverGates
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
    from workflow.engines.verl.driver.compose import compose
    from workflow.engines.verl.driver.translate import translate
    from workflow.engines.verl.inside.gates import UPDATE_KEY
    from workflow.engines.verl.inside.worker import RlsweepTrainer
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


def test_verl_step_metrics_land_in_train_steps(tmp_path, monkeypatch):
    pytest.importorskip("verl")
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from workflow.engines.verl.driver.compose import compose
    from workflow.engines.verl.driver.translate import translate
    from transformers import AutoModelForCausalLM
    from workflow.engines.verl.driver.tiny_model import write_tiny_model
    from workflow.engines.verl.inside.worker import RlsweepTrainer
    from workflow.results.catalog import query
    cfg = verl_run(update="gxpo", steps=3, checkpoint_every=2, prompts_per_step=8, group_size=4)
    trainer = object.__new__(RlsweepTrainer)
    trainer.config = compose(translate(cfg), set())
    model = write_tiny_model(tmp_path / "model")  # the driver counts its parameters for train_steps.flops
    with open_dict(trainer.config):
        trainer.config.trainer.v1.rlsweep.log = {"results_root": str(tmp_path), "sweep": "v", "run_id": "000000000abc"}
        trainer.config.actor_rollout_ref.model.path = str(model)
    monkeypatch.setattr(PPOTrainer, "_compute_metrics", lambda self, *a, **k: None)  # verl's part reads the TQ
    saved = []  # (step, steps whose rows were on disk when verl saved)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: saved.append(
        (step, query("SELECT step FROM train_steps ORDER BY step", tmp_path).column("step").to_pylist())))
    for step in (1, 2, 3):
        metrics = {"critic/score/mean": 0.25 * step, "actor/entropy": [0.5, 0.7], "actor/pg_clipfrac": 0.1,
                   "actor/lr": 1e-6, "response_length/mean": 100.0, "timing_s/step": 3.0, "perf/total_num_tokens": 4096,
                   "actor/rlsweep/backward_passes": 3.0, "actor/rlsweep/optimizer_steps": 3.0,
                   "actor/rlsweep/loss": -0.1, "actor/rlsweep/grad_norm": 0.4, "actor/rlsweep/alpha": 0.5,
                   "actor/rlsweep/gxpo_gcorr_norm": 0.3, "rlsweep/gate_tripped": 0.0}
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
