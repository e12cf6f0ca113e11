"""Fixtures, and how the suite is tiered and grouped (README "Tests"). What tests import is in support/helpers.py."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # helpers, workers, toys

from helpers import SFT_FOR_RL  # noqa: E402
from workflow.layout import stage_dir

torch.set_num_threads(1)

# the catalog's verdict cache (workflow/results/verdicts.py) of the suite's thousands of temporary results directories
# goes to a folder of the run's own, not the user's ~/.cache (what the tests start inherits it)
if "RLSWEEP_VERDICT_CACHE" not in os.environ:
    import tempfile
    os.environ["RLSWEEP_VERDICT_CACHE"] = tempfile.mkdtemp(prefix="rlsweep-verdicts-")

# The fast tier: every test not marked `slow` or `long`, selected with `pytest -m fast`. Each of its tests has this
# limit of its own (the suite's is pytest-timeout's 600 s), so a test that grows slow fails loudly instead of
# creeping into the tier: mark it `slow` (a Snakemake sweep, SLURM, verl / vLLM / Ray / torchrun, or seconds of work).
FAST_LIMIT_S = 30


def pytest_itemcollected(item):
    """Each test's xdist group, as it is collected (before xdist reads the groups). The suite runs on two workers
    (pyproject.toml: -n 2 --dist loadgroup): much of its time is waiting (SLURM's scheduler, Ray and vLLM starting,
    polling), which the other worker fills. A module marked `serial("verl")` (it starts verl, vLLM, Ray, torchrun or
    torch.distributed) runs one at a time with the others so marked: they share ports and the model cache and check
    that nothing of theirs is left running; `serial("slurm")` share the one local cluster. Every other module is a
    group of its own, so its module-scoped fixtures are built once."""
    serial = item.get_closest_marker("serial")
    item.add_marker(pytest.mark.xdist_group(serial.args[0] if serial else item.path.stem))


def pytest_collection_modifyitems(config, items):
    """Tiers: a test neither `slow` nor `long` is `fast` (with its own time limit). Tests marked `long` (minutes of a
    real cluster or a real model each) run on demand, with RLSWEEP_LONG_TESTS=1 (README, "Tests")."""
    for item in items:
        if "slow" not in item.keywords and "long" not in item.keywords:
            item.add_marker(pytest.mark.fast)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(FAST_LIMIT_S))
    schedule_long_groups_first(items)
    if os.environ.get("RLSWEEP_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="a long test: run it with RLSWEEP_LONG_TESTS=1 (README, \"Tests\")")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def pytest_ignore_collect(collection_path, config):
    """`pytest -m fast` does not import a module whose every test is `slow` or `long` (its module-level `pytestmark`
    says so): each pytest-xdist worker imports every module it collects, and those modules' imports (Ray, Optuna,
    verl's workers) are seconds of the fast tier paid for no test. Other selections collect everything."""
    if config.getoption("markexpr", "") != "fast" or collection_path.suffix != ".py":
        return None
    return True if module_marks(collection_path) & {"slow", "long"} else None


def module_marks(path: Path) -> set[str]:
    """The names of the marks a test module's top-level `pytestmark` assignment gives all its tests (read from its
    source, without importing it)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError):  # let pytest's own import report it
        return set()
    marks = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):  # pytest.mark.NAME, called or not, alone or in a list
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark"):
                    marks.add(sub.attr)
    return marks


def schedule_long_groups_first(items) -> None:
    """Order the groups by how many slow tests each holds, most first: xdist hands the two workers whole groups in
    collection order (pyproject.toml: --no-loadscope-reorder; its own order, by number of tests, put a group of
    few minutes-long tests last, where one worker ran it alone), so the long groups start at once and the
    many short fast-tier groups fill the end evenly."""
    def group(item) -> str:
        return item.get_closest_marker("xdist_group").args[0]
    weight: dict[str, int] = {}
    for item in items:
        weight[group(item)] = weight.get(group(item), 0) + ("fast" not in item.keywords)
    items.sort(key=lambda item: -weight[group(item)])  # stable: each group's tests keep their order


@pytest.fixture
def tmp_results(tmp_path: Path) -> Path:
    d = tmp_path / "results"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def sft_for_rl(tmp_path_factory) -> Path:
    """The DONE.json of an SFT checkpoint good enough that some RL groups have mixed rewards (so RL really moves the
    weights), trained under SFT_FOR_RL once per test session in the session's shared directory: the first
    pytest-xdist worker to ask trains it, another that asks meanwhile waits on the stage's lock as a twin job does
    (run_stage's wait_for_twin) and gets the same DONE.json (minutes of two busy cores saved each)."""
    from workflow.config import RunConfig
    from workflow.launch import run_stage
    from workflow.stages import stage_config
    from workflow.identity import stable_id
    scfg = stage_config(RunConfig.model_validate(SFT_FOR_RL), "sft")
    sft_id = stable_id(scfg)
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sft_for_rl"  # xdist: pytest-N/popen-gwK
    done = stage_dir(root, "sft", sft_id) / "DONE.json"
    if not done.is_file():  # run_stage on a finished stage would resume it at its last step and rewrite its rows
        # on this process's one thread: the other worker keeps a core busy, and two torch threads sharing the other
        # core wait on each other's time slices (bench-free check: 60 of these steps beside a busy core took 16.5 s
        # on one thread, 32.8 s on two)
        made = run_stage("sft", "sft", sft_id, scfg, results_root=root, wait_for_twin=True)
        assert made == done, (made, done)
    return done
