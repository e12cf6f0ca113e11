"""The verl engine: one SFT stage = one run of verl's SFT trainer (torchrun, FSDP), one RL stage = one verl 0.9
PPO run (Ray, FSDP2 actor, vLLM rollouts) with our update rules.

    sft(stage, out_dir, log):
      1. data: the task's worked solutions as verl's multi-turn SFT parquet (data.write_sft_data)
      2. config: verl's sft_trainer_engine config for this run (translate.translate_sft, compose.compose), saved
      3. torchrun (srun'd over the allocation's nodes when nnodes > 1; sft_launch.py) runs sft_trainer.py per GPU
      4. verl's checkpoints exported into out_dir/checkpoints/step_N, the final one is the stage's result
    Tested on CPU end to end (real torchrun, 1 and 2 gloo ranks) with the tests' CPU platform.

    rl(stage, init_ckpt, out_dir, log):
      1. data: the task's problems as verl parquet (data.write_rl_data) under out_dir/data
      2. config: the translated verl config with this run's paths (translate, compose), its tables' location for the
         registered trainer (trainer.v1.rlsweep.log), verl's checkpoints under out_dir/verl (verl resumes from
         them by itself after a requeue: trainer.resume_mode auto)
      3. Ray: nnodes > 1 starts the head here and a worker on every other node of the SLURM allocation
         (slurm/ray_cluster.py); one node lets verl start a local Ray
      4. verl's run_ppo with its v1 task runner -> our trainer (trainer_mode rlsweep) and workers (controller/trainer.py, workers/actor.py)
      5. every verl checkpoint exported into out_dir/checkpoints/step_N (export.py) for the eval stage
    integrity_probe(stage): the integrity preflight's figures (workflow/preflight.py) from verl's SFT trainer (an
      SFT stage) or the job's actor worker on a planned step (a mixed-policy RL stage) built from the job's config,
      on its first rows, in a torchrun child with 2 ranks on a CPU, the node's GPUs on GPUs (preflight.py)
verl runs in child processes the engine supervises (process.py: a time limit, engine.verl.timeout_min, and no Ray
processes or shared-memory segments left behind). `engine.verl.device: cpu` runs the same chain on CPUs with
vLLM's CPU build (cpu.py), on the tiny model `rlsweep:tiny` (tiny_model.py): how CI runs it for real.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from workflow.engines.verl.job.compose import SFT, compose
from workflow.engines.verl.job.data import write_rl_data, write_sft_data
from workflow.engines.verl.job.export import export_all
from workflow.capture import output_to
from workflow.engines.verl.job.process import run_supervised
from workflow.engines.verl.job.sft_launch import command as sft_command
from workflow.engines.verl.job.translate import FP32, external_modules, CPU_DROPPED_ENV, process_env, translate, \
    translate_sft
from workflow.engines.verl.contract import CPU_MODULE, FIELDS as MIX_FIELDS, PPO_MODULE, PREFLIGHT_MODULE, TRACKED_RUN, \
    WORKER_MODULE
from workflow.engines.verl.job.probe import VerlProbe, probe_rows
from workflow.engines.verl.traits import CHECKPOINT_DIR
from workflow.layout import CHECKPOINTS
from workflow.models import resolve_model
from workflow.progress import StepProgress, say
from workflow.results.train_log import TrainLog
from workflow.slurm.ray_cluster import allocation_nodes, head_address, start_commands, wait_for_nodes
from workflow.stages import RLStage, SFTStage


def child_env(v, modules: str) -> dict[str, str]:
    """This process's environment for a verl child: the device's variables (less those a CPU run must not
    inherit: translate.CPU_DROPPED_ENV), and our modules first in VERL_USE_EXTERNAL_MODULES (a user's own plugins
    may already be there). A one-node run's Ray is its own: RAY_ADDRESS=local. Without it verl's ray.init() joins
    whatever cluster the machine's last `ray start` recorded in /tmp/ray/ray_current_cluster (an earlier multi-node
    job's head on this node, a user's own cluster, even a dead one) and fails ("When connecting to an existing
    cluster, num_cpus and num_gpus must not be provided"). A multi-node run's RAY_ADDRESS is its head's
    (VerlEngine._start_ray)."""
    env = {**os.environ, **process_env(v)}
    if v.nnodes == 1:
        env["RAY_ADDRESS"] = "local"
    if v.device == "cpu":
        for key in CPU_DROPPED_ENV:
            env.pop(key, None)
    if modules:
        theirs = env.get("VERL_USE_EXTERNAL_MODULES")
        env["VERL_USE_EXTERNAL_MODULES"] = modules + (f",{theirs}" if theirs else "")
    return env


def largest_tensor_mb(model_dir: str | Path, bytes_per_value: int = 4) -> int:
    """MB (rounded up, +1) of the model's largest weight at `bytes_per_value` (fp32: what a CPU run syncs), from the
    safetensors headers (no weights read); 1 where there are none (a Hugging Face id, resolved by verl itself)."""
    from safetensors import safe_open
    largest = 0
    for f in sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []:
        with safe_open(f, "pt") as st:
            largest = max([largest, *(math.prod(st.get_slice(k).get_shape()) for k in st.keys())])
    return -(-largest * bytes_per_value // 2**20) + 1


def _timeout_s(v) -> float | None:
    return v.timeout_min * 60.0 if v.timeout_min else None


def _allocation(nnodes: int, stage: str) -> list[str]:
    """The first `nnodes` nodes of this SLURM job's allocation; a clear error when it has fewer."""
    nodes = allocation_nodes()
    if len(nodes) < nnodes:
        raise RuntimeError(f"engine.verl.nnodes is {nnodes}, but this job's allocation has {len(nodes)} node(s) "
                           f"({', '.join(nodes)}): set resources.{stage}.nodes to match")
    return nodes[:nnodes]


# PROBE_PRECISION: the preflight computes in fp32 whatever the job's mixed precision: bf16 rounds differently for
# every micro-batch shape (the gradients of two splits of one batch differ by ~2e-3, relative), which would drown
# the check's tolerance; the bugs it looks for are in the aggregation and the optimizer, not in the precision.


_VERL_STEP = re.compile(r"step:(\d+) - ")  # verl's console logger: `step:N - key:value - key:value ...`
_METRIC = re.compile(r"([\w/@.-]+):(-?[\d.]+(?:e[-+]?\d+)?)")


def verl_output(log: Path, label: str, total: int, shown: dict[str, str]) -> dict:
    """Where a verl trainer's output goes: its log file in the stage's directory (verl, Ray and vLLM print thousands
    of lines a run, verl's whole config among them), not the terminal Snakemake reports on; the job prints a progress
    line of its own from verl's per-step line instead (`shown`: our name -> verl's metric), as the local engine
    does. Keyword arguments of run_supervised."""
    say(f"{label}: verl's output goes to {log}")
    progress = StepProgress(label, total)

    def follow(line: str) -> None:
        m = _VERL_STEP.search(line)
        if m:
            values = dict(_METRIC.findall(line[m.end():]))
            progress.update(int(m[1]), **{ours: float(values[k]) for ours, k in shown.items() if k in values})
    return {"log": log, "follow": follow}


def log_where(log: TrainLog, out_dir: Path) -> dict:
    """What verl's trainer needs to write the stage's tables, live file and tracker points itself (it records the
    steps, in its own process): where the tables go and, when the job has one, the file that holds its tracker run
    (TrackedRun, read back by contract.train_log in verl's processes). A file, not a value in verl's config: the
    run's settings may hold text that OmegaConf would take for an interpolation."""
    where = {"results_root": str(log.results_root), "sweep": log.sweep, "run_id": log.run_id}
    if log.tracked is not None:
        path = Path(out_dir) / TRACKED_RUN
        path.write_text(json.dumps(log.tracked.as_dict()))
        where["tracked"] = str(path)
    return where


class VerlEngine:
    def __init__(self, launch: Callable | None = None):
        self.launch = launch  # a stand-in for verl's run_ppo(config) (tests); None: the real one, supervised

    def integrity_probe(self, stage: SFTStage | RLStage, init_ckpt: Path | None = None, data: Path | None = None, *,
                        accumulate: str | None = None, optimizer: str | None = None) -> VerlProbe | None:
        """The preflight's probe of an SFT stage: verl's SFT trainer with this job's composed config (as sft()
        composes it) on the first rows of its SFT data, run in a torchrun child (preflight.py says why); of a
        mixed-policy RL stage, _mix_probe. Tests plant
        bugs by name ("module:function"; the child imports them): `accumulate` a loss in verl's signature instead
        of sft_loss, `optimizer` f(engine) that changes the engine's optimizer step."""
        if isinstance(stage, RLStage):
            return self._mix_probe(stage, init_ckpt, data, accumulate=accumulate, optimizer=optimizer)
        import pyarrow.parquet as pq
        from omegaconf import OmegaConf
        v = stage.engine.verl
        work = tempfile.TemporaryDirectory(prefix="rlsweep-preflight-")
        root = Path(work.name)
        config = compose(translate_sft(stage, model_path=resolve_model(v.model_path, root),
                                       out_dir=str(root / CHECKPOINT_DIR)),
                         set(v.sft_overrides), SFT)
        ranks = 2 if v.device == "cpu" else v.n_gpus_per_node  # 2 gloo ranks cost little and show a per-rank mean
        micro = config.data.micro_batch_size_per_gpu
        share = config.data.train_batch_size // (v.n_gpus_per_node * v.nnodes)  # the job's rows per rank
        rows = write_sft_data(stage, root / "data", data, limit=probe_rows(share, micro, ranks, 1 << 30))
        written = pq.read_metadata(rows).num_rows
        n = probe_rows(share, micro, ranks, written)
        if n < written:  # fewer rows than the probe wanted: a whole number of them per rank
            rows = write_sft_data(stage, root / "data", data, limit=n)
        config.data.train_files, config.data.train_batch_size = str(rows), n
        config.trainer.n_gpus_per_node, config.trainer.nnodes, config.trainer.resume_mode = ranks, 1, "disable"
        config.engine.mixed_precision = FP32  # PROBE_PRECISION
        config_path = root / "verl_sft.yaml"
        OmegaConf.save(config, config_path, resolve=True)
        run = self._probe_child(v, root, config_path, ranks, {"runner": "sft", "loss": accumulate, "plant": optimizer})
        return VerlProbe(run, n, micro, ranks, workdir=work)

    def _mix_probe(self, stage: RLStage, init_ckpt: Path | None, data: Path | None, *, accumulate: str | None,
                   optimizer: str | None) -> VerlProbe | None:
        """The preflight's probe of a mixed-policy RL stage: the actor of the job's composed PPO config (as rl()
        composes it, from the model it starts from) trained on one planned step of its own prompts and method
        (probe_batch.py), in a torchrun child (preflight.MixRunner). `accumulate` names a mixed loss in verl's
        signature to use instead of ours (tests)."""
        if stage.rl.mix == "none":  # plain GRPO is verl's own loss; the preflight is for SFT and mixed-policy jobs
            return None
        from omegaconf import OmegaConf, open_dict
        from workflow.engines.verl.job.probe_batch import stage_rows
        from workflow.methods.registry import build_mix
        import torch
        v = stage.engine.verl
        work = tempfile.TemporaryDirectory(prefix="rlsweep-preflight-")
        root = Path(work.name)
        model = str(init_ckpt) if init_ckpt else resolve_model(v.model_path, root)
        config = compose(translate(stage, model_path=model, out_dir=str(root / CHECKPOINT_DIR)), set(v.overrides))
        ranks = 2 if v.device == "cpu" else v.n_gpus_per_node
        micro = config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
        rows = stage_rows(stage, model, data, ranks, micro)
        torch.save(rows, root / "rows.pt")
        with open_dict(config):  # what verl's trainer sets before it builds the workers
            config.actor_rollout_ref.actor.optim.total_training_steps = stage.rl.steps
            config.actor_rollout_ref.actor.fsdp_config.mixed_precision = FP32  # PROBE_PRECISION
        config_path = root / "verl_ppo.yaml"
        OmegaConf.save(config, config_path, resolve=True)
        request = {"runner": "mix", "worker_module": WORKER_MODULE, "rows": str(root / "rows.pt"), "loss": accumulate,
                   "plant": optimizer,
                   "mix": {"lam": float(build_mix(stage.rl).lam), "fields": list(MIX_FIELDS)}}
        return VerlProbe(self._probe_child(v, root, config_path, ranks, request), len(rows), micro, ranks,
                         workdir=work)

    @staticmethod
    def _probe_child(v, root: Path, config_path: Path, ranks: int, base: dict) -> Callable[[dict], dict]:
        """run(request) for a VerlProbe: the preflight's torchrun child on `ranks` ranks (preflight.py)."""
        import torch
        env = child_env(v, CPU_MODULE if v.device == "cpu" else "")

        def run(request: dict) -> dict:
            request_path, out = root / "request.json", root / "figures.pt"
            request_path.write_text(json.dumps({**request, **base}))
            argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}", "--standalone",
                    "-m", PREFLIGHT_MODULE, str(config_path), str(request_path), str(out)]
            run_supervised(argv, env, what="the integrity preflight on verl", timeout_s=_timeout_s(v),
                           log=root / "preflight.log")
            return torch.load(out)
        return run

    def sft(self, stage: SFTStage, out_dir: Path, log: TrainLog, data: Path | None = None) -> Path:
        from omegaconf import OmegaConf
        v, out_dir = stage.engine.verl, Path(out_dir)
        rows = write_sft_data(stage, out_dir / "data", data)
        model = resolve_model(v.model_path, out_dir)
        config = compose(translate_sft(stage, model_path=model, train_files=str(rows),
                                       out_dir=str(out_dir / CHECKPOINT_DIR)),
                         set(v.sft_overrides), SFT)
        config_path, log_path = out_dir / "verl_sft.yaml", out_dir / "verl_sft_log.json"
        OmegaConf.save(config, config_path, resolve=True)
        log_path.write_text(json.dumps(log_where(log, out_dir)))
        nodes = _allocation(v.nnodes, "sft") if v.nnodes > 1 else None
        argv = sft_command(config_path, log_path, n_gpus_per_node=v.n_gpus_per_node, nodes=nodes,
                           port=int(os.environ.get("RLSWEEP_TORCH_PORT", "29500")),
                           job_id=os.environ.get("SLURM_JOB_ID", log.run_id))
        env = child_env(v, CPU_MODULE if v.device == "cpu" else "")  # torchrun ranks need only the CPU platform
        run_supervised(argv, env, what="verl's SFT trainer", timeout_s=_timeout_s(v),
                       **verl_output(out_dir / "verl_sft.log", f"sft {log.run_id}", stage.sft.steps,
                                     {"loss": "train/loss"}))
        return self._export(out_dir, log, stage.sft.steps, "sft", model_dir="", base_model=model,
                            verl_log=out_dir / "verl_sft.log")

    def rl(self, stage: RLStage, init_ckpt: Path | None, out_dir: Path, log: TrainLog, data: Path | None = None,
           until: int | None = None) -> Path:
        """`until`: a segment job (workflow/segments.py). verl's loop ends at trainer.total_training_steps, saving a
        checkpoint there, so a segment sets it to its end step; verl resumes from its newest checkpoint by itself
        (resume_mode auto: the segment before's, with the optimizer, the dataloader's position and, in its folder,
        the method's state), and our trainer keeps the optimizer's horizon at rl.steps (controller/trainer.py)."""
        from omegaconf import OmegaConf, open_dict
        out_dir, v = Path(out_dir), stage.engine.verl
        model = str(init_ckpt) if init_ckpt else resolve_model(v.model_path, out_dir)
        train, val = write_rl_data(stage, out_dir / "data", data)
        config = compose(translate(stage, model_path=model, train_files=str(train), val_files=str(val),
                                   out_dir=str(out_dir / CHECKPOINT_DIR)), set(stage.engine.verl.overrides))
        end = stage.rl.steps if until is None else until
        config.trainer.total_training_steps = end
        with open_dict(config.trainer.v1.rlsweep):
            config.trainer.v1.rlsweep.log = log_where(log, out_dir)
        if v.device == "cpu":  # the shared-memory weight sync sends each tensor in one bucket: the largest must fit
            engine = config.actor_rollout_ref.rollout.checkpoint_engine
            engine.update_weights_bucket_megabytes = max(engine.update_weights_bucket_megabytes,
                                                         largest_tensor_mb(model))
        ray = self._start_ray(stage)
        try:
            if self.launch is not None:
                self.launch(config)
            else:
                config_path = out_dir / "verl_ppo.yaml"
                OmegaConf.save(config, config_path)
                run_supervised([sys.executable, "-m", PPO_MODULE, str(config_path)],
                               child_env(v, external_modules(v, stage.rl)),
                               what="verl's PPO trainer", timeout_s=_timeout_s(v),
                               depends_on={f"the Ray worker on node {node}": p for node, p in list(ray.items())[1:]},
                               **verl_output(out_dir / "verl_ppo.log", f"rl {log.run_id}", stage.rl.steps,
                                             {"reward": "critic/score/mean", "entropy": "actor/entropy"}))
        finally:
            for p in ray.values():
                p.terminate()
        return self._export(out_dir, log, stage.rl.steps, "rl", model_dir="actor", base_model=model,
                            verl_log=out_dir / "verl_ppo.log", end=end)

    @staticmethod
    def _export(out_dir: Path, log: TrainLog, steps: int, stage: str, model_dir: str, base_model: str,
                verl_log: Path, end: int | None = None) -> Path:
        """verl's checkpoints -> ours; the one at step `end` (default: the last, `steps`) is the job's result.
        `base_model` is what the stage started from (a LoRA stage's adapter is folded into it). verl's merger prints
        to `verl_log`."""
        end = steps if end is None else end
        with output_to(verl_log, "export of verl's checkpoints (verl's model merger)"):
            exported = export_all(out_dir / CHECKPOINT_DIR, out_dir / CHECKPOINTS,
                                  {"run_id": log.run_id, "stage": stage, "total_steps": steps}, model_dir, base_model)
        final = [p for p in exported if p.name == f"step_{end:06d}"]
        if not final:
            raise RuntimeError(f"verl ended without a checkpoint at step {end} (found: "
                               f"{[p.name for p in exported]}); see the job log")
        return final[0]

    @staticmethod
    def _start_ray(stage: RLStage) -> dict[str, subprocess.Popen]:
        """A multi-node run's Ray cluster (none for one node): node -> its `ray start` process, once every node has
        joined; RAY_ADDRESS points verl's driver at the head."""
        v = stage.engine.verl
        if v.nnodes == 1:
            return {}
        nodes = _allocation(v.nnodes, "rl")
        head = head_address(nodes)
        port = int(os.environ.get("RLSWEEP_RAY_PORT", "6379"))
        # a CPU run's Ray declares what ray.init(num_cpus=16, num_gpus=N) declares on one node (translate.py):
        # verl's bundles ask for 3 CPUs each, and its "GPUs" are logical
        procs = {node: subprocess.Popen(argv) for node, argv in start_commands(
            nodes, head_address=head, port=port, gpus_per_node=v.n_gpus_per_node,
            cpus_per_node=16 if v.device == "cpu" else None)}
        os.environ["RAY_ADDRESS"] = f"{head}:{port}"
        try:
            wait_for_nodes(f"{head}:{port}", len(nodes), procs)
        except BaseException:
            for p in procs.values():
                p.terminate()
            raise
        return procs
