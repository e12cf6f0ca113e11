"""The reward verl calls on every response (contract.REWARD_FN, `reward.custom_reward_function`), inside verl's reward
workers: `compute_score(data_source, solution_str, ground_truth, extra_info)`. The job's data (job/data.py)
tags each row with the data source that picks the rule: the arithmetic task's exact \\boxed{} match, or for a
datasets task the eval scorer (last \\boxed{} vs the gold by math-verify, in a worker process with a time limit).
"""

from __future__ import annotations

import threading

from workflow.benchmarks.arithmetic import reward
from workflow.benchmarks.scoring import MathVerifier
from workflow.engines.verl.contract import DATA_SOURCE, MATH_SOURCE  # the sources the driver tags rows with

_verifier: MathVerifier | None = None  # one math-verify worker process per reward process, started on first use
_verifier_lock = threading.Lock()  # verl's reward manager calls compute_score from a thread pool


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **_: object) -> float:
    """verl's reward hook (contract.REWARD_FN): the arithmetic task's exact match, or for a datasets task the
    eval scorer (a timed-out comparison scores 0)."""
    global _verifier
    if data_source == DATA_SOURCE:
        return reward(solution_str, str(ground_truth))
    if data_source == MATH_SOURCE:
        with _verifier_lock:
            if _verifier is None:
                _verifier = MathVerifier()
        return 1.0 if _verifier.score(solution_str, str(ground_truth)).correct else 0.0
    raise ValueError(f"no reward for data source {data_source!r} (known: {DATA_SOURCE}, {MATH_SOURCE})")
