"""The local engine's traits (workflow/engine_api/traits.py): what the rest of rlsweep asks of the local engine
(workflow/engines/local.py) without importing torch."""

from __future__ import annotations

from workflow.benchmarks.catalog import REGISTRY as BENCHMARKS
from workflow.engine_api.traits import EngineTraits
from workflow.strict import ConfigProblem


class LocalTraits(EngineTraits):
    """The local engine (workflow/engines/local.py): pure torch, tiny character-level models, the arithmetic task."""

    trainer = "workflow.engines.local:LocalEngine"
    trains_in_segments = True  # its resume replays the steps bit for bit (workflow/engines/local.py)
    extends_finished_runs = True  # it resumes from the checkpoints under checkpoints/, which extend links
    pretrains = True  # its tiny models know nothing until trained: the pretrain stage makes a capable base
    lora = True  # peft's LoraConfig (workflow/engines/lora.py)
    integrity_preflight = True
    resumes_preempted = True
    lacks = {"multi_node": "one process on one machine (pure torch, no distributed training): its models are tiny"}

    def check(self, cfg) -> None:
        real = [b for b in cfg.eval.benchmarks if BENCHMARKS[b].group != "arithmetic"]
        if real:
            raise ConfigProblem("eval.benchmarks", f"{real}: the local engine's tiny character-level models can "
                                "only answer the synthetic `arithmetic` set; real benchmarks need a model with a real "
                                "tokenizer (the verl engine)")
        if cfg.task.name == "datasets":
            raise ConfigProblem("task.name", "datasets: the local engine's tiny character-level models only know "
                                "the arithmetic task; real training sets need a model with a real tokenizer (engine "
                                "verl)")
        if cfg.eval.at_start and not cfg.sft.enabled and not cfg.pretrain.enabled:
            raise ConfigProblem("eval.at_start", "the local engine without SFT starts RL from a random initialisation, "
                                "which has no checkpoint to evaluate; enable sft or pretrain, or drop eval.at_start")


LOCAL = LocalTraits()
