"""The one registry (workflow/registry.py) behind update rules, mixed-policy methods, graders and engines: unknown
names list the known ones, units are imported only when asked for, a unit of the wrong kind is refused naming
where it came from, and a lab's own package adds units through Python entry points without touching rlsweep."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO
from workflow.registry import Registry


class Base:
    pass


def test_unknown_names_fail_with_the_known_ones_and_builtins_load_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_unit.py").write_text("from test_registry import Base\nclass Unit(Base):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("widget", "test_widgets", builtins={"lazy": "lazy_unit:Unit"}, base=Base)
    assert reg.names() == ["lazy"] and "lazy_unit" not in sys.modules  # listed, not imported
    with pytest.raises(ValueError, match="unknown widget 'lasy'; known: lazy"):
        reg.get("lasy")
    unit = reg.get("lazy")
    assert unit.__name__ == "Unit" and unit.name == "lazy" and "lazy" in reg


def test_a_second_unit_under_a_taken_name_and_a_unit_of_the_wrong_kind_are_refused():
    reg = Registry("widget", "test_widgets", base=Base)

    @reg.register("one")
    class One(Base):
        pass

    with pytest.raises(ValueError, match="widget 'one' is already registered by test_registry"):
        reg.register("one")(type("Other", (Base,), {}))
    reg.register("stray")(int)
    with pytest.raises(TypeError, match=r"widget 'stray' \(builtins.int\) is not a test_registry.Base"):
        reg.get("stray")


# the lab's method cards (light: what reading a sweep loads) and its algorithms (imported when a run trains)
CARDS = '''
from pydantic import Field

from workflow.methods.base import Method, MethodSettings, numbers


class ThreeStepsSettings(MethodSettings):
    steps: int = Field(3, ge=2)  # optimizer steps on the same batch


THREE_STEPS = Method("update", algorithm="lab_plugin:ThreeSteps", settings=ThreeStepsSettings,
                     numbers=numbers(("lab_last_loss", "float", "the loss of the step's last pass")))
BROKEN = Method("update", algorithm="lab_plugin:NotARule")
'''
PLUGIN = '''
from workflow.algos.rule import StepStats, UpdateRule
from workflow.benchmarks.graders import Grader
from workflow.benchmarks.scoring import Verdict


class ThreeSteps(UpdateRule):
    def __init__(self, steps=3, max_grad_norm=1.0, gate_here=True):
        super().__init__(max_grad_norm, gate_here)
        self.steps = steps

    def step(self, params, optimizer, closure):
        first = last = self.grpo_step(params, optimizer, closure)
        for _ in range(self.steps - 1):
            last = self.grpo_step(params, optimizer, closure)
        return StepStats(loss=first.loss, grad_norm=first.grad_norm, backward_passes=self.steps,
                         optimizer_steps=self.steps, diagnostics={"lab_last_loss": last.loss})


class LastLine(Grader):
    kinds = frozenset({"math"})

    def grade(self, response, answer, permutation=None, choices=None):
        last = response.strip().splitlines()[-1] if response.strip() else ""
        return Verdict(last == answer, last)


class NotARule:
    pass
'''
ENTRY_POINTS = """
[rlsweep.methods]
lab_three_steps = lab_cards:THREE_STEPS
lab_broken = lab_cards:BROKEN

[rlsweep.graders]
lab_last_line = lab_plugin:LastLine
"""
CHECK = '''
import json, sys
from pydantic import ValidationError
from workflow.config import RunConfig
from workflow.methods.registry import build_update_rule, get_update_rule, update_rule_names
from workflow.stages import stage_config
from workflow.identity import stable_id
plain = stable_id(stage_config(RunConfig(), "rl", sft_id="s"))
cfg = RunConfig.model_validate({"rl": {"update": "lab_three_steps", "lab_three_steps": {"steps": 4}},
                                "eval": {"graders": ["lab_last_line"]}})
out = {"imported": "lab_plugin" in sys.modules, "plain": plain, "id": stable_id(stage_config(cfg, "rl", sft_id="s"))}
rule = build_update_rule(cfg.rl)
from workflow.benchmarks import graders
out.update(rule=type(rule).__name__, steps=rule.steps, rules=update_rule_names(),
           verdict=graders.make("lab_last_line").grade("so\\n42", "42").correct)
try:
    RunConfig.model_validate({"rl": {"update": "lab_three_steps", "lab_three_steps": {"steps": 1}}})
except ValidationError as e:
    out["bad"] = str(e)
try:
    get_update_rule("lab_broken")
except TypeError as e:
    out["broken"] = str(e)
# its own number: a train_steps column, read from verl's metrics as the worker reports a rule's StepStats
from workflow.engines.verl.controller.metrics import train_steps_row
from workflow.results.catalog import query
from workflow.results.schemas import schema
from workflow.results.writer import write_rows
row = train_steps_row({"actor/rlsweep/lab_last_loss": 0.25, "actor/rlsweep/backward_passes": 4.0}, 1, 8)
write_rows("res", "train_steps", "rl_0000000000a1_000001-000001", [dict(row, run_id="0000000000a1", stage="rl")])
out.update(column=str(schema("train_steps").field("lab_last_loss").type), logged=query(
    "SELECT lab_last_loss FROM train_steps", "res").column(0).to_pylist())
print(json.dumps(out))
'''


@pytest.mark.slow  # interpreters with a plug-in package on their path
def test_a_labs_package_adds_an_update_rule_with_settings_and_a_grader_through_entry_points(tmp_path):
    """A package on the path with a dist-info (what `pip install` leaves) declaring entry points in the groups
    rlsweep.methods and rlsweep.graders: its rule's settings are a section of the run config (`rl.lab_three_steps`,
    validated, in the run id only when selected), its names validate and build, and its algorithm is imported only
    when the run builds it."""
    site = tmp_path / "site"
    (site / "lab_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "lab_plugin-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-plugin\n"
                                                               "Version: 0.1\n")
    (site / "lab_plugin-0.1.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "lab_cards.py").write_text(textwrap.dedent(CARDS))
    (site / "lab_plugin.py").write_text(textwrap.dedent(PLUGIN))
    env = {"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["imported"] is False and out["rule"] == "ThreeSteps" and out["steps"] == 4 and out["verdict"] is True
    assert out["rules"] == ["grpo", "gxpo", "lab_broken", "lab_three_steps", "sfpo"]
    assert "rl.lab_three_steps.steps" in out["bad"] and "greater than or equal to 2" in out["bad"]
    assert out["broken"] == ("update rule 'lab_broken' (lab_plugin.NotARule) is not a "
                             "workflow.algos.rule.UpdateRule")
    assert out["id"] != out["plain"]
    assert out["column"] == "double" and out["logged"] == [0.25]
    # without the package: the name is unknown, with the known ones listed, and a plain run keeps its id
    res = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "unknown update rule 'lab_three_steps'; known: grpo, gxpo, sfpo" in res.stderr
    code = ("from workflow.config import RunConfig; from workflow.stages import stage_config; "
            "from workflow.identity import stable_id; print(stable_id(stage_config(RunConfig(), 'rl', sft_id='s')))")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=300, check=True)
    assert res.stdout.strip() == out["plain"]
    # ... and its number is no column: a row carrying it is refused, saying where numbers are declared
    code = ("from workflow.results.writer import to_arrow\n"
            "try:\n    to_arrow('train_steps', [{'run_id': 'x', 'lab_last_loss': 0.5}])\n"
            "except ValueError as e:\n    print(e)")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=300, check=True)
    assert "unknown column(s) ['lab_last_loss']" in res.stdout and "Method(numbers=...)" in res.stdout


def test_a_methods_number_may_not_take_a_column_of_the_table_or_another_methods_type(monkeypatch):
    """A card's numbers become train_steps columns: one named like a column of the table's own, or declared by two
    methods with different types, is refused naming the methods, when the schema is built (every write)."""
    from workflow.methods.base import Method, StepNumber, numbers
    from workflow.methods.registry import METHODS, step_numbers
    from workflow.results.schemas import schema
    with pytest.raises(ValueError, match="a lower-case identifier"):
        StepNumber("Bad-Name", "float", "x")
    with pytest.raises(ValueError, match="type 'str', one of float, int, bool"):
        StepNumber("fine", "str", "x")
    monkeypatch.setattr(METHODS, "loaded", dict(METHODS.loaded))
    METHODS.register("lab_clash")(Method("update", algorithm="x:Y", numbers=numbers(("loss", "float", "mine"))))
    with pytest.raises(ValueError, match="method\\(s\\) lab_clash log 'loss', a column train_steps has of its own"):
        schema("train_steps")
    monkeypatch.setattr(METHODS, "loaded", {k: v for k, v in METHODS.loaded.items() if k != "lab_clash"})
    METHODS.register("lab_int")(Method("update", algorithm="x:Y", numbers=numbers(("prefix_len", "int", "mine"))))
    with pytest.raises(ValueError, match="method 'lab_int' logs 'prefix_len' as int, but method\\(s\\) prefix_rft "
                                         "log it as float"):
        step_numbers()
