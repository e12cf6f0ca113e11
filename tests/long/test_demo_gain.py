"""The demo's result holds on every machine (issue 44): its SFT job and one of its RL runs (GRPO, seed 0, the demo's
settings) under two CPU float-kernel choices (PyTorch's generic kernels, and AVX2 or MKL's compatible path), each in its
own results directory (a kernel choice is not part of a run's identity), and RL's gain checked under each: the final
avg@k above the start, and the paired interval (final − start over the held-out problems) above 0. Long (~5 min on
2 cores): RLSWEEP_LONG_TESTS=1. CI checks the whole demo's gain on its own machine every run (`rlsweep gain
sweeps/demo.yaml` in .ci/run); `python bench/demo_kernels.py` runs the whole demo under every choice and checks
the full claim (each seed above the start, the pooled interval above 0)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from helpers import REPO
from workflow.kernels import KERNELS, unavailable
from workflow.report.gain import gains
from workflow.results.catalog import query
from workflow.sweep.expand import load_sweep

pytestmark = [pytest.mark.long(covers=["sweeps/demo.yaml", "workflow/engines/local.py", "workflow/engines/rl_batch.py",
                                       "workflow/engines/tiny_lm.py", "workflow/algos/", "workflow/methods/grpo/",
                                       "workflow/methods/sfpo/", "workflow/methods/gxpo/", "workflow/eval/",
                                       "workflow/benchmarks/arithmetic.py", "workflow/report/gain.py"]),
              pytest.mark.timeout(1800)]


def one_grpo_run(tmp_path):
    """The demo with one setting and one seed, evaluated at its start and at the end only."""
    spec = yaml.safe_load((REPO / "sweeps" / "demo.yaml").read_text())
    spec["grid"] = {"rl.update": ["grpo"]}
    spec["seeds"] = [0]
    spec["base"]["eval"]["every"] = None
    path = tmp_path / "demo_grpo.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_demos_rl_gain_holds_under_two_kernel_choices(tmp_path):
    choices = [k for k in ("default", "avx2", "mkl-compatible") if unavailable(k) is None][:2]
    path = one_grpo_run(tmp_path)
    sweep = load_sweep(path)
    sft_losses = {}
    for kernel in choices:
        results = tmp_path / kernel
        res = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"sweep={path}",
                              f"results={results}"], cwd=REPO, env={**os.environ, **KERNELS[kernel]},
                             capture_output=True, text=True, timeout=1500)
        assert res.returncode == 0, res.stderr[-3000:]
        sft_losses[kernel] = query("SELECT loss FROM train_steps WHERE stage = 'sft' ORDER BY step",
                                   results).column(0).to_pylist()
        (gain,) = gains(sweep, results)
        assert gain.shortfalls() == [], (kernel, gain)  # above the start, and the paired interval above 0
    # the two choices really ran different float kernels: their SFT losses part ways (else this showed nothing)
    first, second = sft_losses.values()
    assert len(first) == len(second) > 0 and first != second, choices
