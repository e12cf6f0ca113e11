"""The integrity preflight (workflow/preflight.py) of an SFT or mixed-policy RL stage on verl: the figures come from
one of verl's TrainingWorkers built from the job's own composed config (model, micro-batch size, optimizer,
clipping, offload settings, raw overrides included): an SFT stage's is verl's SFT trainer on the first rows of the
job's SFT data (SFTRunner); a mixed-policy RL stage's is the job's actor, our RuleTrainingWorker with its mixed loss,
on a planned step of the job's own prompts and method (MixRunner, probe_batch.py).

Why a child process (torchrun, like the SFT stage itself) and not the stage's process: verl's FSDP engine needs a
torch.distributed process group and, on GPUs, device memory that a process cannot give back (the CUDA context);
the stage then starts torchrun for the training itself, whose ranks need those GPUs. A child leaves nothing behind,
and it can have several data-parallel ranks, which is the only way to see a per-rank mean.

    python -m workflow.engines.verl.torchrun.preflight CONFIG.yaml REQUEST.json OUT.pt      # on every torchrun rank

Each rank builds the worker (FSDP engine, loss, optimizer), takes its share of the probe's rows and runs, for every
split the request names, the worker's own train_batch:
  gradient(m)  the optimizer step replaced by a copy of the gradient it would have been handed (no update);
  update(m)    the real step (clip + optimizer, offload context and all), the parameters' change read, then the
               parameters and optimizer state put back.
m is the micro-batch size per rank (verl's micro_batch_size_per_gpu); None is each rank's share in one pass.
With W ranks the whole batch (None) deals the rows (sorted by loss tokens) round-robin, every split gives the
shortest rows to the first rank and the longest to the last: a per-rank token mean then weighs them differently,
so it fails the gradient check as a per-micro-batch mean does. Rank 0 writes the figures.

A model above MAX_COORDS parameters is compared on an evenly strided sample of MAX_COORDS coordinates (the same
on every run): both bugs change every coordinate, and a 7B model's full gradient would be 28 GB per figure.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import sys
from pathlib import Path

import torch

from workflow.engines.verl.contract import split_key

MAX_COORDS = 1 << 22


# ------------------------------------------------------------------------------ in the child, on every rank
def _load(name: str):
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t.data


class Sampler:
    """The flat vector of a list of (sharded) tensors, or its evenly strided sample above MAX_COORDS coordinates
    (collective: every rank calls it; one parameter is gathered at a time)."""

    def __init__(self, params: list[torch.Tensor], max_coords: int = MAX_COORDS):
        self.params = params
        self.stride = max(1, math.ceil(sum(p.numel() for p in params) / max_coords))

    def __call__(self, tensors: list[torch.Tensor | None]) -> torch.Tensor:
        out, offset = [], 0
        for p, t in zip(self.params, tensors):
            flat = (_full(t) if t is not None else torch.zeros(p.shape, dtype=p.dtype, device=p.device)).reshape(-1)
            out.append(flat[(-offset) % self.stride::self.stride].detach().double().cpu())
            offset += p.numel()
        return torch.cat(out)


class Runner:
    """One of verl's TrainingWorkers on this rank (`worker`, its `engine`) and the probe's two measurements on its
    train_batch. A subclass builds the worker and its rows (`items`, dicts of per-row tensors) and says how a
    rank's rows become verl's batch (`batch`)."""

    worker: object
    engine: object
    items: list

    def _measure(self, max_coords: int, tokens: list[int]) -> None:
        """After the worker and rows exist: the parameters to read, and the rows in order of their loss tokens."""
        self.params = [p for p in self.engine.module.parameters() if p.requires_grad]
        self.sample = Sampler(self.params, max_coords)
        self.order = sorted(range(len(self.items)), key=lambda i: (tokens[i], i))

    def _rows(self, m: int | None) -> list[int]:
        """This rank's rows: round-robin over the length order for the whole batch, contiguous blocks of it (the
        most unequal token counts across ranks) for a split."""
        world, rank = self.engine.get_data_parallel_size(), self.engine.get_data_parallel_rank()
        if m is None:
            return self.order[rank::world]
        share = len(self.order) // world
        return self.order[rank * share:(rank + 1) * share]

    def batch(self, m: int | None):
        raise NotImplementedError

    def gradient(self, m: int | None) -> torch.Tensor:
        """The gradient train_batch hands the optimizer (the step itself replaced by a copy of it)."""
        seen, step = {}, self.engine.optimizer_step

        def copy_instead():
            seen["g"] = self.sample([p.grad for p in self.params])
            return 0.0
        self.engine.optimizer_step = copy_instead
        try:
            self.worker.train_batch(self.batch(m))
        finally:
            self.engine.optimizer_step = step
        return seen["g"]

    def update(self, m: int | None) -> torch.Tensor:
        """The parameters' change of one real train_batch; parameters and optimizer state restored after."""
        optimizer = self.engine.optimizer
        with self.engine.train_mode():  # (an offloaded model is on the device only in here)
            before, kept = self.sample(self.params), [_local(p).clone() for p in self.params]
        state = copy.deepcopy(optimizer.state_dict())
        # a warm-up schedule starts at lr 0, where every update is 0 and says nothing: the base lr (restored below)
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] or g.get("initial_lr") or 1e-3
        self.worker.train_batch(self.batch(m))
        with self.engine.train_mode(), torch.no_grad():
            delta = self.sample(self.params) - before
            for p, k in zip(self.params, kept):
                _local(p).copy_(k)
        optimizer.load_state_dict(state)
        return delta

    def _plant(self, request: dict) -> None:
        if request.get("plant"):  # tests: f(engine) that breaks the engine's optimizer step
            _load(request["plant"])(self.engine)


class SFTRunner(Runner):
    """verl's SFTTrainer: its dataset, TrainingWorker + FSDP engine, sft_loss and optimizer."""

    def __init__(self, config, request: dict):
        from verl.trainer.sft_trainer import SFTTrainer
        self.trainer = SFTTrainer(config)
        self.engine, self.worker, self.config = self.trainer.engine, self.trainer.training_client, config
        if request.get("loss"):  # tests: a loss in verl's signature instead of sft_loss
            from functools import partial
            self.worker.set_loss_fn(partial(_load(request["loss"]), config=None))
        self._plant(request)
        dataset = self.trainer.train_dataset
        self.items = [dataset[i] for i in range(len(dataset))]
        self._measure(request.get("max_coords", MAX_COORDS), [int(it["loss_mask"].sum()) for it in self.items])

    def batch(self, m: int | None):
        """verl's batch for this rank, with the meta data SFTTrainer.fit gives every batch (fit builds it inline)."""
        from tensordict.tensorclass import NonTensorData
        from verl.utils import tensordict_utils as tu
        rows, cfg = self._rows(m), self.config
        meta = {"use_remove_padding": cfg.model.use_remove_padding,
                "use_dynamic_bsz": False,  # the probe chooses the splits (the loss's normalisation is the same)
                "max_token_len_per_gpu": cfg.data.max_token_len_per_gpu, "micro_batch_size_per_gpu": m or len(rows),
                "temperature": 1.0, "global_batch_size": len(self.items), "pad_mode": cfg.data.pad_mode,
                "pad_token_id": self.trainer.model_config.tokenizer.pad_token_id}
        data = tu.get_tensordict(tensor_dict=self.trainer.collate_fn([self.items[i] for i in rows]),
                                 non_tensor_dict=meta)
        seqlens = [int(it["input_ids"].numel()) for it in self.items]  # for verl's MFU metric only
        tu.assign_non_tensor(data, update_lr_scheduler=False, global_token_num=NonTensorData(seqlens))
        return data


class MixRunner(Runner):
    """The actor of a mixed-policy RL job: our RuleTrainingWorker (workers/actor.py: a planned batch trains with
    mix_loss.mixed_loss) built from the job's PPO config as verl's ActorRolloutRefWorker builds its actor (model,
    FSDP engine, optimizer, micro-batch size, offload settings), on the planned rows of probe_batch.py."""

    def __init__(self, config, request: dict):
        from functools import partial
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.engine_workers import TrainingWorkerConfig
        from verl.workers.utils.losses import ppo_loss
        # our worker module, by name as verl's own processes load it (contract.WORKER_MODULE, from the engine)
        ours = importlib.import_module(request["worker_module"])
        if request.get("loss"):  # tests: a mixed loss in verl's signature instead of ours
            ours.mixed_loss = _load(request["loss"])
        self.config = config
        model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
        actor.model_config = model
        training = TrainingWorkerConfig(model_type="language_model", model_config=model, engine_config=actor.engine,
                                        optimizer_config=actor.optim, checkpoint_config=actor.checkpoint)
        training.engine_config.use_dynamic_bsz = False  # the probe chooses the splits
        training.engine_config.micro_batch_size_per_gpu = actor.ppo_micro_batch_size_per_gpu
        training.engine_config.max_token_len_per_gpu = actor.ppo_max_token_len_per_gpu
        training.engine_config.use_remove_padding = model.get("use_remove_padding", False)
        self.worker = ours.RuleTrainingWorker(config=training)
        self.worker.reset()
        self.worker.set_loss_fn(partial(ppo_loss, config=actor))  # what the job's worker holds; ours swaps it
        self.engine = self.worker.engine
        self._plant(request)
        self.items = torch.load(request["rows"])
        self.mix_entry = request["mix"]
        self._measure(request.get("max_coords", MAX_COORDS), [int(r["response_mask"].sum()) for r in self.items])

    def batch(self, m: int | None):
        """This rank's rows as verl's TransferQueue hands them to update_actor (nested per-token fields), with the
        meta data the trainer's _update_actor and the driver's plan give it."""
        from tensordict.tensorclass import NonTensorData
        from verl.utils import tensordict_utils as tu
        from workflow.engines.verl.contract import MIX_KEY
        rows = [self.items[i] for i in self._rows(m)]
        fields = {k: torch.nested.as_nested_tensor([r[k] for r in rows], layout=torch.jagged) for k in rows[0]}
        actor = self.config.actor_rollout_ref.actor
        meta = {"use_remove_padding": self.config.actor_rollout_ref.model.use_remove_padding,
                "use_dynamic_bsz": False, "max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu,
                "micro_batch_size_per_gpu": m or len(rows), "use_fused_kernels": False,
                "calculate_entropy": False, "temperature": self.config.actor_rollout_ref.rollout.temperature,
                "global_batch_size": len(self.items), MIX_KEY: self.mix_entry}
        data = tu.get_tensordict(tensor_dict=fields, non_tensor_dict=meta)
        seqlens = [len(r["input_ids"]) for r in self.items]  # for verl's MFU metric only
        tu.assign_non_tensor(data, update_lr_scheduler=False, global_token_num=NonTensorData(seqlens))
        return data


RUNNERS = {"sft": SFTRunner, "mix": MixRunner}


def main(argv: list[str]) -> int:
    from omegaconf import OmegaConf
    from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group
    config_path, request_path, out_path = argv
    request = json.loads(Path(request_path).read_text())
    initialize_global_process_group()
    runner = RUNNERS[request.get("runner", "sft")](OmegaConf.load(config_path), request)
    figures = {"gradients": {split_key(m): runner.gradient(m) for m in request["gradients"]},
               "updates": {split_key(m): runner.update(m) for m in request["updates"]}}
    if torch.distributed.get_rank() == 0:
        torch.save(figures, out_path)
    destroy_global_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
