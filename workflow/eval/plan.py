"""Which eval jobs a run has: one per (RL checkpoint step, benchmark group).

Steps: every `eval.every` RL steps, and always the final step; step 0 (the model RL starts from) with
`eval.at_start`. Groups: the seeds' math set, the out-of-distribution
set, the extra benchmarks, and the synthetic arithmetic set, so a slow group (32 samples of AIME) never holds up a
fast one and a cluster runs them side by side.
"""

from __future__ import annotations

from workflow.config import EvalConfig, RunConfig
from workflow.benchmarks.catalog import REGISTRY


def eval_groups(ev: EvalConfig) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for b in ev.benchmarks:
        groups.setdefault(REGISTRY[b].group, []).append(b)
    return groups


def eval_steps(cfg: RunConfig) -> list[int]:
    last = cfg.rl.steps
    every = cfg.eval.every
    return sorted({*(range(every, last + 1, every) if every else ()), last, *((0,) if cfg.eval.at_start else ())})


def eval_jobs(cfg: RunConfig) -> list[tuple[int, str]]:
    return [(step, group) for step in eval_steps(cfg) for group in eval_groups(cfg.eval)]
