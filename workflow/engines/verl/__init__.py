"""The verl engine: SFT on verl's SFT trainer (torchrun, FSDP2) and RL on verl's PPO trainer (Ray, FSDP2, vLLM
rollouts) running our update rules. One folder per process the code runs in:

    traits.py     what the rest of rlsweep asks of verl without importing it (workflow/engine_api/traits.py)
    adapters.py   what verl needs of a method beyond its card, looked up by the method's name (its verl adapter,
                  in the method's folder: workflow/methods/prefix_rft/verl_adapter.py,
                  workflow/methods/slow2fast/verl_adapter.py)
    contract.py   what the folders below share, with no verl import: our section of verl's config and its reader, the
                  modules and classes verl loads by name, an update's spec, the mixed-loss batch fields, the
                  preflight's request, vLLM's CPU env. They import it and never one another
                  (tests/unit/core/test_structure.py)
    job/          rlsweep's stage job: VerlEngine (engine.py), run config -> verl's keys (translate.py, no verl import)
                  and verl's composed config (compose.py), the task as verl's parquet (data.py), verl's trainers as
                  supervised children (process.py, sft_launch.py), checkpoint export (export.py), rlsweep:tiny
                  (tiny_model.py), the integrity preflight's probe and its planned batch (probe.py, probe_batch.py)
    controller/   verl's controller (its single-controller driver and the Ray task runner holding the trainer): the RL
                  process (ppo.py), our trainer (trainer.py), the update-rule gates (gates.py), the mixed-policy hooks
                  around verl's step (mix_hooks.py), verl's metrics as our rows (metrics.py)
    workers/      verl's FSDP workers: our worker classes (actor.py), the rules' step on verl's engine (rule_step.py),
                  the mixed-policy loss (mix_loss.py)
    rollout/      verl's agent-loop and reward workers: the seeded agent loop (agent_loop.py), the reward (reward.py);
                  a method's own loop or sampler lives in its folder (workflow/methods/prefix_rft/verl.py,
                  workflow/methods/slow2fast/verl.py)
    torchrun/     under torchrun: verl's SFT trainer with our rows (sft_trainer.py), the integrity preflight's child
                  (preflight.py)
    compat/       what verl expects of its environment that ours differs in, in every process: vLLM builds
                  (vllm_compat.py), the CPU platform with vLLM's CPU build (cpu.py, engine.verl.device cpu)
    seam.py       every verl symbol the modules above rely on (imports, subclasses, overridden private methods, swaps,
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
        from workflow.engines.verl.job.engine import VerlEngine
        return VerlEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
