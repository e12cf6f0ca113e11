"""What runs inside verl's processes, loaded by verl by name (VERL_USE_EXTERNAL_MODULES, custom functions, torchrun
-m): the RL process (ppo.py), our trainer and workers (worker.py), the driver-side hooks of an update rule and of a
mixed-policy method around verl's step (gates.py, mix_hooks.py), the workers' losses and steps (mix_loss.py,
rule_step.py), verl's metrics as our rows (metrics.py), Prefix-RFT's agent loop (prefix_agent.py), the Slow2Fast
sampler (slow2fast.py), the reward (reward.py), the SFT trainer (sft_trainer.py) and the integrity preflight's
torchrun child (preflight.py, probe_batch.py). Each of these touches verl only through names listed in ../seam.py."""
