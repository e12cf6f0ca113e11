"""Retry by failure reason: what a SLURM job that ended TIMEOUT, OUT_OF_MEMORY or NODE_FAIL is resubmitted with.

A stage's `resources.<stage>.retry` (sweep/spec.py: RetrySettings) travels to the executor as the rule's
`rlsweep_retry` resource, a string (Snakemake resources are ints or strings) that RetryPolicy.decode reads. When a job ends with one of these states and the policy has a
retry left for that reason, the executor submits the same Snakemake job again as a new SLURM job (executor.py), with:
- TIMEOUT: the time limit times `time_factor` (the stage resumes from its newest checkpoint);
- OUT_OF_MEMORY: the memory times `mem_factor` (a policy with oom retries needs resources.<stage>.mem);
- NODE_FAIL: the failed node added to --exclude.
Each count bounds the retries of its reason; other states fail the job as before. The attempts so far reach the new
job in RLSWEEP_SLURM_ATTEMPTS (JSON), which the stage records in its runs row (provenance.py).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, fields
from typing import Any

RETRY_RESOURCE = "rlsweep_retry"  # the rule resource that carries a stage's retry settings to the executor
REASONS = {"TIMEOUT": "timeout", "OUT_OF_MEMORY": "oom", "NODE_FAIL": "node_fail"}
ATTEMPTS_ENV = "RLSWEEP_SLURM_ATTEMPTS"


@dataclass(frozen=True)
class RetryPolicy:
    """A decoded `rlsweep_retry` resource. No resource means the defaults, which are RetrySettings' (the rules leave
    the resource out when a stage keeps them: one resource less per job to plan; tests/slurm/test_slurm_units.py holds
    the two equal)."""

    timeout: int = 0  # retries after TIMEOUT
    oom: int = 0  # retries after OUT_OF_MEMORY
    node_fail: int = 1  # retries after NODE_FAIL
    time_factor: float = 1.5
    mem_factor: float = 2.0

    @classmethod
    def decode(cls, text: str | None) -> RetryPolicy:
        if not text:
            return cls()
        types = {f.name: float if f.type == "float" else int for f in fields(cls)}
        values = dict(part.split("=", 1) for part in str(text).split(","))
        return cls(**{k: types[k](v) for k, v in values.items() if k in types})

    def retries(self, state: str) -> int:
        return getattr(self, REASONS[state]) if state in REASONS else 0

    def next_parameters(self, state: str, node: str | None, attempts: list[dict], params: dict[str, Any]
                        ) -> tuple[dict[str, Any], str] | None:
        """The sbatch parameters of the next attempt after a job that ended in `state` on `node`, and what changed
        (words for the log); None when the policy has no retry left for that reason (or cannot change what failed)."""
        used = sum(1 for a in attempts if a.get("state") == state)
        if used >= self.retries(state):
            return None
        out = {**params, "additional_parameters": dict(params.get("additional_parameters") or {})}
        if state == "TIMEOUT":
            if not params.get("time"):
                return None
            out["time"] = math.ceil(int(params["time"]) * self.time_factor)
            what = f"time limit {params['time']} -> {out['time']} min"
        elif state == "OUT_OF_MEMORY":
            mb = memory_mb(params.get("mem"))
            if mb is None:
                return None
            out["mem"] = f"{math.ceil(mb * self.mem_factor)}M"
            what = f"memory {params['mem']} -> {out['mem']}"
        else:  # NODE_FAIL
            excluded = [n for n in str(out["additional_parameters"].get("exclude", "")).split(",") if n]
            if node:
                excluded = sorted(set(excluded) | set(node.split(",")))
                out["additional_parameters"]["exclude"] = ",".join(excluded)
            what = f"excluding {','.join(excluded) or 'no node (the failed one is unknown)'}"
        return out, what


def with_attempts(params: dict[str, Any], attempts: list[dict]) -> dict[str, Any]:
    """The job script exports the attempts before it so its stage can record them."""
    line = f"export {ATTEMPTS_ENV}={shlex.quote(json.dumps(attempts, separators=(',', ':')))}"
    setup = [s for s in params.get("setup", []) if not s.startswith(f"export {ATTEMPTS_ENV}=")]
    return {**params, "setup": [*setup, line]}


_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)B?$", re.I)


def memory_mb(mem: str | None) -> float | None:
    """sbatch's --mem ('64G', '500M', '1024') in MB."""
    m = _MEM.match(str(mem or "").strip())
    if not m:
        return None
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}[m[2].upper()]
    return float(m[1]) * scale
