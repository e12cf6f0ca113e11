"""The verl engine: SFT on verl's SFT trainer (torchrun, FSDP2) and RL on verl's PPO trainer (Ray, FSDP2, vLLM
rollouts) running our update rules. Split by where the code runs:

    traits.py   what the rest of rlsweep asks of verl without importing it (workflow/engine_api/traits.py)
    contract.py what the sides below share, with no verl import: our section of verl's config and its reader, the
                modules verl loads by name, the mixed-loss batch fields, the preflight's request, vLLM's CPU env.
                The sides import it and never one another (tests/unit/core/test_structure.py)
    driver/     the stage job: VerlEngine (engine.py), run config -> verl's keys (translate.py, no verl import) and
                verl's composed config (compose.py), the task as verl's parquet (data.py), verl's trainers as
                supervised children (process.py, sft_launch.py), checkpoint export (export.py), rlsweep:tiny
                (tiny_model.py), the integrity preflight's probe and its planned batch (probe.py, probe_batch.py)
    inside/     loaded by verl by name in its own processes: the RL process (ppo.py), our trainer and workers
                (worker.py), rule gates and mixed-policy hooks on verl's driver (gates.py, mix_hooks.py), the workers'
                losses and steps (mix_loss.py, rule_step.py), metrics rows (metrics.py), the reward (reward.py), the
                SFT trainer (sft_trainer.py), the integrity preflight's torchrun child (preflight.py), the seeded
                agent loop (rollouts.py); a method's own verl half lives in its folder (workflow/methods/prefix_rft/verl.py, slow2fast/verl.py)
    compat/     what verl expects of its environment that ours differs in: vLLM builds (vllm_compat.py), the CPU
                platform with vLLM's CPU build (cpu.py, engine.verl.device cpu)
    seam.py     every verl symbol the modules above rely on (imports, subclasses, overridden private methods, swaps,
                patches) with its signature in verl 0.9.1: tests/verl/test_verl_seam.py fails an upgrade with the list of
                what moved

The pure batch arithmetic of a mixed-policy step (which rows a method trains, with which weights) is
workflow/algos/mix_batch.py: it imports no verl.
"""

__all__ = ["VerlEngine"]


def __getattr__(name: str):
    """VerlEngine on first use: importing a light piece (translate, tiny_model) must not import torch through the
    engine (`rlsweep validate` and `rlsweep smoke` read these)."""
    if name == "VerlEngine":
        from workflow.engines.verl.driver.engine import VerlEngine
        return VerlEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
