"""One rank of tests/verl/test_verl_engine.py: scenarios on verl's own FSDPEngineWithLMHead (FSDP2, gloo, CPU).

    python verl_engine_worker.py RANK WORLD MODEL_DIR OUT_DIR PORT

Every scenario starts from the same model directory, trains STEPS steps on the same global batches (this rank
takes its rows), and the rank writes the gathered parameters and step stats to OUT_DIR/rank<r>.pt."""

from __future__ import annotations

import os
import sys
from pathlib import Path

rank, world, model_dir, out_dir, port = sys.argv[1:6]
os.environ.update(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=world, MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=port)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.set_num_threads(1)
import verl_cpu  # noqa: E402

verl_cpu.use_cpu_platform()
dist.init_process_group("gloo")

from workflow.engines.verl.workers.rule_step import rule_train_batch  # noqa: E402
from workflow.methods.grpo.algorithm import GRPOStep  # noqa: E402
from workflow.methods.gxpo.algorithm import GXPO  # noqa: E402
from workflow.methods.registry import rule_from_settings  # noqa: E402
from workflow.methods.sfpo.algorithm import SFPO  # noqa: E402

import toy_rule  # noqa: E402,F401 - registers the test's own update rule, toy_two_steps

STEPS = 2
RANK, WORLD = int(rank), int(world)
ROWS = slice(RANK * 8 // WORLD, (RANK + 1) * 8 // WORLD)


def run(name: str, rule=None, clip_grad: float = 1.0e9, micro: int = 2, verl_steps_per_step: int = 1) -> dict:
    engine = verl_cpu.build_engine(Path(model_dir), clip_grad=clip_grad)
    loss_fn = verl_cpu.ppo_loss_fn()
    calls = {"backward": 0}
    forward_backward = engine.forward_backward_batch

    def counting(data, loss_function, forward_only=False):
        calls["backward"] += not forward_only
        return forward_backward(data, loss_function, forward_only=forward_only)
    engine.forward_backward_batch = counting
    stats = []
    for step in range(STEPS):
        data = verl_cpu.grpo_batch(seed=step, rows=ROWS, micro=micro)
        with engine.train_mode():
            if rule is None:  # verl's own step (twice on the same batch: what the toy rule should equal)
                for _ in range(verl_steps_per_step):
                    out = engine.train_batch(data, loss_function=loss_fn)
                stats.append({"grad_norm": float(out["metrics"]["grad_norm"]), "backward_passes": verl_steps_per_step})
            else:
                _, st = rule_train_batch(engine, data, loss_fn, rule)
                stats.append(st.as_row())
            engine.lr_scheduler_step()
    return {"params": verl_cpu.full_params(engine), "stats": stats, "backward_calls": calls["backward"]}


def sft_grads(micro: int) -> dict:
    """verl's SFT loss on the engine: gradients of one batch split into micro-batches of `micro` rows."""
    from functools import partial
    from verl.workers.utils.losses import sft_loss
    engine = verl_cpu.build_engine(Path(model_dir))
    data = verl_cpu.sft_batch(seed=7, rows=ROWS, micro=micro)
    from verl.workers.config import FSDPActorConfig
    cfg = FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=micro)
    with engine.train_mode():  # (leaving train mode drops the gradients)
        engine.optimizer_zero_grad()
        engine.forward_backward_batch(data, partial(sft_loss, config=cfg), forward_only=False)
        return {n: p.grad.full_tensor().clone() for n, p in engine.module.named_parameters()}


def worker_run(spec: dict | None, ours: bool = True) -> dict:
    """verl's TrainingWorker (or our RuleTrainingWorker) end to end through train_mini_batch, as the trainer's
    update_actor call reaches it: one mini-batch per step, LR scheduler inside, our spec in the non-tensor data."""
    from verl.trainer.config import CheckpointConfig
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from workflow.engines.verl.contract import UPDATE_KEY
    from workflow.engines.verl.workers.actor import RuleTrainingWorker
    cls = RuleTrainingWorker if ours else TrainingWorker
    worker = cls(config=TrainingWorkerConfig(
        model_type="language_model",
        model_config=HFModelConfig(path=str(model_dir), override_config={"attn_implementation": "sdpa"}),
        engine_config=FSDPEngineConfig(strategy="fsdp2", model_dtype="fp32", dtype="float32", use_torch_compile=False,
                                       mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32",
                                                        "buffer_dtype": "fp32"}, micro_batch_size_per_gpu=2),
        optimizer_config=FSDPOptimizerConfig(lr=1e-2, clip_grad=1.0e9, total_training_steps=100, weight_decay=0.0,
                                             lr_warmup_steps=2),
        checkpoint_config=CheckpointConfig()))
    worker.reset()
    worker.set_loss_fn(verl_cpu.ppo_loss_fn())
    calls = {"backward": 0}
    forward_backward = worker.engine.forward_backward_batch

    def counting(data, loss_function, forward_only=False):
        calls["backward"] += not forward_only
        return forward_backward(data, loss_function, forward_only=forward_only)
    worker.engine.forward_backward_batch = counting
    metrics = []
    for step in range(STEPS):
        data = verl_cpu.grpo_batch(seed=step, rows=ROWS)
        tu.assign_non_tensor(data, mini_batch_size=8, epochs=1, seed=0, dataloader_kwargs={"shuffle": False})
        if spec is not None:
            tu.assign_non_tensor(data, **{UPDATE_KEY: spec})
        out = worker.train_mini_batch(data)
        metrics.append({k: v for k, v in tu.get(out, "metrics").items() if isinstance(v, (int, float, list))}
                       if out is not None else {})
    return {"params": verl_cpu.full_params(worker.engine), "metrics": metrics, "backward_calls": calls["backward"],
            "lr_steps": worker.engine.lr_scheduler.last_epoch}


GXPO_SPEC = {"update": "gxpo", "max_grad_norm": 1.0e9, "K": 5, "alpha": 0.5, "eps": 1e-8, "window": 20, "warmup": 10,
             "tau": 2.0, "ratio_source": "grad", "clamp": "s", "clamp_min": None, "clamp_max": None, "enabled": True}
SFPO_SPEC = {"update": "sfpo", "max_grad_norm": 1.0e9, "K": 3, "alpha": 0.8, "window": 30, "tau": 1.0,
             "enabled": True}

def export_run() -> dict:
    """Train a step, save verl's (sharded) checkpoint, merge it into our layout: the HF model must hold the
    gathered parameters."""
    from workflow.engines.verl.job.export import export_all
    engine = verl_cpu.build_engine(Path(model_dir))
    init = verl_cpu.full_params(engine)
    with engine.train_mode():
        engine.train_batch(verl_cpu.grpo_batch(seed=0, rows=ROWS), loss_function=verl_cpu.ppo_loss_fn())
    verl_dir = Path(out_dir) / "verl"
    engine.save_checkpoint(str(verl_dir / "global_step_1" / "actor"), global_step=1)
    params = verl_cpu.full_params(engine)
    dist.barrier()
    if RANK != 0:
        return {}
    exported = export_all(verl_dir, Path(out_dir) / "checkpoints", {"run_id": "000000000abc", "stage": "rl"})
    from transformers import AutoTokenizer, Qwen2ForCausalLM
    model = Qwen2ForCausalLM.from_pretrained(exported[0], dtype=torch.float32)
    merged = dict(model.named_parameters())
    # verl's merger writes bf16 (whatever the training dtype): equal to the gathered parameters rounded to bf16
    return {"paths": [str(p) for p in exported],
            "equal": all(torch.equal(merged[k], params[k].to(torch.bfloat16).float()) for k in params),
            "moved": any(not torch.equal(merged[k], init[k].to(torch.bfloat16).float()) for k in params),
            "n": len(params), "tokenizer": AutoTokenizer.from_pretrained(exported[0]).decode([5, 6]),
            "meta": (exported[0] / "meta.json").read_text()}


results = {
    "export": export_run(),
    "worker_verl": worker_run(None, ours=False),
    "worker_nospec": worker_run(None),
    "worker_grpo": worker_run({"update": "grpo", "max_grad_norm": 1.0e9, "enabled": False}),
    "worker_gxpo": worker_run(GXPO_SPEC),
    "worker_gxpo_off": worker_run({**GXPO_SPEC, "enabled": False}),
    "worker_sfpo": worker_run(SFPO_SPEC),
    "worker_toy": worker_run({"update": "toy_two_steps", "max_grad_norm": 1.0e9, "enabled": True}),
    "verl_twice": run("verl_twice", verl_steps_per_step=2),
    "toy": run("toy", rule_from_settings({"update": "toy_two_steps", "max_grad_norm": 1.0e9}, gate_here=False)),
    "verl": run("verl"),
    "grpo": run("grpo", GRPOStep(max_grad_norm=1.0e9)),
    "verl_clip": run("verl_clip", clip_grad=0.05),
    "grpo_clip": run("grpo_clip", GRPOStep(max_grad_norm=0.05), clip_grad=0.05),
    "sfpo_alpha0": run("sfpo_alpha0", SFPO(K=3, alpha=0.0, max_grad_norm=1.0e9)),
    "sfpo": run("sfpo", SFPO(K=3, alpha=0.8, max_grad_norm=1.0e9)),
    "gxpo": run("gxpo", GXPO(K=5, alpha=0.5, warmup=10, window=20, max_grad_norm=1.0e9)),
    "sft_micro": {m: sft_grads(m) for m in (1, 2, 8 // WORLD)},
}
torch.save(results, Path(out_dir) / f"rank{rank}.pt")
dist.barrier()  # both ranks done before either tears gloo down (see tests/support/fsdp_worker.py)
dist.destroy_process_group()
