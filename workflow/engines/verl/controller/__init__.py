"""What runs in verl's controller (the RL stage's verl process and the Ray task runner that holds the PPO trainer),
loaded by name (python -m ppo.py; VERL_USE_EXTERNAL_MODULES): our trainer (trainer.py), the update-rule gates
decided once for every rank (gates.py), a mixed-policy method's hooks around verl's step (mix_hooks.py), verl's
metrics as our train_steps rows (metrics.py). Touches verl only through names listed in ../seam.py."""
