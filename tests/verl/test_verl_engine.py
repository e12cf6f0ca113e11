"""Our update rules on verl 0.9's own engine (FSDPEngineWithLMHead, FSDP2, tiny random Qwen2, CPU, 1 and 2 gloo
ranks; the CPU shims are tests/support/verl_cpu.py): GRPOStep is verl's own training step, SFPO with alpha = 0 is GRPO, an
active GXPO step takes exactly 3 backward passes, and verl's SFT loss is micro-batch invariant.
Each world size runs tests/support/verl_engine_worker.py once per rank; the tests read what the ranks saved."""

from __future__ import annotations

import json

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SUPPORT, need
import torch

pytestmark = [pytest.mark.serial("verl"), pytest.mark.slow]  # README "Tests": one at a time with the other verl modules

need("verl")

HERE = SUPPORT  # the worker scripts and bug plug-ins


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def verl_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl_engine")


@pytest.fixture(scope="module")
def ranks(verl_root) -> dict[int, list[dict]]:
    root = verl_root
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    model = root / "model"
    write = f"import verl_cpu, pathlib; verl_cpu.write_tiny_model(pathlib.Path({str(model)!r}))"
    subprocess.run([sys.executable, "-c", write],
                   env=env, check=True, capture_output=True, timeout=300)
    out = {}
    for world in (1, 2):
        d = root / f"world{world}"
        d.mkdir()
        port = str(_free_port())
        procs = [subprocess.Popen([sys.executable, str(HERE / "verl_engine_worker.py"), str(r), str(world), str(model),
                                   str(d), port], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-4000:]
        out[world] = [torch.load(d / f"rank{r}.pt", weights_only=False) for r in range(world)]
    return out


WORLDS = [1, 2]


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("world", WORLDS)
def test_grpo_step_is_verls_own_training_step(ranks, world):
    r = ranks[world][0]
    assert max_diff(r["verl"]["params"], r["grpo"]["params"]) == 0.0  # bit for bit, 2 steps, clip not binding
    assert max_diff(r["grpo"]["params"], r["sfpo"]["params"]) > 1e-3  # the comparison can see a difference
    for ours, theirs in zip(r["grpo"]["stats"], r["verl"]["stats"]):
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-6)
    # with a binding clip: our clip_and_step vs verl's clip_grad_norm_ (same formula, norm summed in another order)
    assert all(s["grad_norm"] > 0.05 for s in r["verl_clip"]["stats"])
    # float32 rounding of the two summation orders: 1.4e-6 on some CPUs (also before the rule registry), far below
    # the 1e-3 a different update makes
    assert max_diff(r["verl_clip"]["params"], r["grpo_clip"]["params"]) < 1e-5
    assert r["grpo"]["backward_calls"] == r["verl"]["backward_calls"] == 2


@pytest.mark.parametrize("world", WORLDS)
def test_sfpo_with_alpha_zero_is_grpo(ranks, world):
    r = ranks[world][0]
    assert same(r["sfpo_alpha0"]["params"], r["grpo"]["params"])
    assert [s["backward_passes"] for s in r["sfpo_alpha0"]["stats"]] == [1, 1]
    assert [s["backward_passes"] for s in r["sfpo"]["stats"]] == [4, 4] and r["sfpo"]["backward_calls"] == 8


@pytest.mark.parametrize("world", WORLDS)
def test_an_active_gxpo_step_takes_exactly_three_backward_passes(ranks, world):
    r = ranks[world][0]
    assert [s["backward_passes"] for s in r["gxpo"]["stats"]] == [3, 3]
    assert r["gxpo"]["backward_calls"] == 6  # counted at verl's forward_backward_batch, not by the rule itself
    assert not any(s["gate_tripped"] for s in r["gxpo"]["stats"])
    assert max_diff(r["gxpo"]["params"], r["grpo"]["params"]) > 1e-3


@pytest.mark.parametrize("world", WORLDS)
def test_a_rule_added_as_one_registered_class_runs_in_verls_rule_step_and_worker(ranks, world, tmp_path):
    """tests/support/toy_rule.py (two plain steps per batch), built by name as the verl worker builds rules: equal to verl's
    own train_batch called twice per step, 2 backward passes per step, in the engine step and in the worker; the
    number the rule declares comes out of the worker and lands in the run's train_steps row (the driver's side)."""
    r = ranks[world][0]
    assert same(r["toy"]["params"], r["verl_twice"]["params"])
    assert max_diff(r["toy"]["params"], r["verl"]["params"]) > 1e-4  # the second step is really taken
    assert r["toy"]["backward_calls"] == 4 and [s["backward_passes"] for s in r["toy"]["stats"]] == [2, 2]
    toy = r["worker_toy"]
    assert toy["backward_calls"] == 4 and toy["metrics"][0]["rlsweep/backward_passes"] == [2.0]
    assert toy["lr_steps"] == 2
    assert toy["metrics"][0]["rlsweep/toy_steps_taken"] == [2.0]
    # what the driver gets from verl (worker metrics prefixed "actor/"), made the run's row and written
    import toy_rule  # noqa: F401 - the rule's card, as the driver process knows it
    from workflow.engines.verl.controller.metrics import train_steps_row
    from workflow.layout import train_steps_file
    from workflow.results.catalog import query
    from workflow.results.writer import write_rows
    row = train_steps_row({f"actor/{k}": v for k, v in toy["metrics"][0].items()}, step=1, rollouts=8)
    write_rows(tmp_path, "train_steps", train_steps_file("rl", "0000000000a1", 1, 1),
               [dict(row, run_id="0000000000a1", stage="rl")])
    assert query("SELECT toy_steps_taken FROM train_steps", tmp_path).column(0).to_pylist() == [2]


def test_two_ranks_agree_with_each_other_and_with_one(ranks):
    r0, r1 = ranks[2]
    for name in ("verl", "grpo", "sfpo", "gxpo"):
        assert same(r0[name]["params"], r1[name]["params"])  # gathered parameters: one model on both ranks
        assert r0[name]["stats"] == r1[name]["stats"]  # same scalars, so the same gate decisions
        # sharded over 2 ranks = the same global token-mean step as 1 rank, up to float summation order
        assert max_diff(ranks[1][0][name]["params"], r0[name]["params"]) < 1e-4


@pytest.mark.parametrize("world", WORLDS)
def test_verls_sft_loss_is_micro_batch_invariant(ranks, world):
    grads = ranks[world][0]["sft_micro"]
    sizes = sorted(grads)
    assert len(sizes) == 3
    scale = max(float(g.abs().max()) for g in grads[sizes[0]].values())
    assert scale > 1e-2
    for m in sizes[1:]:
        assert max_diff(grads[sizes[0]], grads[m]) < 1e-6 * max(1.0, scale)


# ------------------------------------------------------------------------- our TrainingWorker (what Ray runs)
@pytest.mark.parametrize("world", WORLDS)
def test_rule_training_worker_follows_the_drivers_spec(ranks, world):
    """RuleTrainingWorker through verl's train_mini_batch (the update_actor path): no spec or a GRPO spec is
    verl's own worker bit for bit; GXPO takes 3 passes per step, SFPO K + 1, a disabled GXPO is GRPO; the LR
    scheduler steps once per training step whatever the passes; our StepStats come back in verl's metrics."""
    r = ranks[world][0]
    verl = r["worker_verl"]
    assert same(r["worker_nospec"]["params"], verl["params"]) and same(r["worker_grpo"]["params"], verl["params"])
    assert same(r["worker_gxpo_off"]["params"], verl["params"])
    assert max_diff(r["worker_gxpo"]["params"], verl["params"]) > 1e-4
    assert (r["worker_gxpo"]["backward_calls"], r["worker_sfpo"]["backward_calls"]) == (6, 8)
    assert {r[k]["lr_steps"] for k in ("worker_verl", "worker_grpo", "worker_gxpo", "worker_sfpo")} == {2}
    gx = r["worker_gxpo"]["metrics"][0]
    assert gx["rlsweep/backward_passes"] == [3.0] and gx["rlsweep/alpha"] == [0.5]
    assert gx["rlsweep/gxpo_gcorr_norm"][0] > 0 and gx["grad_norm"] == [pytest.approx(gx["rlsweep/grad_norm"][0])]
    assert r["worker_sfpo"]["metrics"][0]["rlsweep/backward_passes"] == [4.0]


@pytest.mark.parametrize("world", WORLDS)
def test_verl_checkpoints_export_into_our_checkpoint_layout(ranks, world):
    """verl's sharded checkpoint (1 or 2 ranks) merged by verl's own merger into checkpoints/step_N: a Hugging Face
    model with the trained parameters (as bf16, the merger's dtype), the tokenizer, and meta.json."""
    exported = ranks[world][0]["export"]
    assert exported["paths"][0].endswith("checkpoints/step_000001")
    assert exported["equal"] and exported["moved"] and exported["n"] == 15
    assert exported["tokenizer"] == "23"  # the run's tokenizer travels with the weights
    assert '"engine": "verl"' in exported["meta"] and '"step": 1' in exported["meta"]


# ------------------------------------------------------------------------------------- the RL stage on verl
def test_verl_rl_stage_runs_up_to_run_ppo_and_exports_what_verl_saved(ranks, verl_root, tmp_path, monkeypatch):
    """VerlEngine.rl on CPU with a stand-in for verl's run_ppo (the GPU part): the config it hands over is this
    run's (data written, model, checkpoint dir, our trainer, where our tables go); what verl saves is exported
    into our checkpoint layout and the final one is the stage's result."""
    import shutil
    from omegaconf import OmegaConf
    from workflow.engine_api.registry import get_engine
    from workflow.results.train_log import TrainLog
    from workflow.engines.verl import VerlEngine
    from workflow.stages import parse_stage, stage_config
    from workflow.config import RunConfig
    cfg = RunConfig.model_validate({"engine": {"name": "verl", "verl": {"model_path": str(verl_root / "model")}},
                                    "sft": {"enabled": False}, "task": {"n_heldout": 16},
                                    "rl": {"steps": 4, "checkpoint_every": 2, "prompts_per_step": 8, "group_size": 4}})
    stage = parse_stage("rl", stage_config(cfg, "rl", sft_id=None))  # as the stage job hands it to the engine
    seen = {}

    def fake_run_ppo(config):
        seen.update(OmegaConf.to_container(config, resolve=False))
        for step in (2, 4):  # what verl's save_freq would leave: reuse a real (1-rank) verl checkpoint
            shutil.copytree(verl_root / "world1" / "verl" / "global_step_1",
                            Path(config.trainer.default_local_dir) / f"global_step_{step}")
    assert isinstance(get_engine("verl"), VerlEngine)
    out = tmp_path / "rl" / "000000000abc"
    final = VerlEngine(launch=fake_run_ppo).rl(stage, None, out, TrainLog(tmp_path, "v", "rl", "000000000abc"))
    assert final == out / "checkpoints" / "step_000004"
    assert (out / "checkpoints" / "step_000002" / "model.safetensors").is_file()
    data, trainer = seen["data"], seen["trainer"]
    assert Path(data["train_files"]).is_file() and Path(data["val_files"]).is_file()
    assert seen["actor_rollout_ref"]["model"]["path"] == str(verl_root / "model")
    assert trainer["default_local_dir"] == str(out / "verl") and trainer["v1"]["trainer_mode"] == "rlsweep"
    assert trainer["v1"]["rlsweep"]["log"] == {"results_root": str(tmp_path), "sweep": "v", "run_id": "000000000abc"}
    assert seen["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VERL_USE_EXTERNAL_MODULES"] == \
        "workflow.engines.verl.compat.vllm_compat,workflow.engines.verl.rollout.agent_loop"

    def first_segment(config):  # verl's loop ends (and saves) at trainer.total_training_steps
        seen.update(OmegaConf.to_container(config, resolve=False))
        shutil.copytree(verl_root / "world1" / "verl" / "global_step_1",
                        Path(config.trainer.default_local_dir) / f"global_step_{config.trainer.total_training_steps}")
    seg = tmp_path / "rl" / "000000000seg"
    first = VerlEngine(launch=first_segment).rl(stage, None, seg, TrainLog(tmp_path, "v", "rl", "000000000seg"),
                                                until=2)
    assert first == seg / "checkpoints" / "step_000002" and seen["trainer"]["total_training_steps"] == 2
    assert json.loads((first / "meta.json").read_text())["total_steps"] == 4  # a segment of the 4-step run

    def no_final(config):
        pass
    with pytest.raises(RuntimeError, match="verl ended without a checkpoint at step 4"):
        VerlEngine(launch=no_final).rl(stage, None, tmp_path / "rl" / "other", TrainLog(tmp_path, "v", "rl", "x"))
    two = RunConfig.model_validate({**cfg.model_dump(), "engine": {"name": "verl", "verl": {
        "model_path": "m", "nnodes": 2}}})
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu01")
    with pytest.raises(RuntimeError, match="allocation has 1 node"):
        VerlEngine(launch=no_final).rl(parse_stage("rl", stage_config(two, "rl", sft_id=None)), None,
                                       tmp_path / "rl" / "two",
                                       TrainLog(tmp_path, "v", "rl", "y"))
