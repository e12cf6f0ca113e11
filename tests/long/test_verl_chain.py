"""Issue 61: a verl run cut into segments trains what one job trains, measured for real on CPUs by
bench/verl_chain.py (verl SFT, then the same 4-step GRPO run as one job, as a 2-segment chain and as one job again,
each in its own results directory): with seeded rollouts the chain draws one job's rollouts at every step, and its
rows and final weights differ from one job's by no more than one job's differ from its own (the float noise of
two runs). This is what makes segments verl's default. Six verl starts (~10 min on 2 idle cores): a long test, its
last pass in docs/tests.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO, need_verl_and_vllm

need_verl_and_vllm()

pytestmark = [pytest.mark.timeout(2400), pytest.mark.serial("verl"), pytest.mark.slow,
              pytest.mark.long(covers=["workflow/engines/verl/", "workflow/segments.py", "workflow/launch.py",
                                       "bench/verl_chain.py", "workflow/methods/prefix_rft/verl.py"])]


def test_a_seeded_verl_chain_is_as_close_to_one_job_as_one_job_to_itself(tmp_path):
    out = tmp_path / "chain.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "verl_chain.py"), "--json", str(out), "--keep",
                           str(tmp_path / "arms")], cwd=REPO, capture_output=True, text=True, timeout=2300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(out.read_text())
    chain = found["chain"]
    assert chain["reward"] == 0 and chain["response_len"] == 0  # the same rollouts at every step
    assert found["close"], proc.stdout
    assert chain["|dw| / |w|"] < 1e-4  # float noise, not another trajectory (unseeded: ~4e-2)
