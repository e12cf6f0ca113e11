"""A grid point is validated once, with its first seed, and its other seeds' configs are copies with the seed replaced
(workflow/sweep/expand.py runs_for: a 100-seed sweep planned 100x faster). That is only right while no check reads
the RL seed beyond its type: these tests hold every run of every shipped sweep (and of sweeps that vary the keys the
checks read) equal to the run a full validation of its own assignment makes: config, stage ids and the JSON each
stage job is handed."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import write_sweep
from workflow.config import RunConfig
from workflow.stages import STAGES
from workflow.sweep.expand import load_sweep
from workflow.sweep.keys import apply
from workflow.sweep.spec import read_spec
from workflow.identity import canonical_json, id_of_json

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p.name for p in (REPO / "sweeps").glob("*.yaml"))


def assert_each_run_is_its_own_validation(path: Path) -> int:
    spec = read_spec(path)
    runs = load_sweep(path).runs
    for run in runs:
        alone = RunConfig.model_validate(apply(spec.base, run.assignment))
        assert run.config == alone and run.config.model_dump() == alone.model_dump(), run.assignment
        assert run.config.seed == run.assignment["seed"]
        for stage in STAGES:  # what each stage job is handed and its id: from the config, not from a shared dict
            text = run.stage_json.get(stage)
            if text is None:
                assert run.id_of(stage) is None
                continue
            assert id_of_json(text) == run.id_of(stage)
            assert text == canonical_json(STAGES[stage].config(alone, alone.model_dump(mode="json"),
                                                               _ids(run))), (run.assignment, stage)
    return len(runs)


def _ids(run):
    from workflow.stages import Ids
    return Ids(**{k: v for k, v in run.ids.items() if k in Ids.__dataclass_fields__})


@pytest.mark.parametrize("name", SHIPPED)
def test_every_run_of_a_shipped_sweep_equals_its_own_full_validation(name):
    assert_each_run_is_its_own_validation(REPO / "sweeps" / name)  # (a study's sweep plans no runs up front)


def test_seeds_of_a_point_are_distinct_runs_sharing_only_what_the_seed_does_not_change(tmp_path):
    body = """
    seeds: [3, 0, 7]
    grid:
      rl.update: [grpo, sfpo]
      rl.lr: [1.0e-4, 2.0e-4]
    """
    path = write_sweep(tmp_path / "s.yaml", "s", body)
    assert assert_each_run_is_its_own_validation(path) == 12
    runs = load_sweep(path).runs
    by_point: dict[str, list] = {}
    for r in runs:
        by_point.setdefault(r.label, []).append(r)
    for replicates in by_point.values():
        assert [r.config.seed for r in replicates] == [3, 0, 7]
        assert len({r.run_id for r in replicates}) == 3 and len({r.eval_id for r in replicates}) == 3
        assert len({r.sft_id for r in replicates}) == 1  # the SFT job is shared by the seeds
        assert len({id(r.config.rl) for r in replicates}) == 1  # one validated section, not three
