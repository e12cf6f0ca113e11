"""CPU float-kernel choices: several "machines" on one. PyTorch picks its CPU kernels by instruction set
(ATEN_CPU_CAPABILITY forces one) and MKL takes different code paths on Intel and AMD processors (MKL_CBWR forces
one); rounding differs between them, and a long training run carries the difference into its results. Each choice is
the environment that forces it, set before torch is imported (a stage job's environment: Snakemake passes it on).
Used by bench/demo_kernels.py and tests/long/test_demo_gain.py to check that the demo's result holds on every machine."""

from __future__ import annotations

from pathlib import Path

KERNELS: dict[str, dict[str, str]] = {
    "native": {},  # what this processor picks on its own
    "default": {"ATEN_CPU_CAPABILITY": "default"},  # no vector extensions
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},  # MKL's code path that any x86 processor takes alike
}
_NEEDS = {"avx2": "avx2", "avx512": "avx512f"}  # /proc/cpuinfo flag a choice needs


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def unavailable(kernel: str) -> str | None:
    """Why this processor cannot run `kernel` (None: it can). An unknown name is a ValueError naming the choices."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel choice {kernel!r}; choose from {', '.join(KERNELS)}")
    need = _NEEDS.get(kernel)
    if need and need not in cpu_flags():
        return f"this processor has no {need}"
    return None
