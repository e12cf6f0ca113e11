"""What each engine can do, from one source: the boolean traits its EngineTraits declares (workflow/engine_api/traits.py),
the reason it gives for each it lacks (`lacks`), and the methods it cannot train (`lacks_methods`). docs/engines.md
is generated from here (scripts/docs.py); a test requires a reason for every capability an engine lacks."""

from __future__ import annotations

from dataclasses import dataclass

from workflow.engine_api.registry import ENGINES
from workflow.methods.registry import METHODS, in_order


@dataclass(frozen=True)
class Capability:
    """One thing an engine can or cannot do: an EngineTraits boolean, a row of docs/engines.md."""

    trait: str  # the EngineTraits class attribute
    title: str
    meaning: str
    needs: str | None = None  # another capability without which this one means nothing


CAPABILITIES = (
    Capability("trains_in_segments", "segments", "an RL run trains as a chain of segment jobs, each resuming from "
               "the checkpoint the one before wrote; a step's evaluation runs while the next segment trains"),
    Capability("segments_by_default", "segments by default", "without `rl.segment_steps`, a run splits at its "
               "evaluated steps", needs="trains_in_segments"),
    Capability("extends_finished_runs", "extension", "a longer run of a finished run's settings takes its steps and "
               "trains only the new ones"),
    Capability("trains_in_segments", "Optuna pruning", "a trial's runs advance one segment at a time (on an engine "
               "without segments by default: with `rl.segment_steps`); after each evaluation the pruner decides "
               "before the next segment is submitted"),
    Capability("lora", "LoRA", "training through LoRA adapters (`model.lora`)"),
    Capability("integrity_preflight", "integrity preflight", "the checks of the loss and the data before the first "
               "job trains (`rlsweep preflight`)"),
    Capability("resumes_preempted", "preemption resume", "a job killed mid-run resumes from its newest checkpoint "
               "when requeued"),
    Capability("multi_node", "multi-node", "one job trains across several nodes of a SLURM allocation"),
    Capability("pretrains", "pretraining", "it builds a capable base by pretraining its own model (`pretrain`)"),
)


def lacking(engine, cap: Capability) -> bool:
    return not getattr(engine, cap.trait) or (cap.needs is not None and not getattr(engine, cap.needs))


def why_not(engine, cap: Capability) -> str | None:
    """Why the engine lacks the capability (None: it has it, or it states no reason: a structure test fails)."""
    if cap.needs is not None and not getattr(engine, cap.needs):
        return engine.lacks.get(cap.trait) or engine.lacks.get(cap.needs)
    return engine.lacks.get(cap.trait)


def _cell(engine, cap: Capability) -> str:
    return f"no: {why_not(engine, cap) or 'no reason stated'}" if lacking(engine, cap) else "yes"


def markdown() -> str:
    """docs/engines.md: capabilities and methods by engine (the shipped ones: a plug-in installed here is not
    rlsweep's to document)."""
    names = list(ENGINES.builtins)
    engines = [ENGINES.get(n) for n in names]
    head = ["| capability | what it means | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names)]
    rows = [f"| {c.title} | {c.meaning} | " + " | ".join(_cell(e, c) for e in engines) + " |" for c in CAPABILITIES]
    methods = [f"| `{name}` | {card.role} | " + " | ".join(
        f"no: {e.lacks_methods[name]}" if name in e.lacks_methods else "yes" for e in engines) + " |"
        for name, card in in_order() if name in METHODS.builtins]
    return "\n".join([
        "# What each engine can do",
        "",
        "Generated from the engines' traits (`workflow/engines/local_traits.py`, `workflow/engines/verl/traits.py`) by",
        "`python scripts/docs.py`; a test fails when this page is stale or an engine lacks a capability without saying",
        "why. How the local engine and verl run a job: [the verl engine](verl.md), [sweep files](sweeps.md).",
        "",
        *head, *rows,
        "",
        "## Methods",
        "",
        "| method | role | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
        *methods,
        "",
    ])
