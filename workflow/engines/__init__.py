"""Engines train: `local` (pure torch, tiny models; local.py) and `verl` (verl 0.9: verl/). Each implements
`Engine` (base.py); `get_engine(name)` (registry.py) imports only the one asked for, so the CPU install never
needs verl or vLLM."""
