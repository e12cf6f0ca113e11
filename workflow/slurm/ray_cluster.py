"""A Ray cluster across the nodes of one SLURM allocation, for engines that need one (verl).

A multi-node stage job runs once, on the allocation's first node (the executor submits it without srun, see
params.py); from there `start_commands` gives the `ray start` command of every node: the head on the first node
(this one), a worker on each other node, started through `srun --nodes=1 --ntasks=1 -w NODE` so SLURM places and
cleans them up with the job. `RAY_ADDRESS` then points the driver (verl's run_ppo) at the head.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from submitit.slurm.slurm import _parse_node_list


def allocation_nodes(env: dict | None = None) -> list[str]:
    """The hostnames of this SLURM allocation (SLURM_JOB_NODELIST, e.g. 'gpu[01-03],gpu07'); else this host."""
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return _parse_node_list(nodelist) if nodelist else [socket.gethostname()]


def head_address(nodes: list[str], env: dict | None = None) -> str:
    """The IP address Ray's head binds and its workers dial: $RLSWEEP_RAY_HEAD_ADDRESS (an interface of choice, e.g.
    the InfiniBand one), else what the first node's hostname resolves to (`ray start --node-ip-address` wants an
    address, not a name)."""
    env = os.environ if env is None else env
    return env.get("RLSWEEP_RAY_HEAD_ADDRESS") or socket.gethostbyname(nodes[0])


def ray_executable() -> str:
    """The `ray` command of the environment this Python runs in (a job's PATH need not hold the virtualenv's bin:
    sbatch passes the submitting shell's PATH, and an un-activated interpreter has none), else the one on PATH."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.is_file() else "ray"


def start_commands(nodes: list[str], *, head_address: str, port: int = 6379, gpus_per_node: int = 0,
                   cpus_per_node: int | None = None, temp_dir: str | None = None) -> list[tuple[str, list[str]]]:
    """(node, argv) for every node: `ray start --head` on nodes[0], `ray start --address=head` on the others,
    each under `srun` on its own node except the head (which runs where this job runs). --block keeps each
    process in the foreground so SLURM owns it."""
    if not nodes:
        raise ValueError("no nodes to start Ray on")
    # The job's own cluster, inside its allocation: Ray >= 2.5x turns token authentication on for `ray start` as
    # soon as ~/.ray/auth_token exists (any earlier ray.init writes it), while drivers (verl's) default to no auth
    # and are refused. Opt out explicitly so the head's behaviour does not depend on what ran before.
    ray = ["env", "RAY_AUTH_MODE=disabled", ray_executable()]
    common = [f"--num-gpus={gpus_per_node}", "--block", "--disable-usage-stats"]
    if cpus_per_node is not None:
        common.append(f"--num-cpus={cpus_per_node}")
    if temp_dir:
        common.append(f"--temp-dir={temp_dir}")
    out = [(nodes[0], [*ray, "start", "--head", f"--node-ip-address={head_address}", f"--port={port}",
                       "--include-dashboard=false", *common])]
    for node in nodes[1:]:
        out.append((node, ["srun", "--nodes=1", "--ntasks=1", "--overlap", f"--nodelist={node}",
                           *ray, "start", f"--address={head_address}:{port}", *common]))
    return out


# asked in a child process: this process must not become a Ray driver itself (verl's own driver connects later)
_ALIVE = ("import ray; ray.init(address={address!r}, logging_level='ERROR'); "
          "print(sum(n['Alive'] for n in ray.nodes()))")


def wait_for_nodes(address: str, n: int, procs: dict[str, subprocess.Popen], timeout_s: float = 300) -> None:
    """Block until the Ray cluster at `address` has `n` live nodes. RuntimeError naming the node when its `ray start`
    process (`procs`: node -> process) exits first, or when the cluster is still short after `timeout_s`."""
    deadline, alive = time.monotonic() + timeout_s, 0
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    while True:
        for node, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"`ray start` on node {node} exited with status {proc.returncode} before the "
                                   f"Ray cluster formed (ports {address.rsplit(':', 1)[1]} and Ray's worker ports "
                                   "must be open between the job's nodes; its log is above)")
        out = subprocess.run([sys.executable, "-c", _ALIVE.format(address=address)], capture_output=True, text=True,
                             env=env, timeout=120)
        if out.returncode == 0 and out.stdout.strip().isdigit():
            alive = int(out.stdout.strip())
            if alive >= n:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray cluster at {address} has {alive} of {n} nodes after {timeout_s:.0f} s; "
                               f"nodes: {', '.join(procs)}")
        time.sleep(2)
