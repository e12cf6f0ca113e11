"""Host syncs counted, on any device: the calls in a training step that make the host wait for the device.

On a GPU every read of a device number into Python (`float(loss)`, `.item()`, a `.tolist()` of a norm) stalls the
launch queue until the device has caught up, and an op whose output shape depends on the data (`nonzero`, a
boolean-mask index) does the same. A CPU test cannot see the stall, but it can see the call: a TorchFunctionMode is
handed every torch function and Tensor method called while it is active, CPU tensors' included (on torch 2.13 a
TorchDispatchMode misses `.tolist()` and `.cpu()`).

    with SyncCounter() as syncs:
        stats = rule.step(params, optimizer, closure)
    assert syncs.count <= 1, syncs.report()

What counts: `.item()`, `float()` / `int()` / `bool()` of a tensor, `.tolist()`, `.numpy()`, `.cpu()` (on the CPU
too: it says the value goes to the host), `.to()` the CPU of a tensor on another device (`.to(model_device)`, the
device-agnostic move, is none on the CPU), the data-dependent-shape ops (SHAPE_FROM_DATA), indexing with a boolean
tensor, and `torch.cuda.synchronize()`; made by the project's code or a probe, not inside torch (an optimizer reads
its CPU step counters). Where it was called from is kept (the innermost project frame), so a failure names the line.
On a GPU the same step also runs under `torch.cuda.set_sync_debug_mode("warn")` (workflow/gpu_check.py): the
driver's own witness of what this counts.
"""

from __future__ import annotations

import sys
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

# Tensor methods and conversions that hand a device value to the host
READS = {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__", "cpu"}
# ops whose output's shape is known only once the device has computed their input
SHAPE_FROM_DATA = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "_unique2",
                   "repeat_interleave", "bincount", "histc", "nonzero_static"}
_PROJECT = str(Path(__file__).resolve().parents[1])  # the workflow package: where a counted call is said to be
_TORCH = str(Path(torch.__file__).resolve().parent)
_TORCH_WRAPPERS = tuple(str(Path(_TORCH) / f) for f in ("_tensor.py", "overrides.py", "utils/_device.py",
                                                        "_tensor_str.py"))


def _is_cpu(device) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def _has_bool_index(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


class SyncCounter(TorchFunctionMode):
    """Counts the host syncs called while it is active (`count`, and by kind and place in `seen`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[tuple[str, str]] = Counter()  # (what, where) -> times
        self._synchronize = None

    @property
    def count(self) -> int:
        return sum(self.seen.values())

    def report(self) -> str:
        return "; ".join(f"{what} at {where} x{n}" for (what, where), n in self.seen.most_common()) or "no syncs"

    def _note(self, what: str) -> None:
        """Count a sync made by the caller of the torch call, unless that caller is torch itself (an optimizer
        reading its CPU step counter, which on a GPU is no sync either); say where (the innermost project frame)."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_TORCH_WRAPPERS):
            frame = frame.f_back  # (Tensor.__float__ and its kind are Python wrappers around the call)
        if frame is None or frame.f_code.co_filename.startswith(_TORCH):
            return
        where = "?"
        for found in reversed(traceback.extract_stack(frame)):
            if found.filename.startswith(_PROJECT):
                where = f"{Path(found.filename).relative_to(Path(_PROJECT).parent)}:{found.lineno}"
                break
        self.seen[(what, where)] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READS or name in SHAPE_FROM_DATA:
            self._note(name)
        elif name == "to" and args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu" and (
                _is_cpu(kwargs.get("device")) or any(isinstance(a, (str, torch.device)) and _is_cpu(a)
                                                     for a in args[1:])):
            self._note("to(cpu)")  # (a device tensor's: `.to(model_device)` on the CPU moves nothing)
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and _has_bool_index(args[1]):
            self._note(f"{name}[bool]")
        elif name == "where" and len(args) == 1 and not kwargs:
            self._note("where(cond)")
        return func(*args, **kwargs)

    def __enter__(self):
        self._synchronize = torch.cuda.synchronize

        def synchronize(*args, **kwargs):
            self._note("cuda.synchronize")
            return self._synchronize(*args, **kwargs)

        torch.cuda.synchronize = synchronize
        return super().__enter__()

    def __exit__(self, *exc):
        torch.cuda.synchronize = self._synchronize
        return super().__exit__(*exc)


@dataclass
class Witnessed:
    """What `witnessed_syncs` saw: the SyncCounter's calls, and the CUDA driver's count of synchronizing calls (None
    off a GPU, or with the driver's witness not asked for); `driver` is set when the block ends."""
    counted: SyncCounter
    driver: int | None = None


@contextmanager
def witnessed_syncs(device, driver: bool = True) -> Iterator[Witnessed]:
    """The block's host syncs counted by a SyncCounter, and on a GPU (`driver`) also by the driver itself:
    `torch.cuda.set_sync_debug_mode("warn")` warns at each synchronizing call, and the warnings are counted (the mode
    is put back to "default" however the block ends)."""
    watch = driver and torch.device(device).type == "cuda"
    with SyncCounter() as counted, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        seen = Witnessed(counted)
        if watch:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            yield seen
        finally:
            if watch:
                torch.cuda.set_sync_debug_mode("default")
                seen.driver = sum("synchroniz" in str(w.message) for w in warned)
