#!/usr/bin/env python3
"""How close does a verl run cut into segments come to the same run in one job, against one job to itself?
(Issue 61, item 3: a segment job resumes from verl's checkpoint; with seeded rollouts, contract.rollout_seed, it
draws the rollouts the uninterrupted job would have drawn.)

Three arms of the same GRPO run on CPU (verl, vLLM's CPU build, the tiny model `rlsweep:tiny`, the tiny GSM8K
fixture), each by `snakemake` into its own results directory: `one` (one job), `again` (one job, a second time),
`chain` (segments of `--segment` steps: a verl job each, the next resuming from the one before's checkpoint).
Printed, chain against one and again against one:
  rows      the largest difference of each train_steps number over the steps (reward, loss, entropy, response
            length), and the steps whose rows are equal to the last digit
  weights   the final checkpoint's largest absolute difference and the difference's norm relative to the weights'
Verdict: the chain is "as close as one job to itself" when none of its differences exceeds again's by more than
`--slack` (x again's, or 1e-6 where again's is 0).

    python bench/verl_chain.py [--steps 4] [--segment 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow.layout import segment_done, stage_dir, step_dir  # noqa: E402
from workflow.results.catalog import query  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402

SWEEP = """name: verl_chain
base:
  engine:
    name: verl
    verl: {{model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 20}}
  task:
    name: datasets
    datasets: [{{name: gsm8k_train, path: {data}}}]
    template: boxed
  sft: {{enabled: false}}
  rl: {{steps: {steps}, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, lr: 1.0e-3, checkpoint_every: 1,
       micro_batch_size: 16, segment_steps: {segment}}}
  eval: {{benchmarks: [gsm8k], paths: {{gsm8k: {bench}}}, backend: vllm}}
resources: {{rl: {{threads: 2}}}}
"""
NUMBERS = ("reward", "loss", "entropy", "grad_norm", "response_len")


def run_arm(work: Path, name: str, steps: int, segment: int) -> tuple[Path, str, float]:
    """One arm to its last step; (results root, run id, seconds)."""
    sweep = work / f"{name}.yaml"
    sweep.write_text(SWEEP.format(steps=steps, segment=segment, data=REPO / "sweeps/data/tiny_gsm8k_train.jsonl",
                                  bench=REPO / "tests/fixtures/benchmarks/gsm8k.jsonl"))
    [run] = load_sweep(sweep).runs
    results, log = work / name, work / f"{name}.log"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "snakemake", str(segment_done(results, "rl", run.run_id, steps)),
                           "--cores", "2", "--config", f"sweep={sweep}", f"results={results}"], cwd=REPO,
                          stdout=log.open("w"), stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"{name}: snakemake failed; see {log}")
    return results, run.run_id, time.monotonic() - t0


def rows(results: Path, run_id: str) -> list[dict]:
    return query(f"SELECT step, {', '.join(NUMBERS)} FROM train_steps WHERE run_id = '{run_id}' ORDER BY step",
                 results).to_pylist()


def weights(results: Path, run_id: str, steps: int) -> dict:
    from safetensors.torch import load_file
    ckpt = step_dir(stage_dir(results, "rl", run_id) / "checkpoints", steps)
    out = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def compare(a: tuple, b: tuple, steps: int) -> dict[str, float]:
    """The differences of arm b from arm a (each (results, run id))."""
    ra, rb = rows(*a), rows(*b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(1, steps + 1)), (ra, rb)
    out = {n: max(abs(x[n] - y[n]) for x, y in zip(ra, rb)) for n in NUMBERS}
    out["equal steps"] = sum(all(x[n] == y[n] for n in NUMBERS) for x, y in zip(ra, rb))
    wa, wb = weights(*a, steps), weights(*b, steps)
    out["max |dw|"] = max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)
    num = math.sqrt(sum(float(((wa[k].double() - wb[k].double()) ** 2).sum()) for k in wa))
    den = math.sqrt(sum(float((wa[k].double() ** 2).sum()) for k in wa))
    out["|dw| / |w|"] = num / den
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--segment", type=int, default=2)
    p.add_argument("--slack", type=float, default=2.0)
    p.add_argument("--keep", type=Path, help="keep the arms' results here (default: a temporary directory)")
    a = p.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="verl_chain-"))
    work.mkdir(parents=True, exist_ok=True)
    arms = {}
    for name, segment in (("one", 0), ("chain", a.segment), ("again", 0)):
        results, run_id, seconds = run_arm(work, name, a.steps, segment)
        arms[name] = (results, run_id)
        print(f"{name}: {seconds:.0f} s", flush=True)
    chain, again = compare(arms["one"], arms["chain"], a.steps), compare(arms["one"], arms["again"], a.steps)
    print(f"\n{'':16}{'chain vs one':>16}{'again vs one':>16}")
    close = True
    for key in chain:
        print(f"{key:16}{chain[key]:>16.3g}{again[key]:>16.3g}")
        if key != "equal steps":
            close &= chain[key] <= max(a.slack * again[key], 1e-6)
    print(f"\nchain as close as one job to itself (within {a.slack:g}x): {'yes' if close else 'no'}")
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
