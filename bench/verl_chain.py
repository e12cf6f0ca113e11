#!/usr/bin/env python3
"""How close does a verl run cut into segments come to the same run in one job, against one job to itself?
(Issue 61, item 3: a segment job resumes from verl's checkpoint; with seeded rollouts, contract.rollout_seed, it
draws the rollouts the uninterrupted job would have drawn.)

Three arms of the same GRPO run on CPU (verl, vLLM's CPU build, the tiny model `rlsweep:tiny`, the tiny GSM8K
fixture), each from the same verl SFT checkpoint (120 steps, trained once: from a random init every reward is 0,
so GRPO's advantages and the update are 0 and the weights prove nothing), each by `snakemake` into its own results
directory (the SFT job's copied in): `one` (one job), `again` (one job, a second time),
`chain` (segments of `--segment` steps: a verl job each, the next resuming from the one before's checkpoint).
Printed, chain against one and again against one:
  rows      the largest difference of each train_steps number over the steps (reward, loss, entropy, response
            length), and the steps whose rows are equal to the last digit
  weights   the final checkpoint's largest absolute difference and the difference's norm relative to the weights'
Verdict: the chain is "as close as one job to itself" when it draws the rollouts one job draws wherever one job
repeats its own (reward and response length differ no more than again's), and each float difference is within
`--slack` x again's or at fp32 noise level (NOISE: two runs of one job differ by 1e-8-1e-6 in a step's numbers and
1e-6-1e-5 in the weights, relative, from one run of this bench to the next).

    python bench/verl_chain.py [--steps 4] [--segment 2] [--unseeded] [--json FILE] [--keep DIR]

The seeded measurement is also a long test with a recorded pass (tests/long/test_verl_chain.py).

Measured on 2 cores (issue 61; 4 GRPO steps of 4 prompts x 4 after 120 verl SFT steps; reward 0.06-0.5 a step):

                  seeded: chain   again     unseeded: chain   again
    reward                0       0                   0.25    0.188
    response_len          0       0                   9.56    6.19
    loss                  6.0e-8  1.5e-8              0.026   0.117
    |dw| / |w|            5.4e-6  9.6e-6              0.038   0.037

Seeded, a chain's rollouts are one job's and what differs is float noise of one job against itself (a second run:
chain 4.8e-6, again 1.2e-6 relative in the weights; the noise itself varies run to run); unseeded, not even one job
repeats itself.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow.layout import done_path, segment_done, stage_dir, step_dir  # noqa: E402
from workflow.results.catalog import query  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402

SWEEP = """name: verl_chain
base:
  engine:
    name: verl
    verl: {{model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 20{overrides}}}
  task:
    name: datasets
    datasets: [{{name: gsm8k_train, path: {data}}}]
    template: boxed
  sft: {{steps: 120, batch_size: 8, micro_batch_size: 8, lr: 3.0e-3, schedule: constant, warmup_ratio: 0.0,
        checkpoint_every: 120}}
  rl: {{steps: {steps}, prompts_per_step: 4, group_size: 4, max_new_tokens: 40, lr: 1.0e-3, checkpoint_every: 1,
       micro_batch_size: 16, segment_steps: {segment}}}
  eval: {{benchmarks: [gsm8k], paths: {{gsm8k: {bench}}}, backend: vllm}}
resources: {{rl: {{threads: 2}}}}
"""
NUMBERS = ("reward", "loss", "entropy", "grad_norm", "response_len")
ROLLOUTS = ("reward", "response_len")  # what differs when the rollouts differ
# fp32 noise: what two runs of one job differ by (multi-threaded reductions), measured 1e-8-1e-6 and 1e-6-1e-5
NOISE = {"loss": 1e-6, "entropy": 1e-6, "grad_norm": 1e-5, "max |dw|": 1e-3, "|dw| / |w|": 1e-5}


# --unseeded: verl's own single-turn loop (vLLM seeded once per job, not per request), what ran before seeding
UNSEEDED = ", overrides: {actor_rollout_ref.rollout.agent.default_agent_loop: single_turn_agent}"


def sweep_file(work: Path, name: str, steps: int, segment: int, unseeded: bool) -> Path:
    sweep = work / f"{name}.yaml"
    sweep.write_text(SWEEP.format(steps=steps, segment=segment, overrides=UNSEEDED if unseeded else "",
                                  data=REPO / "sweeps/data/tiny_gsm8k_train.jsonl",
                                  bench=REPO / "tests/fixtures/benchmarks/gsm8k.jsonl"))
    return sweep


def snakemake(sweep: Path, results: Path, target: Path, log: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "snakemake", str(target), "--cores", "2", "--config",
                           f"sweep={sweep}", f"results={results}"], cwd=REPO, stdout=log.open("a"),
                          stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"snakemake failed; see {log}")


def run_arm(work: Path, name: str, steps: int, segment: int, unseeded: bool) -> tuple[Path, str, float]:
    """One arm's RL run to its last step, from the SFT checkpoint trained once (copied: the arms share their start
    and nothing else); (results root, run id, seconds)."""
    sweep = sweep_file(work, name, steps, segment, unseeded)
    [run] = load_sweep(sweep).runs
    results = work / name
    shutil.copytree(work / "sft", results, symlinks=True)  # (times kept: Snakemake sees the SFT job done)
    t0 = time.monotonic()
    snakemake(sweep, results, segment_done(results, "rl", run.run_id, steps), work / f"{name}.log")
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
    p.add_argument("--unseeded", action="store_true", help="rollouts through verl's own loop, unseeded per request")
    p.add_argument("--json", type=Path, help="also write the figures and the verdict here")
    p.add_argument("--keep", type=Path, help="keep the arms' results here (default: a temporary directory)")
    a = p.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="verl_chain-"))
    work.mkdir(parents=True, exist_ok=True)
    sweep = sweep_file(work, "sft", a.steps, 0, a.unseeded)  # the start every arm shares: verl SFT (torchrun)
    [run] = load_sweep(sweep).runs
    snakemake(sweep, work / "sft", done_path(work / "sft", "sft", run.id_of("sft")), work / "sft.log")
    arms = {}
    for name, segment in (("one", 0), ("chain", a.segment), ("again", 0)):
        results, run_id, seconds = run_arm(work, name, a.steps, segment, a.unseeded)
        arms[name] = (results, run_id)
        print(f"{name}: {seconds:.0f} s", flush=True)
    chain, again = compare(arms["one"], arms["chain"], a.steps), compare(arms["one"], arms["again"], a.steps)
    print(f"\n{'':16}{'chain vs one':>16}{'again vs one':>16}")
    close = True
    for key in chain:
        print(f"{key:16}{chain[key]:>16.3g}{again[key]:>16.3g}")
        if key in ROLLOUTS:
            close &= chain[key] <= again[key]
        elif key in NOISE:
            close &= chain[key] <= max(a.slack * again[key], NOISE[key])
    print(f"\nchain as close as one job to itself (within {a.slack:g}x): {'yes' if close else 'no'}")
    if a.json is not None:
        a.json.write_text(json.dumps({"chain": chain, "again": again, "close": close, "slack": a.slack}, indent=1))
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
