"""Engines train: `local` (pure torch, tiny models; local.py) and `verl` (verl 0.9: verl/). Each declares its traits
(local_traits.py, verl/traits.py: subclasses of workflow/engine_api/traits.py, light to import) and a trainer
implementing the Engine protocol (workflow/engine_api/protocol.py); `get_engine(name)` (workflow/engine_api/registry.py)
imports only the trainer asked for, so the CPU install never needs verl or vLLM."""
