"""What runs inside verl's processes, loaded by verl by name (VERL_USE_EXTERNAL_MODULES, custom functions, torchrun
-m): the RL process (ppo.py), our trainer and workers (worker.py), the driver-side hooks of an update rule and of a
mixed-policy method around verl's step (gates.py, mix_hooks.py), the workers' losses and steps (mix_loss.py,
rule_step.py), verl's metrics as our rows (metrics.py), the reward (reward.py), the SFT trainer (sft_trainer.py) and
the integrity preflight's torchrun child (preflight.py, probe_batch.py). A method's own verl half (Prefix-RFT's agent
loop, the Slow2Fast sampler) lives in its folder, workflow/methods/<name>/verl.py. Each of these touches verl only
through names listed in ../seam.py."""
