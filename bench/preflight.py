#!/usr/bin/env python3
"""What does the integrity preflight cost a job? On the local engine, for a sweep's SFT jobs and mixed-policy RL
jobs: the preflight's wall time (probe built from the job's first batch + check) next to one training step of the
same job measured in the same process, and as a share of the whole stage (steps x step time). The goal: a share of
a percent or less, so no one is tempted to switch it off.

    python bench/preflight.py [--sweep sweeps/mixed_policy.yaml] [--steps 5] [--threads 1]

(The verl engine's probe runs verl's SFT trainer in a 2-rank torchrun child: its cost is dominated by starting
that child, ~12 s on 2 CPU cores per SFT job, measured by tests/verl/test_verl_preflight.py's durations.)
"""

from __future__ import annotations

import argparse
import time

import torch

from workflow import preflight
from workflow.engines.local import LocalEngine, adamw, sft_accumulate, sft_batch
from workflow.engines.rl_batch import mixed_closure, rollout
from workflow.engines.tiny_lm import TOKENIZER, build_model
from workflow.methods.registry import build_mix, build_update_rule
from workflow.stages import parse_stage
from workflow.sweep.expand import load_sweep

from update_rules import timed  # bench/update_rules.py: median of repeats after a warm-up (run from bench/ or root)


def sft_step_time(stage, steps: int) -> float:
    sft = stage.sft
    model = build_model(stage.model, TOKENIZER.vocab_size, sft.seed)
    params = list(model.parameters())
    opt = adamw(params, sft.lr, sft.weight_decay)

    def step(i=[0]):
        batch = sft_batch(stage.task, sft.seed, i[0], sft.batch_size)
        i[0] += 1
        opt.zero_grad(set_to_none=True)
        sft_accumulate(model, batch, sft.micro_batch_size)
        opt.step()
    return timed(step, steps)


def rl_step_time(stage, steps: int) -> float:
    rl = stage.rl
    model = build_model(stage.model, TOKENIZER.vocab_size, stage.seed)
    params = list(model.parameters())
    opt, mix, rule = adamw(params, rl.lr, rl.weight_decay), build_mix(rl), build_update_rule(rl)

    def step(i=[0]):
        batch = rollout(model, None, mix, stage.task, rl, stage.seed, i[0], rl.steps)[0]
        i[0] += 1
        rule.step(params, opt, mixed_closure(model, opt, batch, rl, rl.micro_batch_size, {}))
    return timed(step, steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", default="sweeps/mixed_policy.yaml")
    p.add_argument("--steps", type=int, default=5, help="training steps timed per job (median)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    sweep = load_sweep(a.sweep)
    jobs = [("sft", parse_stage("sft", cfg)) for cfg in sweep.configs("sft").values()]
    seen = set()
    for r in sweep.runs:
        if r.config.rl.mix != "none" and r.config.rl.mix not in seen:
            seen.add(r.config.rl.mix)
            jobs.append(("rl", parse_stage("rl", r.stage_config("rl"))))
    engine = LocalEngine()
    print(f"{a.sweep}: preflight vs one training step of the same job (local engine, {a.threads} thread(s))")
    print(f"{'job':<18}{'preflight s':>12}{'step s':>10}{'ratio':>8}{'steps':>7}{'share of stage':>16}")
    for kind, stage in jobs:
        t0 = time.perf_counter()
        result = preflight.check(engine.integrity_probe(stage))
        cost = time.perf_counter() - t0
        step = sft_step_time(stage, a.steps) if kind == "sft" else rl_step_time(stage, a.steps)
        total = stage.sft.steps if kind == "sft" else stage.rl.steps
        name = "sft" if kind == "sft" else stage.rl.method
        print(f"{name:<18}{cost:>12.3f}{step:>10.3f}{cost / step:>8.1f}{total:>7}{cost / (step * total):>15.2%}"
              f"   ({result.as_row()['preflight']})")


if __name__ == "__main__":
    main()
