#!/usr/bin/env python3
"""What does our seam in verl cost: a GRPO step, and the start of a job, through rlsweep's verl entry against the
same run through verl's stock one? (Issue 64, item 4: the seam at most 2 % of a verl step.)

One GRPO run on CPU (verl 0.9.1, Ray, FSDP2, vLLM's CPU build; the tiny model `rlsweep:tiny` from its seeded random
init, the tiny GSM8K fixture, 4 prompts x 4 rollouts of up to 40 tokens, no checkpoints), in four arms, interleaved
(stock, ours-plain, ours-off, ours-sfpo, stock, ...), each a fresh verl process on its own Ray:
  stock      `python -m verl.trainer.main_ppo` (Hydra, verl's validate_config, TaskRunnerV1) on the config our job
             composed for ours-off less our parts: trainer_mode sync (verl's PPOTrainerSync and stock worker
             classes), verl's single_turn_agent loop, verl's default reward (the rows' data_source set to
             HuggingFaceH4/MATH-500: verl's \\boxed{} math scorer), no trainer.v1.rlsweep section, only the CPU shims
             in VERL_USE_EXTERNAL_MODULES (compat/cpu.py, compat/vllm_compat.py: what verl needs on a CPU at all)
  ours-plain ours-off's run with verl's rollouts and reward (its single_turn_agent loop, its default reward on the
             stock arm's data): the seam alone (our trainer, workers, rows, gates, modules) against stock
  ours-off   our job's own path: VerlEngine.rl composes the config (in a fresh process, timed: `prep`) and its
             child runs controller/ppo.py: RlsweepTrainer, RuleActorRolloutRefWorker, the seeded agent loop, our
             reward (math-verify in a worker process), the train_steps rows; rl.update grpo (one closure + step)
  ours-sfpo  the same with rl.update sfpo (K=3 fast steps + the slow one: 4 backward passes an update, by design)
Every arm's verl processes also import this file (as `verl_seam_stamps`, VERL_USE_EXTERNAL_MODULES; it imports
nothing of verl's itself): in the trainer's process it stamps the wall-clock at the start of fit() and at each step's
Tracking.log (verl's own per-step log call, after everything of the step, our rows included), with the step's
timing_s/* metrics. --poll sets every arm's replay-buffer poll (default 0.05 s): as shipped verl polls every 2 s, which
rounds stock's generation up to whole 2 s (ours polls every 0.2 s, RlsweepTrainer.REPLAY_POLL_S) and would hide the
rest of the seam (as shipped, --poll 0, one run each: stock 3.12 s a step, generation 2.01 s; ours-off 2.37 s, 0.82 s).
Printed per arm: the median seconds a step over steps 2..N of every repeat, by verl's timing_s/step (what verl's step
timer holds), by wall clock between two steps' log calls (all of a step: our train_steps row is written after verl's
timer stops) and in CPU seconds of the run's whole process tree (less disturbed by other jobs than wall clock), each
against stock; the fixed cost: prep (ours: VerlEngine.rl's work before it starts verl, in a fresh process) + start
(launch -> fit(): Ray, workers, vLLM, agent loop) = job start -> first step, and the tree's CPU seconds to fit();
step 1 (warm-up) and last log -> exit; then every phase's median timing_s/* per arm, with "(step, outside its phases)"
(prepare_step: prompts to the rollout; balance) and "(wall, after verl's step timer)" (_compute_metrics, the log).

    python bench/verl_seam.py [--steps 5] [--repeat 3] [--arms stock,ours-plain,ours-off,ours-sfpo] [--poll 0.05] [--threads 2]
                              [--gc] [--profile] [--json FILE] [--keep DIR]

--steps counts verl's steps, the first a warm-up (not measured). --gc logs every full garbage collection of every verl
process and prints their seconds a step by process. --profile writes cProfiles (profiles/ in each run's folder, read
them with pstats; they slow what they profile, so take the figures from a run without): the trainer's fit()
(driver.prof) and, from their second call on, the FSDP worker's update_actor and compute_log_prob and the vLLM
worker's update_weights_from_ipc (one file per method and process). Run it alone: ~8 GB and both cores per run,
~2 min a run (9 runs ~19 min); every run's verl output (verl_ppo.log) stays in --keep.

Measured on 2 quiet cores (issue 64, item 4; 2026-11-30, at ed45774, --gc --repeat 3, arms stock,ours-plain,ours-off):

    a step     steps   verl s  ratio   wall s  ratio    CPU s  ratio   (median; CPU: the run's processes, all cores)
    stock         12    0.943  1.000    0.960  1.000     1.83  1.000
    ours-plain    12    0.931  0.987    0.950  0.989     1.76  0.966
    ours-off      12    0.910  0.965    0.927  0.966     1.78  0.975

    to step 1   prep s  start s  fixed s  ratio   CPU s  ratio  step 1 s  exit s
    stock          0.0     62.2     62.2  1.000    74.7  1.000      16.0     5.2
    ours-plain     3.4     65.3     68.7  1.104    78.5  1.051      16.9     5.3
    ours-off       3.4     65.6     69.0  1.109    78.2  1.047      16.1     5.5

    per run, median wall s/step: stock [0.966, 0.901, 1.182]; ours-plain [0.913, 1.025, 0.95];
                                 ours-off [0.985, 0.938, 0.838]

Reading, and what it took to get there (a full collection at every CPU weight sync; a copy of verl's batch before a
single-pass update; our trainer imported in every verl process): docs/verl.md, "What our seam costs". Before those, on
the same quiet cores: stock 0.948 s a step (already without the collection), ours-off 1.135 s (1.197x).
"""

from __future__ import annotations

import json
import os
import sys
import time

STAMPS_ENV = "RLSWEEP_SEAM_STAMPS"  # the file the stamps go to (set: this module is imported inside verl)
PROFILE_ENV = "RLSWEEP_SEAM_PROFILE"  # a folder: cProfiles of the trainer's fit() and of the workers' calls (--profile)
PROFILED = {"verl.workers.engine_workers": ("ActorRolloutRefWorker", ("update_actor", "compute_log_prob")),
            "verl.workers.rollout.vllm_rollout.utils": ("vLLMColocateWorkerExtension", ("update_weights_from_ipc",))}
GC_ENV = "RLSWEEP_SEAM_GC"  # a file: every full (generation 2) garbage collection of every verl process (--gc)
POLL_ENV = "RLSWEEP_SEAM_POLL"  # seconds: every arm's replay buffer polled this often (see --poll)
STAMPS_MODULE = "verl_seam_stamps"  # the name verl imports this file by (a link to it in the run's work folder)


def _after_import(name: str, hook) -> None:
    """hook(module) once `name` is imported (at once if it is): the stamps import nothing of verl's themselves, so
    they add no import time to any verl process."""
    import importlib.abc
    if name in sys.modules:
        hook(sys.modules[name])
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            for finder in sys.meta_path:
                spec = finder.find_spec(fullname, path, target) if finder is not self and \
                    hasattr(finder, "find_spec") else None
                if spec is not None and spec.loader is not None:
                    run = spec.loader.exec_module

                    def exec_module(module):
                        run(module)
                        hook(module)
                    spec.loader.exec_module = exec_module
                    sys.meta_path.remove(self)
                    return spec
            return None
    sys.meta_path.insert(0, Finder())


def _profiled(method, out: str):
    """`method` under cProfile from its second call on (the first is step 1's, a warm-up), the profile of all those
    calls in the file `out`, rewritten after each."""
    import cProfile
    import functools
    state = {"calls": 0, "prof": None}

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        state["calls"] += 1
        if state["calls"] == 1:
            return method(*args, **kwargs)
        prof = state["prof"] = state["prof"] or cProfile.Profile()
        prof.enable()
        try:
            return method(*args, **kwargs)
        finally:
            prof.disable()
            prof.dump_stats(out)
    return wrapper


def _install_stamps(path: str, profile: str | None, poll: str | None) -> None:
    """In a verl process: stamp fit()'s start (verl builds its Tracking there) and each step's Tracking.log call;
    with `poll`, the replay buffer's poll interval; with `profile` (a folder), cProfiles of the trainer's fit() and of
    the worker calls in PROFILED."""
    prof = None

    def stamp(record: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def tracking(module) -> None:
        cls = module.Tracking
        init, log = cls.__init__, cls.log

        def __init__(self, *args, **kwargs):
            nonlocal prof
            stamp({"event": "fit", "t": time.time(), "pid": os.getpid()})
            init(self, *args, **kwargs)
            if profile:
                import cProfile
                prof = cProfile.Profile()
                prof.enable()  # (the trainer's thread; its first step is in it too: the worker profiles skip theirs)

        def log_(self, data, step, *args, **kwargs):
            stamp({"event": "step", "step": int(step), "t": time.time(),
                   "timing": {k: float(v) for k, v in data.items() if k.startswith("timing_s/")}})
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.path.join(profile, "driver.prof"))
                prof.enable()
            return log(self, data, step, *args, **kwargs)
        cls.__init__, cls.log = __init__, log_

    def replay_buffer(module) -> None:
        cls = module.ReplayBuffer
        init = cls.__init__

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.poll_interval = float(poll)
        cls.__init__ = __init__

    _after_import("verl.utils.tracking", tracking)
    for module_name, (cls_name, methods) in PROFILED.items() if profile else ():
        def wrap(module, cls_name=cls_name, methods=methods):
            cls = getattr(module, cls_name)
            for m in methods:
                setattr(cls, m, _profiled(getattr(cls, m), os.path.join(profile, f"{m}-{os.getpid()}.prof")))
        _after_import(module_name, wrap)
    if poll:
        _after_import("verl.trainer.ppo.v1.replay_buffer", replay_buffer)


def _log_full_collections(path: str) -> None:
    """Every generation-2 garbage collection of this process (automatic or gc.collect()), timed, to `path`: a pause
    of the whole process that grows with the objects it holds, which our modules add to every verl process."""
    import gc
    started = {}

    def callback(phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
            return
        try:
            with open("/proc/self/cmdline", "rb") as f:
                who = f.read().split(b"\0")[0].decode(errors="replace")[:60]
        except OSError:
            who = "?"
        with open(path, "a") as f:
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "who": who,
                                "s": time.perf_counter() - started.get("t", time.perf_counter())}) + "\n")
    gc.callbacks.append(callback)


if __name__ != "__main__" and os.environ.get(STAMPS_ENV):
    _install_stamps(os.environ[STAMPS_ENV], os.environ.get(PROFILE_ENV), os.environ.get(POLL_ENV))
    if os.environ.get(GC_ENV):
        _log_full_collections(os.environ[GC_ENV])


# ------------------------------------------------------------------------------------------------ the bench itself
import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ARMS = ("stock", "ours-plain", "ours-off", "ours-sfpo")
UPDATE = {"ours-plain": "grpo", "ours-off": "grpo", "ours-sfpo": "sfpo"}
REST = "timing_s/(step, outside its phases)"  # prepare_step (prompts to the rollout), balance, the loop's own
AFTER = "(wall, after verl's step timer)"  # _compute_metrics (our train_steps row), dump, TQ clear, the log call
STOCK_SOURCE = "HuggingFaceH4/MATH-500"  # a data source verl's default reward scores by its \boxed{} math rule

SWEEP = """name: verl_seam
base:
  engine:
    name: verl
    verl: {{model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 20,
           overrides: {{trainer.save_freq: -1}}}}
  sft: {{enabled: false}}
  task:
    name: datasets
    datasets: [{{name: gsm8k_train, path: {data}}}]
    template: boxed
  rl: {{steps: {steps}, prompts_per_step: 4, group_size: 4, max_new_tokens: 40, lr: 1.0e-3, micro_batch_size: 16,
       checkpoint_every: {steps}}}
  eval: {{benchmarks: [gsm8k], paths: {{gsm8k: {bench}}}, backend: vllm}}
grid:
  rl.update: [grpo, sfpo]
"""


class _Prepared(Exception):
    """Raised by the stand-in launch: the config is saved, verl is not started here."""


def prepare(sweep: Path, update: str, data: Path, out_dir: Path) -> None:
    """(A child process: `--prepare`.) Our job's VerlEngine.rl up to where it would start verl: the model, the
    data, the composed config saved as the engine saves it; writes launch.json (the modules, the seconds it took)."""
    sys.path.insert(0, str(REPO))
    from omegaconf import OmegaConf
    from workflow.engines.verl import VerlEngine
    from workflow.engines.verl.job.translate import external_modules
    from workflow.results.train_log import TrainLog
    from workflow.stages import parse_stage
    from workflow.sweep.expand import load_sweep
    [run] = [r for r in load_sweep(sweep).runs if r.config.rl.update == update]
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = parse_stage("rl", run.stage_config("rl"))
    saved = {}

    def launch(config):  # what rl() hands verl's run_ppo, saved as rl() saves it before it starts verl
        OmegaConf.save(config, out_dir / "verl_ppo.yaml")
        saved["t"] = time.time()
        raise _Prepared
    t0 = time.time()
    try:
        VerlEngine(launch=launch).rl(stage, None, out_dir, TrainLog(out_dir / "results", "verl_seam", "rl", run.run_id),
                                     data=data)
    except _Prepared:
        pass
    (out_dir / "launch.json").write_text(json.dumps({"prep_s": saved["t"] - t0,
                                                     "modules": external_modules(stage.engine.verl, stage.rl)}))


def plain_rollouts(config, data_dir: Path) -> None:
    """verl's own rollouts and reward in a composed config: its single_turn_agent loop (no per-request seeds) and
    its default reward on the data (the rows' data source made one its \\boxed{} rule scores), written to data_dir."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import open_dict
    data_dir.mkdir(parents=True, exist_ok=True)
    for key in ("train_files", "val_files"):
        copy = data_dir / Path(config.data[key]).name
        if not copy.exists():
            table = pq.read_table(config.data[key])
            table = table.set_column(table.schema.get_field_index("data_source"), "data_source",
                                     pa.array([STOCK_SOURCE] * table.num_rows, pa.string()))
            pq.write_table(table, copy)
        config.data[key] = str(copy)
    with open_dict(config):
        config.actor_rollout_ref.rollout.agent.default_agent_loop = "single_turn_agent"
        config.reward.custom_reward_function.path = None


def stock_config(ours: Path, out: Path, data_dir: Path) -> None:
    """verl's stock run of ours-off's composed config: our trainer, worker, agent loop, reward and section out."""
    from omegaconf import OmegaConf, open_dict
    from workflow.engines.verl.contract import CPU_MODULE, VLLM_COMPAT_MODULE
    config = OmegaConf.load(ours)
    plain_rollouts(config, data_dir)
    with open_dict(config):
        config.trainer.v1.trainer_mode = "sync"
        config.trainer.v1.rlsweep = None
        config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES = \
            f"{CPU_MODULE},{VLLM_COMPAT_MODULE}"
    OmegaConf.save(config, out)


class TreeCPU(threading.Thread):
    """CPU seconds (user + system) of every process below this one (a verl run's whole tree: run_supervised makes
    this process their subreaper), taken when the run's stamps show fit() started, step 1 and step `last` logged
    (the stamps file is read every 20 ms): CPU work a step, which the other jobs of a shared machine disturb far
    less than its wall-clock."""

    def __init__(self, stamps: Path, last: int):
        super().__init__(daemon=True)
        self.stamps, self.last, self.marks, self.stop = stamps, last, {}, threading.Event()

    @staticmethod
    def cpu() -> float:
        import psutil
        total = 0.0
        for p in psutil.Process().children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def run(self) -> None:
        while not self.stop.is_set() and len(self.marks) < 3:
            try:
                text = self.stamps.read_text()
            except OSError:
                text = ""
            for key, seen in (("fit", '"event": "fit"' in text), ("step1", '"step": 1,' in text),
                              ("last", f'"step": {self.last},' in text)):
                if seen and key not in self.marks:
                    self.marks[key] = self.cpu()
            time.sleep(0.02)


def run_arm(arm: str, run_dir: Path, work: Path, v, args) -> dict:
    """One verl run of `arm` in run_dir, supervised as our job supervises verl; its stamps and times."""
    from omegaconf import OmegaConf
    from workflow.engines.verl.contract import CPU_MODULE, VLLM_COMPAT_MODULE
    from workflow.engines.verl.job.engine import child_env
    from workflow.engines.verl.job.process import run_supervised
    run_dir.mkdir(parents=True)
    prep_s = 0.0
    if arm == "stock":
        config_path, modules = run_dir / "stock.yaml", f"{CPU_MODULE},{VLLM_COMPAT_MODULE}"
        shutil.copy(work / "stock.yaml", config_path)
        argv = [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={run_dir}", "--config-name=stock",
                f"hydra.run.dir={run_dir / 'hydra'}", "hydra.output_subdir=null"]
    else:
        subprocess.run([sys.executable, __file__, "--prepare", UPDATE[arm], str(work / "sweep.yaml"),
                        str(work / "data_path"), str(run_dir)], cwd=REPO, check=True,
                       stdout=(run_dir / "prepare.log").open("w"), stderr=subprocess.STDOUT)
        launch = json.loads((run_dir / "launch.json").read_text())
        prep_s, modules = launch["prep_s"], launch["modules"]
        config_path = run_dir / "verl_ppo.yaml"
        argv = [sys.executable, "-m", "workflow.engines.verl.controller.ppo", str(config_path)]
    stamps, profile = run_dir / "stamps.jsonl", run_dir / "profiles"
    extra = {STAMPS_ENV: str(stamps), "PYTHONPATH": str(work / "pypath"), "OMP_NUM_THREADS": str(args.threads)}
    if args.gc:
        extra[GC_ENV] = str(run_dir / "gc.jsonl")
    if args.profile:
        profile.mkdir()
        extra[PROFILE_ENV] = str(profile)
    extra.update({POLL_ENV: str(args.poll)} if args.poll else {})
    config = OmegaConf.load(config_path)  # this run's own folders; the stamps module in every verl process
    config.trainer.default_local_dir = str(run_dir / "verl")
    if arm == "ours-plain":  # our trainer and workers with verl's rollouts and reward: the seam alone against stock
        plain_rollouts(config, work / "stock-data")
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    env_vars.VERL_USE_EXTERNAL_MODULES = f"{modules},{STAMPS_MODULE}"
    for k, value in extra.items():
        env_vars[k] = value
    OmegaConf.save(config, config_path)
    env = child_env(v, f"{modules},{STAMPS_MODULE}")
    env.update(extra)
    tree = TreeCPU(stamps, args.steps)
    tree.start()
    t0 = time.time()
    try:
        run_supervised(argv, env, what=f"verl ({arm})", timeout_s=20 * 60, log=run_dir / "verl_ppo.log")
    finally:
        tree.stop.set()
    t_end = time.time()
    tree.join()
    records = [json.loads(line) for line in stamps.read_text().splitlines()]
    fit = next(r["t"] for r in records if r["event"] == "fit")
    steps = sorted((r for r in records if r["event"] == "step"), key=lambda r: r["step"])
    if [r["step"] for r in steps] != list(range(1, args.steps + 1)):
        raise RuntimeError(f"{arm}: steps logged {[r['step'] for r in steps]}; see {run_dir / 'verl_ppo.log'}")
    wall = [b["t"] - a["t"] for a, b in zip(steps, steps[1:])]
    phases = []
    for r, w in zip(steps[1:], wall):  # verl's phases, what its step timer holds besides them, and what follows it
        p = dict(r["timing"])
        p[REST] = p["timing_s/step"] - sum(v for k, v in p.items() if k not in ("timing_s/step", REST))
        p[AFTER] = w - p["timing_s/step"]
        phases.append(p)
    gc_step = {}
    if args.gc and (run_dir / "gc.jsonl").exists():  # full collections within steps 2..N, seconds a step, by process
        for line in (run_dir / "gc.jsonl").read_text().splitlines():
            g = json.loads(line)
            if steps[0]["t"] < g["t"] <= steps[-1]["t"]:
                gc_step[g["who"]] = gc_step.get(g["who"], 0.0) + g["s"] / len(wall)
    return {"arm": arm, "prep_s": prep_s, "start_s": fit - t0, "gc": gc_step, "step1_s": steps[0]["t"] - fit,
            "exit_s": t_end - steps[-1]["t"], "wall": wall,
            "cpu_start_s": tree.marks.get("fit", math.nan),
            "cpu_step_s": (tree.marks.get("last", math.nan) - tree.marks.get("step1", math.nan)) / len(wall),
            "verl": [r["timing"]["timing_s/step"] for r in steps[1:]], "phases": phases}


def worker_update(pairs: int, update: str, threads: int) -> None:
    """The FSDP worker's update alone, in this process (one gloo rank): verl's TrainingWorker.train_mini_batch
    against our RuleTrainingWorker's (rl.update's rule step, the spec the driver sends), `pairs` interleaved pairs on
    the same batches (16 rollouts of 108 + 40 tokens, one micro-batch, as the runs above) of `rlsweep:tiny`: the
    worker side of the seam without Ray, vLLM or another process's load between the two."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("RLSWEEP_SEAM_PORT", "29611"))
    sys.path[:0] = [str(REPO), str(REPO / "tests" / "support")]
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    import verl_cpu  # the tests' helpers for verl's engine on a CPU: platform, GRPO batches, verl's ppo_loss
    verl_cpu.use_cpu_platform()
    dist.init_process_group("gloo")
    from verl.trainer.config import CheckpointConfig
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from workflow.config import RLConfig
    from workflow.engines.verl.contract import UPDATE_KEY
    from workflow.engines.verl.controller.gates import DriverGates
    from workflow.engines.verl.job.tiny_model import write_tiny_model
    from workflow.engines.verl.workers.actor import RuleTrainingWorker
    from workflow.methods.registry import rule_settings
    folder = Path(tempfile.mkdtemp(prefix="verl_seam-model-"))
    model = write_tiny_model(folder / "tiny")
    rl = RLConfig(update=update)

    def worker(cls):
        w = cls(config=TrainingWorkerConfig(
            model_type="language_model",
            model_config=HFModelConfig(path=str(model), override_config={"attn_implementation": "sdpa"}),
            engine_config=FSDPEngineConfig(strategy="fsdp2", model_dtype="fp32", dtype="float32",
                                           use_torch_compile=False, micro_batch_size_per_gpu=16,
                                           mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32",
                                                            "buffer_dtype": "fp32"}),
            optimizer_config=FSDPOptimizerConfig(lr=rl.lr, clip_grad=rl.max_grad_norm, total_training_steps=10000,
                                                 weight_decay=0.0),
            checkpoint_config=CheckpointConfig()))
        w.reset()
        w.set_loss_fn(verl_cpu.ppo_loss_fn())
        return w
    spec = DriverGates(rule_settings(rl)).before_update(entropy=1.0)  # what the driver hands each update
    arms = {"stock": (worker(TrainingWorker), None), "ours": (worker(RuleTrainingWorker), spec)}
    times = {name: [] for name in arms}
    for i in range(pairs + 2):  # two warm-up pairs
        for name in (list(arms) if i % 2 else list(arms)[::-1]):
            w, sp = arms[name]
            data = verl_cpu.grpo_batch(seed=i, rows=slice(0, 16), micro=16, global_rows=16, prompt_len=108,
                                       response_len=40)
            tu.assign_non_tensor(data, mini_batch_size=16, epochs=1, seed=0, dataloader_kwargs={"shuffle": False})
            if sp is not None:
                tu.assign_non_tensor(data, **{UPDATE_KEY: sp})
            t = time.perf_counter()
            w.train_mini_batch(data)
            if i >= 2:
                times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        print(f"{update} {name:6} median {median(ts) * 1e3:7.1f} ms  min {min(ts) * 1e3:7.1f} ms  n={len(ts)}")
    diffs = [o - s for o, s in zip(times["ours"], times["stock"])]
    print(f"ours - stock, paired: median {median(diffs) * 1e3:+.1f} ms "
          f"({median(diffs) / median(times['stock']) * 100:+.1f} % of stock's median)")
    dist.destroy_process_group()
    shutil.rmtree(folder, ignore_errors=True)


def setup(work: Path, args):
    """The sweep, its data stage (shared by every arm), the stock config (from ours-off's), the stamps module."""
    sys.path.insert(0, str(REPO))
    from workflow.launch import read_done, run_stage
    from workflow.sweep.expand import load_sweep
    (work / "sweep.yaml").write_text(SWEEP.format(steps=args.steps, data=REPO / "sweeps/data/tiny_gsm8k_train.jsonl",
                                                  bench=REPO / "tests/fixtures/benchmarks/gsm8k.jsonl"))
    sweep = load_sweep(work / "sweep.yaml")
    run = sweep.runs[0]
    done = run_stage("data", sweep.name, run.data_id, run.stage_config("data"), results_root=work / "results")
    (work / "data_path").write_text(str(read_done(done)["output_path"]))
    (work / "pypath").mkdir(exist_ok=True)
    link = work / "pypath" / f"{STAMPS_MODULE}.py"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve())
    base = work / "ours-base"
    subprocess.run([sys.executable, __file__, "--prepare", "grpo", str(work / "sweep.yaml"), str(work / "data_path"),
                    str(base)], cwd=REPO, check=True, stdout=(work / "prepare.log").open("w"), stderr=subprocess.STDOUT)
    stock_config(base / "verl_ppo.yaml", work / "stock.yaml", work / "stock-data")
    return sweep.runs[0].config.engine.verl


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(runs: list[dict], arms: list[str]) -> dict:
    by = {a: [r for r in runs if r["arm"] == a] for a in arms}
    out = {}
    for a, rs in by.items():
        out[a] = {"verl_step_s": median([x for r in rs for x in r["verl"]]),
                  "wall_step_s": median([x for r in rs for x in r["wall"]]),
                  "cpu_step_s": median([r["cpu_step_s"] for r in rs]),
                  "run_medians_wall": [round(median(r["wall"]), 3) for r in rs],
                  "prep_s": median([r["prep_s"] for r in rs]), "start_s": median([r["start_s"] for r in rs]),
                  "cpu_start_s": median([r["cpu_start_s"] for r in rs]),
                  "step1_s": median([r["step1_s"] for r in rs]), "exit_s": median([r["exit_s"] for r in rs]),
                  "steps": sum(len(r["wall"]) for r in rs), "runs": len(rs)}
        out[a]["fixed_s"] = out[a]["prep_s"] + out[a]["start_s"]
        keys = sorted({k for r in rs for p in r["phases"] for k in p})
        out[a]["phases"] = {k: median([p[k] for r in rs for p in r["phases"] if k in p]) for k in keys}
    ref = out.get("stock")

    def ratio(a: str, key: str) -> str:
        return f"{out[a][key] / ref[key]:>7.3f}" if ref else f"{'-':>7}"
    print(f"\n{'a step':10}{'steps':>6}{'verl s':>9}{'ratio':>7}{'wall s':>9}{'ratio':>7}{'CPU s':>9}{'ratio':>7}"
          "   (median; CPU: the run's processes, all cores)")
    for a in arms:
        o = out[a]
        print(f"{a:10}{o['steps']:>6}{o['verl_step_s']:>9.3f}{ratio(a, 'verl_step_s')}{o['wall_step_s']:>9.3f}"
              f"{ratio(a, 'wall_step_s')}{o['cpu_step_s']:>9.2f}{ratio(a, 'cpu_step_s')}")
    print(f"\n{'to step 1':10}{'prep s':>8}{'start s':>9}{'fixed s':>9}{'ratio':>7}{'CPU s':>8}{'ratio':>7}"
          f"{'step 1 s':>10}{'exit s':>8}   (start: launch -> fit(); fixed = prep + start)")
    for a in arms:
        o = out[a]
        print(f"{a:10}{o['prep_s']:>8.1f}{o['start_s']:>9.1f}{o['fixed_s']:>9.1f}{ratio(a, 'fixed_s')}"
              f"{o['cpu_start_s']:>8.1f}{ratio(a, 'cpu_start_s')}{o['step1_s']:>10.1f}{o['exit_s']:>8.1f}")
    print("\nper run, median wall s/step: " + "; ".join(f"{a} {out[a]['run_medians_wall']}" for a in arms))
    keys = sorted({k for a in arms for k in out[a]["phases"]}, key=lambda k: -max(out[a]["phases"].get(k, 0)
                                                                                 for a in arms))
    others = [a for a in arms if a != "stock"] if ref else []
    print(f"\n{'median timing_s/* (steps 2..N)':34}" + "".join(f"{a:>11}" for a in arms)
          + "".join(f"{a + '-stock':>16}" for a in others))
    for k in keys:
        line = f"{k.removeprefix('timing_s/'):34}" + "".join(
            f"{out[a]['phases'][k]:>11.3f}" if k in out[a]["phases"] else f"{'-':>11}" for a in arms)
        line += "".join(f"{out[a]['phases'][k] - ref['phases'][k]:>+16.3f}"
                        if k in out[a]["phases"] and k in ref["phases"] else f"{'-':>16}" for a in others)
        print(line)
    whos = sorted({w for r in runs for w in r.get("gc", {})})
    if whos:
        print(f"\n{'full GC s a step (steps 2..N)':34}" + "".join(f"{a:>11}" for a in arms))
        for w in whos + ["(all)"]:
            vals = [median([sum(r["gc"].values()) if w == "(all)" else r["gc"].get(w, 0.0) for r in by[a]])
                    for a in arms]
            print(f"{w[:34]:34}" + "".join(f"{x:>11.3f}" for x in vals))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5, help="verl steps a run, the first a warm-up (default 5)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each arm, interleaved (default 3)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of verl's processes (the rl rule's)")
    p.add_argument("--poll", type=float, default=0.05,
                   help="every arm's replay buffer polled every POLL s (default 0.05; 0: as shipped, verl's 2 s for "
                        "stock, RlsweepTrainer.REPLAY_POLL_S = 0.2 s for ours)")
    p.add_argument("--profile", action="store_true",
                   help="cProfile the trainer's fit() and the workers' update_actor, compute_log_prob and vLLM's "
                        "update_weights_from_ipc (profiles/ in each run's folder; read them with pstats)")
    p.add_argument("--gc", action="store_true",
                   help="log every full garbage collection of every verl process (gc.jsonl in each run's folder) and "
                        "print their seconds a step, by process")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--keep", type=Path, help="keep the runs' folders here (default: a temporary directory)")
    p.add_argument("--worker", type=int, metavar="PAIRS",
                   help="instead of verl runs: the FSDP worker's update alone in this process, verl's against ours "
                        "(rl.update of --update), PAIRS interleaved pairs on --threads threads")
    p.add_argument("--update", default="grpo", help="the rule of --worker's ours (default grpo)")
    p.add_argument("--prepare", nargs=4, metavar=("UPDATE", "SWEEP", "DATA_PATH_FILE", "OUT_DIR"),
                   help=argparse.SUPPRESS)  # the child that times our job's preparation
    a = p.parse_args()
    if a.prepare:
        update, sweep, data, out = a.prepare
        prepare(Path(sweep), update, Path(Path(data).read_text().strip()), Path(out))
        return 0
    if a.worker:
        worker_update(a.worker, a.update, a.threads)
        return 0
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if a.steps < 2 or not set(arms) <= set(ARMS):
        p.error(f"--steps >= 2 (one warm-up), --arms of {ARMS}")
    work = (a.keep or Path(tempfile.mkdtemp(prefix="verl_seam-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    v = setup(work, a)
    runs = []
    for rep in range(a.repeat):
        for arm in arms:
            r = run_arm(arm, work / f"{arm}-{rep}", work, v, a)
            runs.append(r)
            print(f"{arm} #{rep}: start {r['start_s']:.1f} s (prep {r['prep_s']:.1f}), step 1 {r['step1_s']:.1f} s, "
                  f"steps 2..{a.steps} wall {' '.join(f'{x:.2f}' for x in r['wall'])}", flush=True)
    print(f"\n{a.steps - 1} measured steps a run (after a warm-up), {a.repeat} runs an arm; replay buffer polled "
          + (f"every {a.poll:g} s in every arm" if a.poll else "as shipped (stock 2 s, ours 0.2 s)"))
    out = report(runs, arms)
    if a.json is not None:
        a.json.write_text(json.dumps({"summary": out, "runs": runs}, indent=1))
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
