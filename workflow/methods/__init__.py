"""The RL methods, one folder each: update rules (grpo, sfpo, gxpo), mixed-policy methods (none, luffy, srft, hpt,
relift, prefix_rft) and FAST-GRPO's parts (thinking_reward, dynamic_kl, slow2fast). A folder's `__init__.py` holds
the method's settings (its `rl.<name>` section) and its card (base.py: role, algorithm, numbers), light enough
for reading a sweep; its `algorithm.py` the code both engines run. registry.py lists them by name."""
