"""Seeded rollouts on verl (issue 61): each vLLM request's sampling seed is a function of the run's seed, the step,
the prompt's row and the session alone (workflow/engines/verl/contract.py rollout_seed), so a job resumed at a step
draws what the uninterrupted job draws, and no two rollouts share a stream."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from workflow.engines.verl.contract import rollout_seed, seeded


def test_a_rollouts_seed_depends_on_its_run_seed_step_row_and_session_and_on_nothing_else():
    grid = list(itertools.product(range(3), range(1, 5), range(8), range(4)))  # seed, step, row, session
    seeds = [rollout_seed(*key) for key in grid]
    assert len(set(seeds)) == len(grid)  # every rollout its own stream
    assert seeds == [rollout_seed(*key) for key in grid]  # the same in another job (a pure function)
    assert all(0 <= s < 2 ** 31 for s in seeds)  # what vLLM's SamplingParams.seed takes


def test_an_agent_loops_request_gets_the_seed_of_its_step_row_and_session():
    config = SimpleNamespace(data=SimpleNamespace(seed=7))
    params = {"temperature": 1.0, "top_p": 1.0}
    kwargs = {"global_steps": 3, "session_id": 2, "extra_info": {"index": 11}, "index": 99}
    assert seeded(params, config, kwargs) == {**params, "seed": rollout_seed(7, 3, 11, 2)}  # the data row's index
    assert seeded(params, config, {**kwargs, "extra_info": None}) == {**params, "seed": rollout_seed(7, 3, 99, 2)}
    assert "seed" not in params  # the shared parameters of the prompt's other sessions are left alone
