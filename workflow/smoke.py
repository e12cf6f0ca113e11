"""`rlsweep smoke SWEEP.yaml`: the sweep's own DAG, shrunk to run in minutes on a login node or a laptop, before it
spends a GPU allocation: every verl model swapped for the tiny local one (`rlsweep:tiny`, verl + vLLM on the CPU),
steps, batches, samples and data cut to a few, one seed, two Optuna trials. Config mistakes, missing datasets and
wiring errors surface the way they would on the cluster; the numbers mean nothing.

What changes (on the raw sweep file, so the smoke sweep reads like the original): name -> <name>-smoke; engine.verl:
model rlsweep:tiny, device cpu, one GPU, one node, its raw overrides dropped (GPU-specific; they were checked
against verl's config when the original loaded); pretrain and sft 4 steps of 8; rl 2 steps of 4 prompts x 4, 32 new
tokens; eval k 2 on 4 problems per benchmark, 32 new tokens, no intermediate evals (vLLM on the CPU for verl runs); a
datasets task at most 64 rows; seeds: the first; optuna: 2 trials, one at a time, no pruner. Grid axes are kept:
a grid over rl.steps still decides rl.steps.
"""

from __future__ import annotations

import copy
from typing import Any

from workflow.engine_api.registry import traits


def smoke_sweep(raw: dict[str, Any], steps: int = 2) -> dict[str, Any]:
    """The smoke version of a sweep file's contents (the YAML mapping)."""
    out = copy.deepcopy(raw)
    out["name"] = f"{raw['name']}-smoke"[:64]
    out["description"] = f"smoke test of {raw['name']}: tiny model, a few steps (workflow/smoke.py)"
    base = out.setdefault("base", {})
    engine = base.setdefault("engine", {})
    sft = base.setdefault("sft", {})
    sft.update(steps=4, batch_size=8, micro_batch_size=None, checkpoint_every=4)
    if "pretrain" in base:  # (off unless a run turns it on: in the base or a grid axis)
        base["pretrain"].update(steps=4, batch_size=8, checkpoint_every=4)
    rl = base.setdefault("rl", {})
    rl.update(steps=steps, prompts_per_step=4, group_size=4, max_new_tokens=32, micro_batch_size=None,
              checkpoint_every=steps)
    ev = base.setdefault("eval", {})
    ev.update(k=2, n_problems=4, max_new_tokens=32, every=None, bootstrap=10)
    traits(engine.get("name", "local")).smoke(engine, ev)  # verl: rlsweep:tiny on the CPU, vLLM's CPU build
    task = base.get("task", {})
    if task.get("name") == "datasets":
        task["limit"] = min(int(task.get("limit") or 64), 64)
    out["seeds"] = list(raw.get("seeds", [0]))[:1]
    if raw.get("optuna"):
        out["optuna"] = {**raw["optuna"], "n_trials": min(int(raw["optuna"].get("n_trials", 2)), 2), "in_flight": 1,
                         "pruner": {"name": "none"}}
    return out
