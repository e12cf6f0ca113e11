"""Slow2Fast on verl (workflow/engines/verl/adapters.py): with refill resample, the groups its filter drops are
refilled inside verl's sampling by its sampler (verl.py here), which verl builds from `trainer.v1.sampler`."""

from __future__ import annotations

from workflow.engines.verl.adapters import VerlAdapter

SAMPLER = ("pkg://workflow.methods.slow2fast.verl", "Slow2FastSampler")  # verl's load_extern_type: path, class


def _keys(cfg) -> dict:
    if cfg.refill != "resample":
        return {}
    path, name = SAMPLER
    return {"trainer.v1.sampler.custom_sampler.path": path, "trainer.v1.sampler.custom_sampler.name": name}


ADAPTER = VerlAdapter(keys=_keys)
