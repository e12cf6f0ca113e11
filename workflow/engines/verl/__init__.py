"""The verl engine: SFT on verl's SFT trainer (torchrun, FSDP2) and RL on verl's PPO trainer (Ray, FSDP2, vLLM
rollouts) running our update rules. One module per piece:

    traits.py        what the rest of rlsweep asks of verl without importing it (workflow/engines/traits.py)
    engine.py        VerlEngine: a stage = data -> verl config -> verl's trainer -> export of its checkpoints
    process.py       verl's trainers as supervised child processes (time limit, nothing left behind)
    ppo.py           the RL stage's verl process (verl's run_ppo on the saved config)
    cpu.py           engine.verl.device cpu: verl's CPU platform and vLLM's CPU build (loaded by verl by name)
    vllm_compat.py   what verl expects of vLLM that our vLLM builds differ in (every device; loaded by name)
    tiny_model.py    rlsweep:tiny, the byte-level tiny model the CPU chain and `rlsweep smoke` run on (the names:
                     workflow/models.py)
    translate.py     our run config -> verl's config keys (no verl import); the module paths verl loads by name
    compose.py       verl's composed config with those keys, and verl's own checks on it (at sweep load)
    data.py          the task as verl's RLHF / SFT parquet, and the reward hook verl calls
    export.py        verl's sharded checkpoints -> our checkpoints/step_N (Hugging Face directories)
    sft_launch.py    the torchrun (and srun) command of SFT;  sft_trainer.py  what it runs on every rank
    preflight.py     the integrity preflight of an SFT or mixed-policy RL stage on verl's own engine (a torchrun
                     child); probe_batch.py the planned RL step it trains on
    gates.py         the driver's gate decisions and the per-update spec the workers follow
    rule_step.py     one update rule step on verl's training engine
    worker.py        inside verl's Ray processes: our TrainingWorker and trainer (VERL_USE_EXTERNAL_MODULES)
    metrics.py       verl's step metrics -> our train_steps rows
    mix_hooks.py     a mixed-policy method (rl.mix) on the driver, around verl's step; mix_batch.py what its rows
                     hold; mix_loss.py the workers' loss; prefix_agent.py Prefix-RFT's agent loop (prefixed rollouts)
    seam.py          every verl symbol the modules above rely on (imports, subclasses, overridden private methods,
                     swaps, patches) with its signature in verl 0.9.1: tests/test_verl_seam.py fails an upgrade with
                     the list of what moved
"""

__all__ = ["VerlEngine"]


def __getattr__(name: str):
    """VerlEngine on first use: importing a light piece (translate, tiny_model) must not import torch through the
    engine (`rlsweep validate` and `rlsweep smoke` read these)."""
    if name == "VerlEngine":
        from workflow.engines.verl.engine import VerlEngine
        return VerlEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
