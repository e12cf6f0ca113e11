"""Engines train: `local` (pure torch, tiny models; local.py) and `verl` (verl 0.9: verl/). Each has traits (traits.py,
verl/traits.py: what the rest of rlsweep asks of it, light to import) and a trainer implementing `Engine` (base.py);
`get_engine(name)` (registry.py) imports only the trainer asked for, so the CPU install never needs verl or vLLM."""
