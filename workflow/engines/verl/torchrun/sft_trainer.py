"""SFT on verl: verl 0.9's own SFT trainer (one process per GPU under torchrun, FSDP engine, sft_loss = the global
token mean over the batch's assistant tokens), with its per-step metrics written to our `train_steps`.

    python -m workflow.engines.verl.torchrun.sft_trainer CONFIG.yaml LOG.json     # what torchrun runs on every rank

(sft_launch.py builds that launch.) verl's CheckpointHandler saves
`global_step_N/` every trainer.save_freq steps and resumes from the newest by itself (trainer.resume_mode auto),
so a requeued job continues where it stopped; TrainLog is flushed right before each save, as the local engine does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf
from verl.trainer.sft_trainer import SFTTrainer
from verl.utils import tensordict_utils as tu
from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group

from workflow.algos.flops import sft_flops
from workflow.engines.verl.contract import param_count, scalar, train_log


class RlsweepSFTTrainer(SFTTrainer):
    """verl's SFTTrainer; each train_batch's metrics become a train_steps row (on the rank that logs), and
    the rows are flushed right before verl saves a checkpoint."""

    def __init__(self, config, log: dict):
        super().__init__(config)
        self.step = self.resume_global_step
        logs = self.engine.is_mp_src_rank_with_outputs() and self.engine.get_data_parallel_rank() == 0
        self.log = train_log(log, "sft", total=getattr(self, "total_training_steps", None)) if logs else None
        n_params = param_count(config.model.path) if logs else None  # for train_steps.flops
        if self.log is not None and self.step:
            self.log.discard_after(self.step)  # rows an earlier attempt flushed past its last checkpoint
        train_batch, save = self.training_client.train_batch, self.ckpt_handler.save_checkpoint

        def recording(data):
            t0 = time.perf_counter()
            lr = self.engine.optimizer.param_groups[0]["lr"]  # the step's lr (verl reports the next one)
            output = train_batch(data=data)
            self.step += 1
            if self.log is not None:
                metrics = tu.get(output, "metrics")
                tokens = sum(tu.get(data, "global_token_num"))
                self.log.record(step=self.step, loss=scalar(metrics.get("loss")),
                                grad_norm=scalar(metrics.get("grad_norm")), lr=lr,
                                backward_passes=1, optimizer_steps=1, tokens=int(tokens),
                                flops=sft_flops(n_params, int(tokens)),
                                wall_s=time.perf_counter() - t0)
            return output

        def flushing(step):
            if self.log is not None:
                self.log.flush()
            return save(step)

        self.training_client.train_batch = recording
        self.ckpt_handler.save_checkpoint = flushing


def main(argv: list[str]) -> int:
    config_path, log_path = argv
    config = OmegaConf.load(config_path)
    initialize_global_process_group()
    trainer = RlsweepSFTTrainer(config, json.loads(Path(log_path).read_text()))
    try:
        trainer.fit()
    finally:  # the trackers get their bounded time to send what is queued; an SFT job is one stage, never a segment
        if trainer.log is not None:
            trainer.log.close(finished=trainer.step >= (getattr(trainer, "total_training_steps", None) or 0))
    destroy_global_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main(sys.argv[1:]))
