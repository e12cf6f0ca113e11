"""verl's trainers run as supervised child processes: a non-zero exit fails the stage, a hang is killed at the time
limit, and nothing outlives the child: not its descendants (Ray's daemons), not the shared-memory segments it leaked.
Also the CPU translation (engine.verl.device: cpu) and what is and is not part of a run's identity."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from workflow.config import RunConfig
from workflow.engines.verl.job.process import remove_leaked_segments, run_supervised
from workflow.stages import stage_config
from workflow.identity import stable_id

SHM = Path("/dev/shm")
pytestmark = [pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm"), pytest.mark.serial("verl")]

# a child that leaks a shared-memory segment, starts a grandchild in its own session, records its pid, then
# sleeps (or exits with a status)
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    name, pidfile, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    open('/dev/shm/' + name, 'wb').write(b'x' * 1024)
    grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
    open(pidfile, 'w').write(str(grandchild.pid))
    if code >= 0:
        sys.exit(code)
    time.sleep(600)
""")


def child(tmp_path, code: int) -> tuple[list[str], str, Path]:
    name, pidfile = f"rlsweep-test-{uuid.uuid4().hex}", tmp_path / "grandchild.pid"
    return [sys.executable, "-c", CHILD, name, str(pidfile), str(code)], name, pidfile


def test_a_hung_child_is_killed_at_its_time_limit_with_everything_it_started(tmp_path):
    argv, name, pidfile = child(tmp_path, -1)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="ran longer than its time limit"):
        run_supervised(argv, dict(os.environ), what="the test child", timeout_s=3)
    assert time.monotonic() - t0 < 30
    assert not psutil.pid_exists(int(pidfile.read_text())) or \
        psutil.Process(int(pidfile.read_text())).status() == psutil.STATUS_ZOMBIE
    assert not (SHM / name).exists()  # leaked by the child, mapped by no one: removed


def test_a_failing_child_fails_the_stage_and_leaves_nothing(tmp_path):
    argv, name, pidfile = child(tmp_path, 3)
    with pytest.raises(RuntimeError, match="the test child exited with status 3"):
        run_supervised(argv, dict(os.environ), what="the test child")
    assert not psutil.pid_exists(int(pidfile.read_text())) or \
        psutil.Process(int(pidfile.read_text())).status() == psutil.STATUS_ZOMBIE
    assert not (SHM / name).exists()


def test_a_child_whose_dependency_dies_is_stopped_resumably_naming_it(tmp_path):
    """A multi-node run's trainer depends on each other node's Ray worker: when one ends, the trainer is stopped
    within seconds (not at Ray's own timeouts) with a Resumable error that names the node."""
    from workflow.preemption import Resumable
    argv, name, pidfile = child(tmp_path, -1)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    t0 = time.monotonic()
    with pytest.raises(Resumable, match=r"the test child lost the Ray worker on node n2 \(its process exited with "
                                        r"status 0\) and was stopped"):
        run_supervised(argv, dict(os.environ), what="the test child",
                       depends_on={"the Ray worker on node n2": worker})
    assert time.monotonic() - t0 < 15
    assert not psutil.pid_exists(int(pidfile.read_text())) or \
        psutil.Process(int(pidfile.read_text())).status() == psutil.STATUS_ZOMBIE
    assert not (SHM / name).exists()


def test_segments_another_process_still_maps_are_kept(tmp_path):
    import mmap
    before = {p.name for p in SHM.iterdir()}
    name = f"rlsweep-test-{uuid.uuid4().hex}"
    path = SHM / name
    path.write_bytes(b"y" * 4096)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 4096):  # a live mapping: another job's segment
        assert name not in remove_leaked_segments(before)
        assert path.exists()
    assert remove_leaked_segments(before) == [name] and not path.exists()


# another job's process on the node: a named semaphore as vLLM makes them (spawn start method: its workers open it
# by name later; glibc maps a temporary file and links it to that name) and a segment created but not mapped yet
HOLDER = textwrap.dedent("""
    import multiprocessing, os, sys
    sem = multiprocessing.get_context('spawn').Semaphore(1)
    fd = os.open('/dev/shm/' + sys.argv[1], os.O_CREAT | os.O_RDWR)
    print('ready', flush=True)
    sys.stdin.read()
""")


def test_another_jobs_named_semaphores_and_open_segments_are_kept():
    import subprocess
    name = f"rlsweep-test-{uuid.uuid4().hex}"
    before = {p.name for p in SHM.iterdir()}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        theirs = {p.name for p in SHM.iterdir()} - before
        assert name in theirs and any(n.startswith("sem.") for n in theirs)
        assert not theirs & set(remove_leaked_segments(before))  # a job ending next to it removes none of them
        assert all((SHM / n).exists() for n in theirs)
    finally:
        holder.communicate("")
    assert name in remove_leaked_segments(before)  # its process gone, the segment it left is a leak


# the vLLM CPU worker's end of a weight sync (compat/cpu.py): a bucket's segment closed at once when no view of it is
# left, a view kept by a reference cycle collected first (and the worker's objects frozen once, so that the next
# collections walk only what a step made), and a segment still viewed left mapped for its sender to unlink
SYNC_END = textwrap.dedent("""
    import gc, logging, sys
    from multiprocessing import shared_memory
    import torch
    from workflow.engines.verl.compat import cpu
    handler = logging.StreamHandler(sys.stdout)
    cpu.log.addHandler(handler)
    gc.disable()  # only the collections close() asks for
    full = []
    gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))

    def bucket():
        shm = shared_memory.SharedMemory(create=True, size=64)
        return shm, torch.frombuffer(shm.buf[:64], dtype=torch.uint8)

    def close(shm):
        before = len(full)
        cpu.LenientSharedMemory(shm).close()
        shm.unlink()
        return len(full) - before

    shm, buf = bucket()
    weight = buf[8:16].view(torch.int64).clone()  # loaded: a copy
    del buf
    print("freed", close(shm), gc.get_freeze_count() > 0)
    shm, buf = bucket()
    cycle = [buf[8:16].view(torch.int64)]
    cycle.append(cycle)
    del buf, cycle
    print("cycle", close(shm), gc.get_freeze_count() > 0)
    shm, buf = bucket()
    kept = buf[:8]
    del buf
    print("kept", close(shm), int(kept.fill_(7).sum()))  # still mapped: the view reads and writes
""")


def test_a_cpu_weight_sync_closes_its_bucket_collecting_only_when_a_cycle_holds_a_view():
    pytest.importorskip("verl")
    out = subprocess.run([sys.executable, "-c", SYNC_END], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith(("freed", "cycle", "kept", "rlsweep"))]
    assert lines == ["freed 0 False",  # no collection at all: the common case
                     "cycle 1 True",  # one, then closed; what lived then is frozen
                     "rlsweep cpu: a shared-memory weight bucket is still referenced; left mapped",
                     "kept 1 56"], out.stdout


def test_a_cpu_runs_verl_processes_let_mkl_follow_their_openmp_threads(monkeypatch):
    """vLLM's CPU worker pins itself to one core and sets OMP_NUM_THREADS=1; Snakemake sets MKL_NUM_THREADS to the
    rule's threads, which MKL obeys first: two MKL threads on one core made rollouts ~40x slower. A CPU run's verl
    children do not inherit it (then MKL follows OMP_NUM_THREADS); a GPU run's keep the whole environment."""
    from workflow.engines.verl.job.engine import child_env
    from workflow.config import VerlSettings
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    cpu = child_env(VerlSettings(model_path="m", device="cpu"), "mod")
    assert "MKL_NUM_THREADS" not in cpu and cpu["OMP_NUM_THREADS"] == "2" and cpu["VLLM_TARGET_DEVICE"] == "cpu"
    cuda = child_env(VerlSettings(model_path="m"), "mod")
    assert cuda["MKL_NUM_THREADS"] == "2" and cuda["VERL_USE_EXTERNAL_MODULES"].startswith("mod")


def test_a_one_node_run_starts_its_own_ray_whatever_cluster_the_machine_last_started(monkeypatch, tmp_path):
    """Ray's ray.init() without an address joins the cluster recorded by the machine's last `ray start`
    (ray_current_cluster in Ray's temp dir), alive or not: a multi-node job's head that ran on this node before, or a
    user's own cluster, made the next one-node verl job fail. Its processes get RAY_ADDRESS=local, which Ray reads as
    "start a new local instance"; a multi-node run keeps the head address _start_ray set."""
    pytest.importorskip("ray")
    from ray._private.services import canonicalize_bootstrap_address
    from workflow.config import VerlSettings
    from workflow.engines.verl.job.engine import child_env
    (tmp_path / "ray_current_cluster").write_text("10.77.0.2:6379")  # what a `ray start --head` leaves behind
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert canonicalize_bootstrap_address(None, str(tmp_path)) == "10.77.0.2:6379"  # Ray's default: join it
    one = child_env(VerlSettings(model_path="m", device="cpu"), "mod")
    monkeypatch.setenv("RAY_ADDRESS", one["RAY_ADDRESS"])
    assert canonicalize_bootstrap_address(None, str(tmp_path)) is None  # ours: start a new local instance
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")  # set by _start_ray for a two-node run
    assert child_env(VerlSettings(model_path="m", nnodes=2), "mod")["RAY_ADDRESS"] == "10.0.0.9:6379"


def test_cpu_runs_translate_to_verls_cpu_settings_and_device_is_part_of_the_id():
    pytest.importorskip("verl")
    from workflow.engines.verl.job.compose import compose, validate
    from workflow.engines.verl.contract import CPU_MODULE, ROLLOUTS_MODULE, VLLM_COMPAT_MODULE
    from workflow.engines.verl.job.translate import translate, translate_sft
    base = {"engine": {"name": "verl", "verl": {"model_path": "m", "device": "cpu"}},
            "rl": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 32}}
    cfg = RunConfig.model_validate(base)
    validate(cfg)  # verl's own checks accept the CPU keys
    config = compose(translate(cfg), set())
    assert config.trainer.device == "cpu" and config.actor_rollout_ref.rollout.enforce_eager is True
    # seeded rollouts: a CPU generator cannot be rewound after a chunk's discarded sample (vLLM's engine would die)
    assert config.actor_rollout_ref.rollout.enable_chunked_prefill is False
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "rlsweep_seeded"
    assert config.actor_rollout_ref.rollout.max_model_len == 1024 + 32 and config.ray_kwargs.ray_init.num_gpus == 1
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    # what every verl process imports: not our trainer nor our workers (Ray imports them where they run)
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{CPU_MODULE},{VLLM_COMPAT_MODULE},{ROLLOUTS_MODULE}"
    # a method's own verl module joins them only when the run selects the method (Prefix-RFT's agent loop)
    prefix = compose(translate(RunConfig.model_validate({**base, "rl": {**base["rl"], "mix": "prefix_rft"},
                                                         "sft": {"enabled": False}})), set())
    assert prefix.ray_kwargs.ray_init.runtime_env.env_vars["VERL_USE_EXTERNAL_MODULES"].split(",")[-1] == \
        "workflow.methods.prefix_rft.verl"
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    assert translate_sft(cfg)["engine.dtype"] == "float32"
    raw = RunConfig.model_validate({**base, "engine": {"name": "verl", "verl": {
        "model_path": "m", "device": "cpu", "overrides": {"actor_rollout_ref.rollout.max_model_len": 4096}}}})
    assert compose(translate(raw), set(raw.engine.verl.overrides)).actor_rollout_ref.rollout.max_model_len == 4096
    cuda = RunConfig.model_validate({**base, "engine": {"name": "verl", "verl": {"model_path": "m"}}})
    assert "trainer.device" not in translate(cuda)
    for stage in ("sft", "rl", "eval"):
        assert stable_id(stage_config(cfg, stage)) != stable_id(stage_config(cuda, stage))
    limited = RunConfig.model_validate({**base, "engine": {"name": "verl", "verl": {
        "model_path": "m", "device": "cpu", "timeout_min": 5}}})
    for stage in ("sft", "rl", "eval"):  # the time limit changes no result
        assert stable_id(stage_config(limited, stage)) == stable_id(stage_config(cfg, stage))


# what verl's trainer prints: a progress bar (carriage returns), its per-step console line, a config dump
VERL_LIKE = textwrap.dedent("""
    import sys, time
    print({"actor_rollout_ref": {"actor": {"ppo_epochs": 1}}})
    for step in (1, 2, 3):
        print(f"Epoch 1/1: {step}/3 [00:00<00:01]", end="\\r", flush=True)
        print(f"step:{step} - perf/cpu_memory_used_gb:2.0 - critic/score/mean:{step / 10} - actor/entropy:1.5e-01")
        sys.stdout.flush()
        time.sleep(0.3)
    sys.exit(int(sys.argv[1]))
""")


def test_a_verl_trainers_output_goes_to_its_log_and_its_steps_to_the_progress_line(tmp_path, capsys):
    """Before: verl's ~1,500 lines a run (its whole config, Ray's and vLLM's chatter) went to the terminal Snakemake
    reports on. Now to the stage's log file, each attempt appended; the job prints its own progress from verl's step
    lines; a failure names the last attempt's end."""
    from workflow.engines.verl.job.engine import verl_output
    log = tmp_path / "verl_ppo.log"
    run_supervised([sys.executable, "-c", VERL_LIKE, "0"], dict(os.environ), what="verl's PPO trainer",
                   **verl_output(log, "rl abc", 3, {"reward": "critic/score/mean", "entropy": "actor/entropy"}))
    shown = capsys.readouterr()
    assert "ppo_epochs" not in shown.out + shown.err and f"rl abc: verl's output goes to {log}" in shown.err
    assert "rl abc 3/3 (100%) reward=0.3 entropy=0.15" in " ".join(shown.err.split())
    with pytest.raises(RuntimeError, match="exited with status 3") as failed:
        run_supervised([sys.executable, "-c", VERL_LIKE, "3"], dict(os.environ), what="verl's PPO trainer",
                       **verl_output(log, "rl abc", 3, {"reward": "critic/score/mean"}))
    text = log.read_text()
    assert text.count("==== ") == 2 and text.count("{'ppo_epochs': 1}") == 2  # the first attempt's output kept
    assert str(failed.value).count("step:3") == 1  # the end of the last attempt only
