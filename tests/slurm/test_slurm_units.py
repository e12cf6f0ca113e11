"""The SLURM path up to the cluster boundary, on any machine: what gets submitted (sbatch lines), how answers of
squeue/sacct are read, retries on a busy controller, array splitting, the run lock, and the job wrapper's
preemption handling (signal forwarding, requeue cap)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from submitit.slurm.slurm import _make_sbatch_string

from workflow.preemption import PREEMPT_SIGNAL
from workflow.runlock import LOCK_NAME, RunLocked, run_lock
from workflow.slurm import cluster
from workflow.slurm.job import JobCommandFailed, RequeueLimitReached, SnakemakeJob
from workflow.slurm.params import sbatch_parameters
from workflow.sweep.spec import Resources, StageResources

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules


# --------------------------------------------------------------------------------------------- what is submitted
def sbatch_lines(resources, threads=2, **kw) -> set[str]:
    params = sbatch_parameters(resources, job_name="rlsweep-rl-abc", threads=threads, **kw)
    text = _make_sbatch_string(command="python -m x", folder="/tmp/logs/%j", **params)
    return {line for line in text.splitlines() if line.startswith("#SBATCH")}


def test_stage_resources_become_sbatch_options():
    res = StageResources(threads=4, gpus_per_node=2, nodes=1, mem="64G", time="1-02:00:00", partition="gpu",
                         account="lab", qos="high", constraint="a100", exclusive=True,
                         sbatch_extra=["--reservation=abc", "--requeue"]).snakemake_resources()
    lines = sbatch_lines(res, threads=4, partition="fallback", signal_delay_s=120)  # the rule's threads: the stage's
    for want in ("--gpus-per-node=2", "--cpus-per-task=4", "--mem=65536M", "--time=1560", "--partition=gpu",
                 "--account=lab", "--qos=high", "--constraint=a100", "--exclusive", "--reservation=abc",
                 "--requeue", "--nodes=1", "--job-name=rlsweep-rl-abc", "--signal=USR2@120"):
        assert f"#SBATCH {want}" in lines, (want, sorted(lines))
    assert not any("wckey" in line for line in lines)  # clusters that enforce wckeys refuse submitit's default


def test_profile_defaults_fill_what_a_stage_leaves_unset_and_signal_leaves_time_to_train():
    lines = sbatch_lines(StageResources(time="00:10:00").snakemake_resources(), partition="gpu", account="lab",
                         qos="normal", signal_delay_s=300)
    assert {"#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=normal"} <= lines
    assert "#SBATCH --signal=USR2@120" in lines  # at most a fifth of a 10-minute limit before the end
    assert not any("gpus" in line for line in lines)


def test_a_stage_block_changes_only_the_keys_it_names():
    r = Resources.model_validate({"rl": {"time": "02:00:00"}})
    assert r.rl.time == "02:00:00" and r.rl.gpus_per_node == 1  # the RL default GPU is kept
    assert r.sft.time == "12:00:00" and r.sft.threads == 2


def test_arrays_are_split_to_max_array_size():
    assert [len(c) for c in cluster.chunks(7, 3)] == [3, 3, 1]
    assert [list(c) for c in cluster.chunks(2, 1001)] == [[0, 1]]
    with pytest.raises(ValueError):
        cluster.chunks(3, 0)


# ------------------------------------------------------------------------------------------- reading states
def test_squeue_and_sacct_answers_are_read_per_job_and_array_task():
    sq = cluster.parse_squeue("12|RUNNING|node1|None\n13_0|PENDING||BeginTime\n13_1|COMPLETED|node2|None\n")
    assert sq["12"].active and sq["13_0"].active and sq["13_0"].reason == "BeginTime"
    assert sq["13_1"].succeeded and not sq["13_1"].active
    sa = cluster.parse_sacct("14|CANCELLED by 0|0:15|node1\n14.batch|CANCELLED|0:15|node1\n15_2|TIMEOUT|0:0|n\n")
    assert sa["14"].state == "CANCELLED" and "14.batch" not in sa
    assert sa["15_2"].state == "TIMEOUT" and not sa["15_2"].active and not sa["15_2"].succeeded


def test_sacct_usage_sums_every_attempt_of_a_requeued_job_with_its_gpus():
    # `sacct -X -n -P -D`: a job preempted once (its first attempt on 2 GPUs), now running on 1
    usage = cluster.parse_usage("20|REQUEUED|3600|billing=4,cpu=4,gres/gpu=2,mem=8G,node=1\n"
                                "20|RUNNING|1800|billing=2,cpu=2,gres/gpu:a100=1,mem=8G,node=1\n")
    assert usage.attempts == (("REQUEUED", 3600, 2), ("RUNNING", 1800, 1))
    assert usage.elapsed_s == 5400 and usage.gpus == 1 and usage.gpu_hours == pytest.approx(2 + 0.5)
    assert cluster.tres_gpus("cpu=2,mem=1G,node=1") == 0  # a CPU job
    assert cluster.tres_gpus("cpu=2,gres/gpu=4,gres/gpu:a100=4") == 4  # the untyped count, not both
    assert cluster.parse_usage("") is None  # sacct knows nothing of it


@pytest.fixture
def fake_slurm_cmd(tmp_path):
    """A stand-in SLURM command that fails `n` times with `message`, then answers: a real subprocess."""
    def make(n: int, message: str) -> list[str]:
        counter = tmp_path / "calls"
        counter.write_text("0")
        script = tmp_path / "fake_squeue"
        script.write_text(f"#!/bin/sh\nc=$(cat {counter}); echo $((c + 1)) > {counter}\n"
                          f"[ $c -lt {n} ] && {{ echo '{message}' >&2; exit 1; }}\necho '12|RUNNING|n|None'\n")
        script.chmod(0o755)
        return [str(script)]
    make.calls = lambda: int((tmp_path / "calls").read_text())
    return make


def test_a_busy_controller_is_retried_with_backoff(fake_slurm_cmd):
    cmd = fake_slurm_cmd(2, "squeue: error: Socket timed out on send/recv operation")
    slept = []
    assert cluster.run(cmd, retries=4, sleep=slept.append).strip() == "12|RUNNING|n|None"
    assert fake_slurm_cmd.calls() == 3 and slept == [1.0, 2.0]


def test_a_real_error_is_not_retried_and_a_long_outage_gives_up(fake_slurm_cmd):
    cmd = fake_slurm_cmd(5, "sbatch: error: invalid partition specified: nope")
    with pytest.raises(cluster.SlurmError, match="invalid partition") as e:
        cluster.run(cmd, retries=4, sleep=lambda s: None)
    assert not e.value.transient and fake_slurm_cmd.calls() == 1
    cmd = fake_slurm_cmd(9, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(cluster.SlurmError) as e:
        cluster.run(cmd, retries=2, sleep=lambda s: None)
    assert e.value.transient and fake_slurm_cmd.calls() == 3


# ------------------------------------------------------------------------------------------------- run lock
def test_run_lock_refuses_a_live_owner_and_names_it(tmp_path):
    with run_lock(tmp_path, "rl abc") as owner:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
        with pytest.raises(RunLocked, match=rf"rl abc is already running: pid {os.getpid()} on .*{LOCK_NAME}"):
            with run_lock(tmp_path, "rl abc"):
                pass
        assert owner["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()  # released


def test_run_lock_takes_over_from_a_dead_process(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": os.uname().nodename, "pid": dead.pid, "pid_start": "1"}))
    with run_lock(tmp_path, "rl abc") as mine:
        assert json.loads((tmp_path / LOCK_NAME).read_text()) == mine


def test_run_lock_takes_over_from_the_previous_incarnation_of_a_requeued_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "other", "pid": 1, "slurm_job_id": "123",
                                                  "restart_count": 0}))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # same incarnation: not ours to take
    with pytest.raises(RunLocked, match="SLURM job 123"):
        with run_lock(tmp_path, "rl abc"):
            pass
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # we are its requeue: the old one was killed
    with run_lock(tmp_path, "rl abc") as mine:
        assert mine["slurm_job_id"] == "123" and mine["restart_count"] == 1


def test_run_lock_from_another_host_without_slurm_is_kept(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    with pytest.raises(RunLocked, match="delete the lock file"):
        with run_lock(tmp_path, "sft x"):
            pass


@pytest.mark.slow  # waits out a lock's renewal
def test_waiting_for_a_twin_ends_when_it_releases_or_stops_renewing_its_lock(tmp_path, monkeypatch):
    """A second driver's job waits while the stage's owner renews its lock, and refuses once an owner it cannot
    check (another host, no SLURM) has not renewed it for STALE_S seconds of the wait."""
    from workflow import runlock
    monkeypatch.setattr(runlock, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(runlock, "STALE_S", 1.5)
    said = []
    held, release = threading.Event(), threading.Event()

    def twin():
        with run_lock(tmp_path, "sft x"):
            held.set()
            release.wait(10)
    t = threading.Thread(target=twin)
    t.start()
    held.wait(10)
    threading.Timer(2.5, release.set).start()  # longer than STALE_S: only the heartbeat keeps the wait going
    start = time.monotonic()
    runlock.wait_for(tmp_path, "sft x", say=said.append)
    assert 2.0 < time.monotonic() - start < 8 and "waiting for it" in said[0]
    t.join()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "elsewhere", "pid": 1}))  # dead, on a host we cannot see
    with pytest.raises(RunLocked, match="has not renewed it for 2 s"):
        runlock.wait_for(tmp_path, "sft x", say=said.append)


# ---------------------------------------------------------------------------------------------- job wrapper
STAGE_STANDIN = """
import signal, sys, time
def stop(s, f):
    open(sys.argv[1], "w").write("checkpointed")
    sys.exit(75)
signal.signal(signal.SIGUSR2, stop)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""


def test_wrapper_forwards_the_signal_past_the_shell_and_waits_for_the_checkpoint(tmp_path, monkeypatch):
    """As in a SLURM job: __call__ waits on the command in the main thread, the signal arrives there and submitit's
    handler calls checkpoint() on top of that wait. The shell (and Snakemake) between the wrapper and the stage
    ignore the signal; the stage gets it, saves and exits, and checkpoint() sees the exit at once (not at the end of
    its grace period) before handing back the submission that submitit requeues."""
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    marker = tmp_path / "marker"
    (tmp_path / "stage.py").write_text(STAGE_STANDIN)
    job = SnakemakeJob(f"{sys.executable} {tmp_path / 'stage.py'} {marker}; rc=$?; echo shell-survived > "
                       f"{tmp_path}/sh; exit $rc", max_requeues=3, grace_s=60)
    handled = {}

    def handler(signum, frame):  # what submitit's handler does, minus the requeue and exit
        t0 = time.monotonic()
        handled["resubmission"] = job.checkpoint()
        handled["seconds"] = time.monotonic() - t0

    def send_when_ready():
        deadline = time.monotonic() + 30
        while not Path(f"{marker}.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), PREEMPT_SIGNAL)

    previous = signal.signal(PREEMPT_SIGNAL, handler)
    try:
        threading.Thread(target=send_when_ready, daemon=True).start()
        with pytest.raises(JobCommandFailed, match="exited with code 75"):  # fails this incarnation only
            job()
    finally:
        signal.signal(PREEMPT_SIGNAL, previous)
    assert marker.read_text() == "checkpointed"
    assert handled["resubmission"].function is job
    assert handled["seconds"] < 20, f"checkpoint() waited {handled['seconds']:.0f}s for a stage that had exited"
    assert (tmp_path / "sh").read_text().strip() == "shell-survived"  # the shell ignored USR2
    assert "_child" not in job.__getstate__()


def test_wrapper_caps_requeues(monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    with pytest.raises(RequeueLimitReached, match="requeued 4 times, more than max_requeues=3"):
        SnakemakeJob("true", max_requeues=3)()
    # at the limit the job is not requeued: it waits for SLURM to end it (TIMEOUT, which a retry policy can
    # resubmit with more time, or PREEMPTED) instead of failing on its own
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")

    class Held(Exception):
        pass

    def hold(self):
        raise Held
    monkeypatch.setattr(SnakemakeJob, "_hold", hold)
    with pytest.raises(Held):
        SnakemakeJob("true", max_requeues=3).checkpoint()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert SnakemakeJob("true", max_requeues=3).checkpoint() is not None


def test_preempt_signal_matches_submitits():
    from submitit.core.job_environment import JobEnvironment
    from workflow.preemption import PREEMPT_SIGNAL
    assert PREEMPT_SIGNAL == getattr(signal, "SIG" + JobEnvironment.USR_SIG)


# --------------------------------------------------------------------------------------------------- profile
@pytest.mark.slow  # Snakemake dry runs
def test_profile_install_makes_snakemake_profile_slurm_work_from_anywhere(tmp_path):
    from helpers import REPO, run_cli, write_sweep
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    out = run_cli("profile", "install", "--partition", "gpu", "--account", "lab", "--qos", "normal", env=env)
    assert out.returncode == 0, out.stderr
    installed = (tmp_path / "xdg" / "snakemake" / "slurm" / "config.yaml").read_text()
    assert "executor: rlsweep-slurm" in installed
    assert {"rlsweep-slurm-partition: gpu", "rlsweep-slurm-account: lab", "rlsweep-slurm-qos: normal"} <= set(
        installed.splitlines())
    # a different existing profile is never overwritten without --force
    again = run_cli("profile", "install", "--partition", "other", env=env)
    assert again.returncode == 2 and "not overwriting" in again.stderr
    assert (tmp_path / "xdg" / "snakemake" / "slurm" / "config.yaml").read_text() == installed
    # Snakemake finds the profile by name and our executor plugin by module name (a dry run plans, submits nothing)
    work = tmp_path / "elsewhere"
    work.mkdir()
    sweep = write_sweep(work / "s.yaml", "s")
    plan = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--profile", "slurm",
                           "--config", f"sweep={sweep}", "-n"], cwd=work, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert re.search(r"^rl\s+1$", plan.stdout, re.M)


def test_a_multi_node_job_runs_once_on_its_first_node():
    lines = sbatch_lines(StageResources(nodes=4, gpus_per_node=8).snakemake_resources())
    params = sbatch_parameters(StageResources(nodes=4).snakemake_resources(), job_name="j", threads=1)
    text = _make_sbatch_string(command="python -m x", folder="/tmp/logs/%j", **params)
    assert "#SBATCH --nodes=4" in lines and "#SBATCH --ntasks-per-node=1" in lines
    assert "srun" not in text  # the stage starts its own per-node processes (Ray workers)
    single = _make_sbatch_string(command="python -m x", folder="/tmp/logs/%j",
                                 **sbatch_parameters(StageResources().snakemake_resources(), job_name="j", threads=1))
    assert "srun" in single


def test_ray_start_commands_for_an_allocation():
    from workflow.slurm.ray_cluster import allocation_nodes, ray_executable, start_commands
    ray = ray_executable()  # this environment's own `ray`: a job's PATH need not hold the virtualenv
    assert ray == str(Path(sys.executable).parent / "ray") or (ray == "ray" and shutil.which("ray"))
    nodes = allocation_nodes({"SLURM_JOB_NODELIST": "gpu[01-03],big7"})
    assert nodes == ["gpu01", "gpu02", "gpu03", "big7"]
    cmds = start_commands(nodes, head_address="10.0.0.1", port=6380, gpus_per_node=8)
    # RAY_AUTH_MODE=disabled: verl's driver joins whether or not an earlier ray.init wrote ~/.ray/auth_token
    assert cmds[0][0] == "gpu01" and cmds[0][1][:5] == ["env", "RAY_AUTH_MODE=disabled", ray, "start", "--head"]
    assert "--port=6380" in cmds[0][1] and "--num-gpus=8" in cmds[0][1]
    for node, argv in cmds[1:]:
        assert argv[:5] == ["srun", "--nodes=1", "--ntasks=1", "--overlap", f"--nodelist={node}"]
        assert "--address=10.0.0.1:6380" in argv and argv[5:8] == ["env", "RAY_AUTH_MODE=disabled", ray]
    assert [n for n, _ in cmds] == nodes
    assert allocation_nodes({}) == [os.uname().nodename]
    from workflow.slurm.ray_cluster import head_address  # an address, not a hostname: Ray's --node-ip-address
    assert head_address(["localhost"], {}) == "127.0.0.1"
    assert head_address(["gpu01"], {"RLSWEEP_RAY_HEAD_ADDRESS": "10.1.2.3"}) == "10.1.2.3"


@pytest.mark.slow
def test_the_head_command_really_starts_a_ray_cluster_that_a_driver_joins(tmp_path):
    """The generated head command, run here (one node; the GPU count is the only thing a GPU node changes)."""
    pytest.importorskip("ray")
    import socket
    from workflow.slurm.ray_cluster import start_commands
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import tempfile
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's unix socket paths must fit in 107 bytes
    (node, argv), = start_commands(["localhost"], head_address="127.0.0.1", port=port, cpus_per_node=1,
                                   temp_dir=temp)
    head = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        probe = ("import ray, time\n"
                 "for _ in range(120):\n"
                 "    try:\n"
                 f"        ray.init(address='127.0.0.1:{port}'); break\n"
                 "    except Exception: time.sleep(0.5)\n"
                 "print(int(ray.cluster_resources()['CPU']), len(ray.nodes()))\n")
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180)
        assert out.stdout.split()[-2:] == ["1", "1"], out.stderr[-2000:]
    finally:
        head.terminate()  # a --block head stops its Ray processes when it is terminated
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        shutil.rmtree(temp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- retry by reason
def test_a_failed_job_is_resubmitted_by_its_reason_as_its_policy_allows_and_the_attempts_travel_with_it():
    """The executor's decision, up to sbatch (the local cluster's own tests run the real thing): out of memory ->
    the memory doubled, twice at most; node failure -> that node excluded (the memory it has reached stays); time
    limit -> 1.5x the time; any other state, or a spent policy -> the job fails as before. Each resubmission's script
    exports the attempts so far (RLSWEEP_SLURM_ATTEMPTS) for its stage's runs row."""
    import logging
    from types import SimpleNamespace
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
    from workflow.slurm.executor import Executor
    from workflow.slurm.retry import ATTEMPTS_ENV

    resources = StageResources(mem="4G", time="01:00:00", retry={"oom": 2, "timeout": 1}).snakemake_resources()
    job = SimpleNamespace(name="rl", wildcards={}, resources=resources, is_group=lambda: False)
    sent = []

    class Submitter:  # what _retry needs of the executor: the job's parameters, sbatch, a logger
        logger = logging.getLogger("test")
        path_names = [("/tmp", "<tmp>")]  # (capture.path_names: what the kept logs write this machine's paths as)

        def _params(self, job):
            return sbatch_parameters(job.resources, job_name="rl", threads=1)

        def _sbatch(self, jobs, params):
            sent.append(params)
            n = len(sent)
            return [SimpleNamespace(job_id=str(100 + n), paths=SimpleNamespace(stdout=f"/l/{n}", stderr=f"/e/{n}",
                                                                                  result_pickle=f"/r/{n}"))]

    j, ex = SubmittedJobInfo(job, external_jobid="99", aux={}), Submitter()
    retry = lambda state, node=None: Executor._retry(ex, j, cluster.JobState(state, node=node))  # noqa: E731
    assert retry("OUT_OF_MEMORY", "n1") and j.external_jobid == "101" and sent[-1]["mem"] == "8192M"
    assert retry("OUT_OF_MEMORY", "n1") and sent[-1]["mem"] == "16384M"
    assert not retry("OUT_OF_MEMORY", "n1")  # two retries spent: it fails
    assert retry("NODE_FAIL", "n2") and sent[-1]["additional_parameters"]["exclude"] == "n2"
    assert sent[-1]["mem"] == "16384M" and sent[-1]["time"] == 60
    assert not retry("NODE_FAIL", "n3")  # the default: one node-failure retry
    assert retry("TIMEOUT", "n4") and sent[-1]["time"] == 90 and sent[-1]["additional_parameters"]["exclude"] == "n2"
    assert not retry("FAILED", "n4") and not retry("CANCELLED")
    exported = [line for line in sent[-1]["setup"] if line.startswith(f"export {ATTEMPTS_ENV}=")]
    attempts = json.loads(exported[0].split("=", 1)[1].strip("'"))
    assert [(a["job"], a["state"], a["node"]) for a in attempts] == [
        ("99", "OUT_OF_MEMORY", "n1"), ("101", "OUT_OF_MEMORY", "n1"), ("102", "NODE_FAIL", "n2"),
        ("103", "TIMEOUT", "n4")]
    assert j.aux["log"] == Path("/l/4") and j.aux["result"] == Path("/r/4")  # status checks follow the new job


def test_a_job_failed_because_its_step_ran_out_of_memory_is_told_apart():
    # sacct -n -P -o JobID,State: the payload's step (srun) was OOM-killed, the batch script then exited 1
    states = cluster.parse_step_states("47|FAILED\n47.batch|FAILED\n47.extern|COMPLETED\n47.0|OUT_OF_MEMORY\n")
    assert states == ["FAILED", "FAILED", "COMPLETED", "OUT_OF_MEMORY"]
    assert "OUT_OF_MEMORY" not in cluster.parse_step_states("48|FAILED\n48.batch|FAILED\n48.0|FAILED\n")


def test_a_stage_records_the_jobs_its_retries_replaced_and_their_gpu_hours(monkeypatch):
    from workflow import provenance
    from workflow.slurm.retry import ATTEMPTS_ENV
    usage = {"50": cluster.Usage((("RUNNING", 600, 2),)), "40": cluster.Usage((("OUT_OF_MEMORY", 1800, 2),))}
    monkeypatch.setattr(provenance, "job_usage", lambda job, wait_s=0: usage.get(job))
    monkeypatch.setenv("SLURM_JOB_ID", "50")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setenv(ATTEMPTS_ENV, json.dumps([{"job": "40", "state": "OUT_OF_MEMORY", "node": "n1"}]))
    row = provenance.slurm_usage()
    assert row["slurm_attempts"] == 2 and row["slurm_elapsed_s"] == 2400 and row["slurm_gpus"] == 2
    assert row["gpu_hours"] == pytest.approx((600 + 1800) * 2 / 3600)
    assert json.loads(row["slurm_retries"]) == [{"job": "40", "state": "OUT_OF_MEMORY", "node": "n1"}]


def test_an_out_of_memory_retry_needs_a_memory_to_grow(tmp_path):
    from helpers import refusal, write_sweep
    msg = refusal(write_sweep(tmp_path / "r.yaml", "r", "resources:\n  rl: {retry: {oom: 2}}\n"))
    assert "resources.rl" in msg and "retry.oom needs mem" in msg


def test_a_stage_that_keeps_the_default_retry_policy_sends_no_retry_resource_and_gets_the_same_policy():
    """The rules leave `rlsweep_retry` out when a stage keeps the defaults (one resource less per job to plan); the
    executor's policy for a job without it must then be the sweep's default policy, not a weaker one."""
    from workflow.slurm.retry import RETRY_RESOURCE, RetryPolicy
    from workflow.sweep.spec import RetrySettings
    assert RETRY_RESOURCE not in StageResources().snakemake_resources()
    assert RetryPolicy.decode(None) == RetryPolicy.decode(RetrySettings().encode())
    assert RetryPolicy.decode(None).retries("NODE_FAIL") == 1
    changed = StageResources(retry={"node_fail": 0}).snakemake_resources()
    assert RetryPolicy.decode(changed[RETRY_RESOURCE]).retries("NODE_FAIL") == 0


def test_the_executor_leaves_each_stage_job_its_slurm_job_and_final_state_for_watch(tmp_path):
    """What `rlsweep watch` reads to tell a queued job from a pending one and why a SLURM job failed: SLURM.json beside
    the job's DONE file, naming the job last submitted for it (a retry replaces it) and its log, and after the
    executor gave up its final state; the watch's view of the job follows it."""
    import logging
    from types import SimpleNamespace
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
    from workflow.slurm.executor import Executor
    from workflow.watch.jobs import Files, stage_job

    out_dir = tmp_path / "_store" / "rl" / "0123456789ab"
    resources = StageResources(time="01:00:00", retry={"timeout": 1}).snakemake_resources()
    job = SimpleNamespace(name="rl", wildcards={}, resources=resources, is_group=lambda: False,
                          output=[str(out_dir / "DONE_4.json")])
    errors = []

    class Submitter:  # what _retry and _report_failure need of the executor
        logger = logging.getLogger("test")
        path_names = [("/tmp", "<tmp>")]  # (capture.path_names: what the kept logs write this machine's paths as)

        def _params(self, job):
            return sbatch_parameters(job.resources, job_name="rl", threads=1)

        def _sbatch(self, jobs, params):
            return [SimpleNamespace(job_id="202", paths=SimpleNamespace(stdout=str(tmp_path / "202.out"),
                                                                        stderr=str(tmp_path / "202.err"),
                                                                        result_pickle="/r/202"))]

        def report_job_error(self, j, msg, aux_logs):
            errors.append(msg)

    # submitit's logs, in the executor's folder (outside the results)
    for name, text in (("201.out", "first out"), ("201.err", "first err"), ("202.out", "out"), ("202.err", "oom")):
        (tmp_path / name).write_text(text)
    out_dir.mkdir(parents=True)
    j = SubmittedJobInfo(job, external_jobid="201", aux={"log": tmp_path / "201.out", "err": tmp_path / "201.err"})
    ex = Submitter()

    def view(queue):
        return stage_job(out_dir, out_dir / "DONE.json", out_dir / "none.parquet", lambda: queue, Files(), 0.0)

    assert Executor._retry(ex, j, cluster.JobState("TIMEOUT", node="n1"))  # resubmitted as 202
    assert json.loads((out_dir / "SLURM.json").read_text())["job_id"] == "202"
    assert (out_dir / "slurm-201.err").read_text() == "first err"  # the failed attempt's log, kept with its stage
    queued = view({"202": cluster.JobState("PENDING", reason="Resources")})
    # the log named relative to the stage directory: the job's own log there, which the job tees its stderr into
    assert (queued.state, queued.detail, queued.log) == ("queued", "job 202: Resources", str(out_dir / "job.log"))
    assert view({"202": cluster.JobState("RUNNING", node="gpu3")}).detail == "gpu3"
    assert view({}).state == "pending"  # left the queue, no word yet: the executor decides next poll
    Executor._report_failure(ex, j, cluster.JobState("TIMEOUT", node="n2"))  # the policy's one retry is spent
    failed = view({})
    assert (failed.state, failed.detail, failed.log) == ("failed", "TIMEOUT", str(out_dir / "slurm-202.err"))
    assert (out_dir / "slurm-202.err").read_text() == "oom" and (out_dir / "slurm-202.out").read_text() == "out"
    assert str(tmp_path) not in (out_dir / "SLURM.json").read_text()  # no machine path: a copied root still finds it
    assert errors and "SLURM job 202 hit its time limit" in errors[0]
