"""Our run config -> verl 0.9's own config classes, checked by verl's code before any job starts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from helpers import REPO, need, write_sweep  # noqa: E402

need("verl")

from workflow.algos.losses import token_weights  # noqa: E402
from workflow.engines.verl.job.compose import compose  # noqa: E402
from workflow.engines.verl.job.translate import LOSS_AGG, translate  # noqa: E402
from workflow.stages import stage_config  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402
from workflow.sweep.spec import SweepError  # noqa: E402

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules

VERL_SWEEPS = [p for p in sorted((REPO / "sweeps").glob("*.yaml")) if "name: verl" in p.read_text()]


def test_there_is_a_verl_sweep():
    assert VERL_SWEEPS, "sweeps/ has no sweep that uses the verl engine"


@pytest.mark.slow  # verl's checks and config classes on every run of every shipped verl sweep
@pytest.mark.parametrize("path", VERL_SWEEPS, ids=lambda p: p.name)
def test_every_verl_sweep_instantiates_verls_own_config_classes(path):
    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig, RolloutConfig
    sweep = load_sweep(path)  # runs verl's validate_config on each run already
    # one run per setting: its seeds differ only in verl's seed keys, which no assertion below reads (a Hydra compose
    # is ~0.4 s; mixed_policy_verl.yaml has 6 settings of 3 seeds)
    for run in {run.label: run for run in sweep.runs}.values():
        cfg, rl = run.config, run.config.rl
        config = compose(translate(cfg), set(cfg.engine.verl.overrides))
        actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
        rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
        algo = omega_conf_to_dataclass(config.algorithm)
        optim = omega_conf_to_dataclass(config.actor_rollout_ref.actor.optim)
        assert isinstance(actor, FSDPActorConfig) and isinstance(rollout, RolloutConfig)
        assert isinstance(algo, AlgoConfig) and isinstance(optim, FSDPOptimizerConfig)
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (rl.clip_low, rl.clip_high)
        assert actor.loss_agg_mode == LOSS_AGG[rl.loss_agg][0] and actor.use_kl_loss == (rl.kl_coef > 0)
        mini = cfg.engine.verl.overrides.get("actor_rollout_ref.actor.ppo_mini_batch_size", rl.prompts_per_step)
        assert actor.ppo_mini_batch_size == mini and actor.ppo_epochs == 1  # one update per batch, unless raw keys
        assert actor.ppo_micro_batch_size_per_gpu == rl.micro_batch_size
        assert optim.lr == rl.lr and optim.clip_grad == rl.max_grad_norm
        assert optim.lr_warmup_steps == (rl.warmup_steps or -1)  # -1: verl's ratio (0.0): no warm-up
        assert rollout.n == rl.group_size and rollout.temperature == rl.temperature
        assert rollout.tensor_model_parallel_size == cfg.engine.verl.rollout_tp
        assert rollout.response_length == rl.max_new_tokens
        assert algo.adv_estimator == "grpo" and algo.norm_adv_by_std_in_grpo == rl.std_norm
        assert config.trainer.n_gpus_per_node == cfg.engine.verl.n_gpus_per_node
        assert config.trainer.total_training_steps == rl.steps and config.trainer.save_freq == rl.checkpoint_every
        for key, value in cfg.engine.verl.overrides.items():  # raw overrides land where they say
            node = config
            for part in key.split("."):
                node = node[part]
            assert node == value


VERL_BASE = """
base:
  engine: {name: verl, verl: {n_gpus_per_node: 2, model_path: Qwen/Qwen2.5-Math-1.5B}}
  sft: {enabled: false}
  rl: {prompts_per_step: 16, group_size: 4}
"""


@pytest.mark.parametrize("body, message", [
    ("  engine.verl.overrides: [{actor_rollout_ref.actor.clip_ratio_hihg: 0.3}]\n",
     "engine.verl.overrides.actor_rollout_ref.actor.clip_ratio_hihg: verl's config has no key "
     "'actor_rollout_ref.actor.clip_ratio_hihg'; did you mean 'actor_rollout_ref.actor.clip_ratio_high'?"),
    ("  engine.verl.overrides: [{actor_rollout_ref.actor.ppo_epochs: two}]\n",
     "engine.verl.overrides.actor_rollout_ref.actor.ppo_epochs: verl's FSDPActorConfig.ppo_epochs is int, got 'two'"),
    ("  engine.verl.overrides: [{actor_rollout_ref.actor.loss_agg_mode: mean}]\n",
     "engine.verl.overrides.actor_rollout_ref.actor.loss_agg_mode: verl rejects it: Invalid loss_agg_mode: mean"),
    ("  engine.verl.overrides: [{actor_rollout_ref.actor.ppo_mini_batch_size: 64}]\n",
     "engine.verl.overrides.actor_rollout_ref.actor.ppo_mini_batch_size: verl rejects it: train_batch_size (16) "
     "must be >= actor.ppo_mini_batch_size (64)"),
    ("  engine.verl.n_gpus_per_node: [3]\n", "rl.prompts_per_step: verl rejects it: rl.prompts_per_step x "
     "rl.group_size must split evenly over the run's GPUs"),
    ("  engine.verl.rollout_tp: [4]\n", "engine.verl.rollout_tp: must divide the 2 GPUs of the run"),
    # 16 x 4 rollouts over 2 nodes x 2 GPUs: 16 a GPU, which micro-batches of 32 cannot split (verl would only
    # assert it at the first step, after Ray and vLLM started on every node)
    ("  engine.verl.nnodes: [2]\n  rl.micro_batch_size: [32]\n", "rl.micro_batch_size: 32 must divide the 16 "
     "rollouts each of the run's 4 GPUs gets per step"),
])
def test_a_wrong_verl_key_or_value_fails_before_any_job_naming_it(tmp_path, body, message):
    sweep = write_sweep(tmp_path / "v.yaml", "v", "grid:\n" + body, base=VERL_BASE)
    with pytest.raises(SweepError) as e:
        load_sweep(sweep)
    assert f"{sweep}: grid point {{" in str(e.value) and message in str(e.value), str(e.value)


def test_vllms_own_engine_arguments_pass_through_rollout_engine_kwargs_and_other_new_keys_stay_refused(tmp_path):
    """rollout.engine_kwargs.vllm is a plain dict in verl (what it hands vLLM as it is): any key vLLM takes belongs
    there (verl's docs add them with Hydra's `+`), so it is not refused as a typo; a new key anywhere else is."""
    body = ("  engine.verl.overrides: [{actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend: "
            "uni, actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager: true}]\n")
    run, = load_sweep(write_sweep(tmp_path / "v.yaml", "v", "grid:\n" + body, base=VERL_BASE)).runs
    config = compose(translate(run.config), set(run.config.engine.verl.overrides))
    assert dict(config.actor_rollout_ref.rollout.engine_kwargs.vllm) == {"distributed_executor_backend": "uni",
                                                                        "enforce_eager": True}
    with pytest.raises(Exception, match="verl's config has no key 'actor_rollout_ref.rollout.distributed_exec"):
        compose({"actor_rollout_ref.rollout.distributed_executor_backend": "uni"})


@pytest.mark.slow
def test_snakemake_stops_on_a_bad_verl_key_before_any_job(tmp_path):
    sweep = write_sweep(tmp_path / "v.yaml", "v", "grid:\n  engine.verl.overrides: [{trainer.nosuch: 1}]\n",
                        base=VERL_BASE)
    res = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                          "--cores", "1", "--config", f"sweep={sweep}"], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "engine.verl.overrides.trainer.nosuch: verl's config has no key" in res.stderr
    assert not (tmp_path / "results").exists()


def test_a_verl_run_needs_a_model_to_start_from(tmp_path):
    with pytest.raises(SweepError, match="base.engine.verl.model_path: required with engine verl"):
        load_sweep(write_sweep(tmp_path / "v.yaml", "v", base=VERL_BASE.replace(
            ", model_path: Qwen/Qwen2.5-Math-1.5B", "")))



def test_verl_runs_without_sft_share_the_step0_evaluation_of_their_model_path(tmp_path):
    """eval.at_start without SFT evaluates verl's model_path: one evaluation per model (and eval settings), the
    other runs copy it; the report names each start by its model."""
    body = ("grid:\n  engine.verl.model_path: [Qwen/Qwen2.5-Math-1.5B, Qwen/Qwen2.5-1.5B]\n"
            "  rl.update: [grpo, sfpo]\nseeds: [0, 1]\n")
    base = VERL_BASE + "  eval: {at_start: true}\n"
    sweep = load_sweep(write_sweep(tmp_path / "v.yaml", "v", body, base=base))
    sources = sweep.start_sources()
    assert len(sweep.runs) == 8 and len(sources) == 8 - 2  # one evaluation per model_path
    for eval_id, source in sources.items():
        run = next(r for r in sweep.runs if r.eval_id == eval_id)
        assert source.start == run.start == run.config.engine.verl.model_path and source.eval_id not in sources
    assert {r.start for r in sweep.runs} == {"Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-1.5B"}


VERL_SFT_BASE = VERL_BASE.replace("sft: {enabled: false}", "sft: {steps: 10, batch_size: 8, micro_batch_size: 2}")


def test_sft_on_verl_translates_into_verls_sft_trainer_config(tmp_path):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig
    from workflow.engines.verl.job.compose import SFT
    from workflow.engines.verl.job.translate import translate_sft
    sweep = load_sweep(write_sweep(tmp_path / "v.yaml", "v", "grid:\n  engine.verl.sft_overrides: "
                                   "[{engine.mixed_precision: {param_dtype: fp32}}]\n", base=VERL_SFT_BASE))
    cfg = sweep.runs[0].config
    config = compose(translate_sft(cfg, train_files="t.parquet", out_dir="o"), set(cfg.engine.verl.sft_overrides), SFT)
    optim, engine = omega_conf_to_dataclass(config.optim), omega_conf_to_dataclass(config.engine)
    assert isinstance(optim, FSDPOptimizerConfig) and isinstance(engine, FSDPEngineConfig)
    assert (optim.lr, optim.lr_scheduler_type, optim.clip_grad) == (cfg.sft.lr, "cosine", cfg.sft.max_grad_norm)
    assert (optim.lr_warmup_steps_ratio, optim.min_lr_ratio) == (cfg.sft.warmup_ratio, cfg.sft.min_lr_ratio)
    assert engine.strategy == "fsdp2" and engine.mixed_precision == {"param_dtype": "fp32"}  # declared, not in YAML
    assert (config.data.train_batch_size, config.data.micro_batch_size_per_gpu) == (8, 2)
    assert config.trainer.total_training_steps == 10 and config.model.path == "Qwen/Qwen2.5-Math-1.5B"


@pytest.mark.parametrize("body, message", [
    ("  engine.verl.sft_overrides: [{optim.lrr: 0.1}]\n",
     "engine.verl.sft_overrides.optim.lrr: verl's config has no key 'optim.lrr'; did you mean 'optim.lr'?"),
    ("  engine.verl.sft_overrides: [{optim.weight_decay: lots}]\n",
     "engine.verl.sft_overrides.optim.weight_decay: verl's FSDPOptimizerConfig.weight_decay is float, got 'lots'"),
    ("  engine.verl.sft_overrides: [{engine.strategy: megatron}]\n",
     "engine.verl.sft_overrides.engine.strategy: verl rejects it"),
    ("  sft.batch_size: [9]\n", "sft.batch_size: 9 must split evenly over the run's 2 GPUs"),
    ("  sft.micro_batch_size: [3]\n", "sft.micro_batch_size: 3 must divide the 4 examples each GPU gets"),
])
def test_a_wrong_sft_key_or_value_fails_before_any_job_naming_it(tmp_path, body, message):
    sweep = write_sweep(tmp_path / "v.yaml", "v", "grid:\n" + body, base=VERL_SFT_BASE)
    with pytest.raises(SweepError) as e:
        load_sweep(sweep)
    assert message in str(e.value), str(e.value)


def test_sft_and_rl_ids_see_only_their_own_verl_settings(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "v.yaml", "v", "grid:\n  engine.verl.overrides: [{}, "
                                   "{actor_rollout_ref.actor.ppo_epochs: 2}]\n  engine.verl.sft_overrides: [{}, "
                                   "{optim.betas: [0.9, 0.95]}]\n", base=VERL_SFT_BASE))
    by = {(bool(r.config.engine.verl.overrides), bool(r.config.engine.verl.sft_overrides)): r for r in sweep.runs}
    assert by[False, False].sft_id == by[True, False].sft_id != by[False, True].sft_id  # RL keys: same SFT job
    assert len({r.run_id for r in sweep.runs}) == 4


def test_local_run_ids_do_not_see_verl_settings(tmp_path):
    a = load_sweep(write_sweep(tmp_path / "a.yaml", "a"))
    b = load_sweep(write_sweep(tmp_path / "b.yaml", "a", "grid:\n  engine.verl.rollout_tp: [2]\n"))
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]
    assert stage_config(a.runs[0].config, "rl", sft_id=None)["engine"] == {"name": "local"}


@pytest.mark.parametrize("ours", sorted(LOSS_AGG))
def test_our_loss_aggregations_equal_verls_agg_loss(ours):
    """The translated loss_agg_mode (+ loss_scale_factor) gives verl's agg_loss the value our token weights give."""
    from verl.trainer.ppo.core_algos import agg_loss
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 9, generator=g, dtype=torch.float64)
    lengths = torch.tensor([9, 1, 4, 7, 2, 5])
    mask = (torch.arange(9)[None, :] < lengths[:, None]).to(torch.float64)
    mode, scaled = LOSS_AGG[ours]
    theirs = agg_loss(loss, mask, mode, loss_scale_factor=12 if scaled else None)
    mine = (loss * token_weights(mask, ours, max_len=12)).sum()
    # our weights are float32 and verl's seq-mean-token-mean divides by (len + 1e-8): equal to ~1e-7, a wrong mode
    # or normaliser is off by a factor
    assert torch.allclose(theirs, mine.to(theirs.dtype), rtol=1e-6, atol=1e-7), (theirs, mine)
