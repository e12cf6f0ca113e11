"""A SLURM cluster of two nodes on this one machine (scripts/local_slurm.sh --nodes 2): each node a host of its own
(its network namespace and address, its hostname), the controller in a third; a two-node job runs a task on each
node, and a process on one node reaches the other node's address; the Ray cluster a multi-node verl job starts
(workflow/slurm/ray_cluster.py: the head where the job runs, a worker on the other node through srun) has both
nodes, and a driver's tasks run on each; a job whose node dies is retried on the other node (issue 27's retry by
failure reason), and one out of memory retried with more; a verl RL run over both nodes places a trainer rank and a
vLLM server on each, and when node 2's Ray worker is killed it stops, requeues itself and resumes.

Root only (it makes network namespaces); skipped otherwise, unless RLSWEEP_REQUIRE_SLURM=1 (CI). The Ray, node-failure,
out-of-memory and verl tests are `long` (~60 s, ~100 s, ~35 s, ~9 min): on demand, RLSWEEP_LONG_TESTS=1."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO
from workflow.engines.verl.job.process import remove_leaked_segments

# Every test here is a long test since issue 58 took CI under 35 minutes: the two-node cluster's start alone is minutes.
# CI keeps SLURM through the profile on one node (tests/slurm/test_slurm.py: a sweep, a preemption and requeue).
# What the long tests here cover (scripts/long_tests.py --stale: changed since their last pass, they run again):
SLURM_CODE = ["workflow/slurm/", "snakemake_executor_plugin_rlsweep_slurm/", "profiles/slurm/", "scripts/local_slurm.sh",
              "workflow/preemption.py", "workflow/launch.py"]

pytestmark = [pytest.mark.slurm, pytest.mark.serial("slurm"), pytest.mark.slow]
SCRIPT = str(REPO / "scripts" / "local_slurm.sh")

# one task per node: task 0 listens on its node's address, task 1 connects to it (by the hostname SLURM gave it)
TASK = """
import os, socket, time
rank, host = int(os.environ["SLURM_PROCID"]), socket.gethostname()
address = socket.gethostbyname(host)
if rank == 0:
    s = socket.socket(); s.bind((address, 29517)); s.listen(); s.settimeout(60)
    c, peer = s.accept(); print(f"{rank} {host} {address} accepted {c.recv(100).decode()} from {peer[0]}")
else:
    first = os.environ["SLURM_JOB_NODELIST"].replace("rlsw[1-2]", "rlsw1")
    for _ in range(100):
        try:
            c = socket.create_connection((first, 29517), timeout=2); break
        except OSError:
            time.sleep(0.1)
    c.sendall(host.encode()); print(f"{rank} {host} {address} sent to {first}")
"""


# what a multi-node verl stage does before verl's driver starts (VerlEngine._start_ray), then a task per node
RAY_JOB = """
import os, socket, subprocess, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from workflow.slurm.ray_cluster import allocation_nodes, head_address, start_commands
nodes = allocation_nodes()
head = head_address(nodes)
procs = [subprocess.Popen(argv) for _, argv in start_commands(nodes, head_address=head, port=6390, cpus_per_node=1,
                                                              temp_dir="/tmp/rlsw-ray")]
deadline = time.monotonic() + 120
while True:
    try:
        ray.init(address=f"{head}:6390"); break
    except Exception:
        if time.monotonic() > deadline: raise
        time.sleep(1)
while len([n for n in ray.nodes() if n["Alive"]]) < len(nodes) and time.monotonic() < deadline:
    time.sleep(1)
@ray.remote(num_cpus=1)
def where():
    return socket.gethostname(), ray.util.get_node_ip_address()
alive = [n for n in ray.nodes() if n["Alive"]]
ran = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
               for n in alive])
print("RAN", sorted(ran), flush=True)
ray.shutdown()
for p in procs:
    p.terminate()
"""


def cluster(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    why = None if os.geteuid() == 0 and shutil.which("apt-get") and shutil.which("nsenter") else \
        "needs root, apt-get and nsenter"
    if why is None:
        out = cluster("start", "--nodes", "2", timeout=600)
        why = None if out.returncode == 0 else f"local_slurm.sh start --nodes 2 failed:\n{out.stdout}\n{out.stderr}"
    if why:
        if os.environ.get("RLSWEEP_REQUIRE_SLURM") == "1":
            pytest.fail(f"no two-node SLURM cluster: {why}")
        pytest.skip(f"no two-node SLURM cluster: {why}")
    yield
    # a test that failed mid-job leaves its job holding both nodes: the next start's smoke job would queue behind it
    subprocess.run([SCRIPT, "run", "--nodes", "2", "--", "scancel", "--full", "--user", "root"], capture_output=True,
                   timeout=60)
    cluster("stop", "--nodes", "2")


def both_nodes_idle(timeout: float = 90) -> None:
    """A node that died comes back DOWN ("Not responding") until the controller hears its new slurmd, and then only if
    ReturnToService allows: resume it by hand and wait until both nodes take jobs, so a test after the node-death
    test does not queue forever behind ReqNodeNotAvail."""
    deadline = time.monotonic() + timeout
    while True:
        states = dict(line.split() for line in run("sinfo", "-h", "-N", "-o", "%N %t").splitlines())
        if all(state == "idle" for state in states.values()) and len(states) == 2:
            return
        for node, state in states.items():
            if state.rstrip("*~#") in ("down", "drain", "drng", "fail"):
                subprocess.run([SCRIPT, "run", "--nodes", "2", "--", "scontrol", "update", f"nodename={node}",
                                "state=resume"], capture_output=True, timeout=60)
        assert time.monotonic() < deadline, f"the nodes did not come back idle: {states}"
        time.sleep(2)


def run(*cmd: str, cwd: Path | None = None) -> str:
    out = subprocess.run([SCRIPT, "run", "--nodes", "2", "--", *cmd], capture_output=True, text=True, timeout=120,
                         cwd=cwd)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.long(covers=SLURM_CODE)
def test_two_nodes_are_idle_each_with_its_own_address_and_nothing_listens_on_the_machine(two_nodes):
    nodes = run("scontrol", "show", "nodes", "-o").splitlines()
    assert len(nodes) == 2
    for i, line in enumerate(nodes, start=1):
        assert f"NodeName=rlsw{i} " in line and f"NodeAddr=10.77.0.{i + 1} " in line
        assert "State=IDLE" in line and "Gres=gpu:2" in line
    listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
    assert not [line for line in listening.splitlines() if ":6817 " in line or ":6818 " in line], listening
    again = cluster("start", "--nodes", "2")  # idempotent: a healthy cluster is left as it is
    assert again.returncode == 0 and "starting" not in again.stdout, again.stdout


@pytest.mark.long(covers=SLURM_CODE)
def test_a_two_node_job_runs_a_task_on_each_node_and_they_reach_each_other(two_nodes, tmp_path):
    (tmp_path / "task.py").write_text(TASK)
    out = tmp_path / "job.out"
    job = run("sbatch", "--parsable", "-N", "2", "--ntasks-per-node", "1", "-o", str(out), "--wrap",
              f"srun python3 {tmp_path / 'task.py'}", cwd=tmp_path).strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "COMPLETED" not in run("sacct", "-X", "-n", "-j", job, "-o", "State"):
        time.sleep(1)
    lines = sorted(out.read_text().splitlines())
    assert lines == ["0 rlsw1 10.77.0.2 accepted rlsw2 from 10.77.0.3", "1 rlsw2 10.77.0.3 sent to rlsw1"], lines
    assert run("sacct", "-X", "-n", "-P", "-j", job, "-o", "State,NNodes").strip() == "COMPLETED|2"


@pytest.mark.long(covers=SLURM_CODE)
def test_the_ray_cluster_of_a_two_node_job_spans_both_nodes(two_nodes, tmp_path):
    pytest.importorskip("ray")
    (tmp_path / "ray_job.py").write_text(RAY_JOB)
    out = tmp_path / "ray.out"
    # the virtualenv's python, not activated (PATH without its bin): start_commands must find `ray` all the same
    job = run("sbatch", "--parsable", "-N", "2", "-c", "2", "--mem", "4G", "-o", str(out), "--export",
              f"ALL,PYTHONPATH={REPO}", "--wrap", f"{sys.executable} {tmp_path / 'ray_job.py'}", cwd=tmp_path).strip()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not run("sacct", "-X", "-n", "-j", job, "-o", "State").strip().startswith(
            ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")):
        time.sleep(2)
    text = out.read_text()
    ran = [line for line in text.splitlines() if line.startswith("RAN ")]
    assert ran == ["RAN [('rlsw1', '10.77.0.2'), ('rlsw2', '10.77.0.3')]"], text[-3000:]


RETRIED = """
rule all:
    input: "done.txt"
rule work:
    output: "done.txt"
    resources: rlsweep_retry="node_fail=1", slurm_extra="--no-requeue", runtime=5
    # (the job's shell runs with `set -u`, and a first attempt has no RLSWEEP_SLURM_ATTEMPTS)
    shell: "hostname > {output}.try-$SLURM_JOB_ID; echo \\"${{RLSWEEP_SLURM_ATTEMPTS:-}}\\" > {output}.attempts-$SLURM_JOB_ID; "
           "sleep 40; hostname > {output}"
"""


@pytest.mark.long(covers=SLURM_CODE)
def test_a_job_whose_node_dies_is_retried_on_another_node(two_nodes, tmp_path):
    """NODE_FAIL, for real: the node running the job loses every process (slurmd, the job's steps) at once; after
    SlurmdTimeout the controller declares it down and the job NODE_FAIL; the executor resubmits it with that node
    excluded (retry.py), and the same Snakemake job finishes on the other node. (--no-requeue: with SLURM's default
    JobRequeue=1 SLURM would requeue the job itself, under the same id.)"""
    (tmp_path / "Snakefile").write_text(RETRIED)
    proc = subprocess.Popen([SCRIPT, "run", "--nodes", "2", "--", sys.executable, "-m", "snakemake", "--profile",
                             str(REPO / "profiles" / "slurm"), "-d", str(tmp_path), "-s", str(tmp_path / "Snakefile"),
                             "--seconds-between-status-checks", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("done.txt.try-*")) and time.monotonic() < deadline:
            time.sleep(0.5)
        first, = tmp_path.glob("done.txt.try-*")
        node = first.read_text().strip()
        job = first.name.removeprefix("done.txt.try-")
        namespace = f"rlsw-n{node.removeprefix('rlsw')}"
        pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids])  # the node dies: its slurmd, the job's steps, the job
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:  # the script's child (snakemake) too: left running, it holds both nodes
            os.killpg(proc.pid, signal.SIGKILL)
        cluster("start", "--nodes", "2")  # the node's slurmd comes back
        both_nodes_idle()
    assert proc.returncode == 0, out[-3000:]
    other = {"rlsw1": "rlsw2", "rlsw2": "rlsw1"}[node]
    assert re.search(rf"SLURM job {job} \(rlsweep-work\) ended NODE_FAIL on {node}: retry 1 of 1 as SLURM job "
                     rf"(\d+), excluding {node}", out), out[-3000:]
    retry = re.search(r"retry 1 of 1 as SLURM job (\d+)", out)[1]
    assert (tmp_path / "done.txt").read_text().strip() == other
    attempts = json.loads((tmp_path / f"done.txt.attempts-{retry}").read_text())
    assert attempts == [{"job": job, "state": "NODE_FAIL", "node": node}]


OUT_OF_MEMORY = """
rule all:
    input: "done.txt"
rule work:
    output: "done.txt"
    resources: rlsweep_retry="oom=1,mem_factor=4", mem_mb=300, runtime=5
    shell: "echo $SLURM_JOB_ID >> {output}.tries; python3 -c 'x = bytearray(600 * 2**20)'; hostname > {output}"
"""


@pytest.mark.long(covers=SLURM_CODE)
def test_a_job_out_of_memory_is_retried_with_more_memory(two_nodes, tmp_path):
    """OUT_OF_MEMORY, for real where the machine has the cgroup v1 memory controller (the cluster then runs
    task/cgroup): 600 MB in a 300 MB job is killed by the cgroup's OOM handler in its step, SLURM records the job
    FAILED (the batch script saw a failed command), the executor finds the step's OUT_OF_MEMORY and resubmits the
    same Snakemake job with 4x the memory, and it finishes."""
    if "task/cgroup" not in run("scontrol", "show", "config"):
        pytest.skip("this machine's cluster enforces no memory limit (no cgroup v1 memory controller)")
    (tmp_path / "Snakefile").write_text(OUT_OF_MEMORY)
    out = subprocess.run([SCRIPT, "run", "--nodes", "2", "--", sys.executable, "-m", "snakemake", "--profile",
                          str(REPO / "profiles" / "slurm"), "-d", str(tmp_path), "-s", str(tmp_path / "Snakefile"),
                          "--seconds-between-status-checks", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = (tmp_path / "done.txt.tries").read_text().split()
    assert re.search(rf"SLURM job {first} \(rlsweep-work\) ended OUT_OF_MEMORY on rlsw\d: retry 1 of 1 as SLURM job "
                     rf"{second}, memory 300M -> 1200M", out.stderr), out.stderr[-3000:]
    # SLURM records the first job FAILED (its batch script saw a failed command); its step (srun) says why
    assert "OUT_OF_MEMORY" in run("sacct", "-n", "-P", "-j", first, "-o", "State").split()
    assert run("sacct", "-X", "-n", "-P", "-j", second, "-o", "State").split() == ["COMPLETED"]


def _node_of(pid: int, namespaces: dict[int, str]) -> str | None:
    """Which node a process runs on: its network namespace is the node's (local_slurm.sh's rlsw-n1, rlsw-n2)."""
    try:
        return namespaces.get(os.stat(f"/proc/{pid}/ns/net").st_ino)
    except OSError:
        return None


@pytest.mark.long(covers=[*SLURM_CODE, "workflow/engines/verl/"])
@pytest.mark.timeout(1800)  # its own loop allows 1,500 s; it took 10.0 and 10.3 min, at the suite's 600-s limit
def test_a_verl_run_over_two_nodes_places_work_on_both_and_resumes_after_losing_one(two_nodes, tmp_path):
    """sweeps/verl_cpu_two_nodes.yaml through the SLURM profile: one RL job of two nodes, Ray's head on the first,
    a worker on the second (srun), verl told 2 nodes; its trainer ranks and vLLM servers run on both nodes (seen
    from their network namespaces, not from Ray's logs: the nodes share /tmp/ray, so every node's log monitor echoes
    every worker). After the step-10 checkpoint node 2's Ray worker is killed: the job stops within seconds naming
    the node, requeues itself, resumes from its newest checkpoint, and every step is recorded exactly once."""
    psutil = pytest.importorskip("psutil")
    both_nodes_idle()  # whatever ran before: the job needs both nodes
    sweep = tmp_path / "two.yaml"
    sweep.write_text((REPO / "sweeps" / "verl_cpu_two_nodes.yaml").read_text()
                     .replace("sweeps/data/", f"{REPO}/sweeps/data/").replace("tests/fixtures/", f"{REPO}/tests/fixtures/"))
    namespaces = {os.stat(f"/run/netns/rlsw-n{i}").st_ino: f"rlsw{i}" for i in (1, 2)}
    shm_before = {p.name for p in Path("/dev/shm").iterdir()}
    proc = subprocess.Popen([SCRIPT, "run", "--nodes", "2", "--", sys.executable, "-m", "snakemake", "-s",
                             str(REPO / "Snakefile"), "--profile", str(REPO / "profiles" / "slurm"), "-d", str(tmp_path),
                             "--config", f"sweep={sweep}", "--seconds-between-status-checks", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    placed: set[tuple[str, str]] = set()
    killed_at = stopped_after = None
    t0 = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - t0 < 1500:
            for p in psutil.process_iter(["pid", "cmdline"]):
                title = " ".join(p.info["cmdline"] or [])
                for kind in ("WorkerDict", "vLLMHttpServer"):
                    if title.startswith(f"ray::{kind}") and (node := _node_of(p.info["pid"], namespaces)):
                        placed.add((kind, node))
            step10 = list(tmp_path.glob("results/_store/rl/*/verl/global_step_10"))
            if killed_at is None and step10:
                workers = [p for p in psutil.process_iter(["pid", "cmdline"])
                           if "start" in (p.info["cmdline"] or []) and any(a.startswith("--address=")
                                                                           for a in p.info["cmdline"] or [])
                           and _node_of(p.info["pid"], namespaces) == "rlsw2"]
                assert workers, "no Ray worker (`ray start --address=...`) on node 2"
                for p in workers:
                    p.kill()
                killed_at = time.monotonic()
            if killed_at is not None and stopped_after is None:
                logs = "".join(f.read_text(errors="replace") for f in tmp_path.glob(".snakemake/slurm/*/*_log.out"))
                if "lost the Ray worker on node rlsw2" in logs:
                    stopped_after = time.monotonic() - killed_at
            time.sleep(1)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the script's child (snakemake) too: left running, it holds both nodes
            os.killpg(proc.pid, signal.SIGKILL)
        # the killed worker's vLLM shared memory (~0.8 GB): a real node's dies with it, these nodes share this machine's
        remove_leaked_segments(shm_before)
    assert proc.returncode == 0, out[-4000:]
    assert {("WorkerDict", "rlsw1"), ("WorkerDict", "rlsw2"), ("vLLMHttpServer", "rlsw1"),
            ("vLLMHttpServer", "rlsw2")} <= placed, placed
    assert killed_at is not None and stopped_after is not None and stopped_after < 30, (killed_at, stopped_after)
    log = "".join(f.read_text(errors="replace") for f in tmp_path.glob(".snakemake/slurm/*/*_log.out"))
    assert "rlsweep: the stage stopped resumably; requeueing SLURM job" in log
    results = tmp_path / "results"
    rows = subprocess.run([sys.executable, "-m", "workflow.cli", "--results", str(results), "query",
                           "select stage, status, requeue_count, slurm_node from runs where stage = 'rl'", "--format",
                           "json"], capture_output=True, text=True, cwd=REPO)
    rl, = [r for r in json.loads(rows.stdout) if r["status"] == "completed"]
    assert rl["requeue_count"] == 1 and rl["slurm_node"] == "rlsw1", rl  # the job runs on its first node
    steps = subprocess.run([sys.executable, "-m", "workflow.cli", "--results", str(results), "query",
                            "select step, count(*) n from train_steps group by step order by step", "--format",
                            "json"], capture_output=True, text=True, cwd=REPO)
    assert [(r["step"], r["n"]) for r in json.loads(steps.stdout)] == [(s, 1) for s in range(1, 41)]
