"""The sweep's `optuna:` block: validation messages, define-by-run sampling, grid sampling, storage."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest
import yaml

from helpers import TINY_BASE, write_sweep
from workflow.config import RunConfig
from workflow.study.factory import journal_path, make_pruner, make_sampler, make_storage, study_name
from workflow.study.space import grid_search_space, suggest
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError
from workflow.sweep.keys import apply

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {  # the issue's example: two update rules, each with its own knobs
    "rl.update": {"type": "categorical", "choices": ["sfpo", "gxpo"]},
    "rl.sfpo.K": {"type": "int", "low": 1, "high": 5, "when": {"rl.update": "sfpo"}},
    "rl.sfpo.alpha": {"type": "float", "low": 0.1, "high": 1.0, "when": {"rl.update": "sfpo"}},
    "rl.gxpo.tau": {"type": "float", "low": 0.5, "high": 4.0, "log": True, "when": {"rl.update": "gxpo"}},
    "rl.lr": {"type": "float", "low": 1.0e-5, "high": 1.0e-3, "log": True},
    "rl.gxpo.K": {"type": "int", "low": 2, "high": 10, "step": 2, "when": {"rl.update": ["gxpo"]}},
}


def I(low, high, **kw):  # noqa: E743 - short spellings keep the case table readable
    return {"type": "int", "low": low, "high": high, **kw}


def F(low, high, **kw):
    return {"type": "float", "low": low, "high": high, **kw}


def C(*choices, **kw):
    return {"type": "categorical", "choices": list(choices), **kw}


def optuna_sweep(tmp_path, space, top: dict | None = None, name: str = "opt", base: str = TINY_BASE, **fields):
    """A sweep file: the tiny base, `top` (grid / zip / ...), and an optuna block with `space` and `fields`."""
    block = {"objective": {"sql": "select 1"}, "n_trials": 4, **fields, "space": space}
    body = yaml.safe_dump({**(top or {}), "optuna": block}, sort_keys=False)
    return write_sweep(tmp_path / f"{name}.yaml", name, body, base=base)


def errors_of(path) -> str:
    with pytest.raises(SweepError) as e:
        load_sweep(path)
    return str(e.value)


# ------------------------------------------------------------------------------------------------ bad input
BAD = [
    # keys
    ({"rl.lrr": F(1e-5, 1e-3)}, {}, "optuna.space.rl.lrr: unknown key 'lrr' in rl; did you mean 'lr'?"),
    ({"seed": I(0, 3)}, {}, "optuna.space.seed: use the top-level `seeds:` list"),
    ({"rl": I(0, 3)}, {}, "optuna.space.rl: 'rl' is a section"),
    ({}, {}, "optuna.space: empty"),
    ({"rl.steps": {**I(1, 4), "lo": 3}}, {}, "optuna.space.rl.steps.lo: unknown key"),
    ({"rl.lr": F("abc", 1e-3)}, {}, "optuna.space.rl.lr.low: Value error, must be a number (got 'abc')"),
    ({"rl.lr": {"type": "real", "low": 1, "high": 2}}, {}, "optuna.space.rl.lr.type: Input should be 'int'"),
    # distributions
    ({"rl.lr": F(1e-3, 1e-5)}, {}, "optuna.space.rl.lr: low (0.001) is greater than high (1e-05)"),
    ({"rl.kl_coef": F(0.0, 0.1, log=True)}, {}, "optuna.space.rl.kl_coef: log needs low > 0 (got 0.0)"),
    ({"rl.clip_high": F(0.1, 0.4, log=True, step=0.1)}, {}, "optuna.space.rl.clip_high: log and step cannot"),
    ({"rl.steps": I(1.5, 4)}, {}, "optuna.space.rl.steps: an int's bounds and step must be integers (got low=1.5)"),
    ({"rl.steps": I(2, 4, step=0.5)}, {}, "optuna.space.rl.steps: an int's bounds and step must be integers"),
    ({"rl.steps": I(2, 6, step=0)}, {}, "optuna.space.rl.steps: step must be positive (got 0)"),
    ({"rl.steps": I(2, 7, step=2)}, {}, "optuna.space.rl.steps: high - low (5) is not a multiple of step (2)"),
    ({"rl.steps": {"type": "int", "low": 2}}, {}, "optuna.space.rl.steps: a int needs both `low:` and `high:`"),
    ({"rl.lr": {**F(1e-5, 1e-3), "choices": [1e-4]}}, {}, "optuna.space.rl.lr: `choices:` applies to type "
                                                          "categorical only"),
    ({"rl.lr": F(1e-5, float("inf"))}, {}, "optuna.space.rl.lr.high: .inf (line"),  # refused as the file loads
    ({"rl.update": {"type": "categorical"}}, {}, "optuna.space.rl.update: a categorical needs a non-empty"),
    ({"rl.update": C()}, {}, "optuna.space.rl.update: a categorical needs a non-empty `choices:` list"),
    ({"rl.update": C(["sfpo"])}, {}, "optuna.space.rl.update: choices must be scalars"),
    ({"rl.update": C("sfpo", "sfpo")}, {}, "optuna.space.rl.update: repeated choice"),
    ({"rl.steps": C(2, 4, low=1)}, {}, "optuna.space.rl.steps: low: not for a categorical"),
    # when
    ({"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(1, 3, when={"rl.updte": "sfpo"})}, {},
     "optuna.space.rl.sfpo.K.when.rl.updte: unknown key 'updte' in rl; did you mean 'update'?"),
    ({"rl.sfpo.K": I(1, 3, when={"rl.update": "sfpo"}), "rl.update": C("sfpo", "gxpo")}, {},
     "optuna.space.rl.sfpo.K.when.rl.update: rl.update is sampled by a later entry of optuna.space"),
    ({"rl.update": C("sfpo", "gxpo", when={"rl.update": "sfpo"})}, {},
     "optuna.space.rl.update.when.rl.update: rl.update is sampled by this same entry"),
    ({"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(1, 3, when={"rl.update": ["grpo", "spfo"]})}, {},
     "optuna.space.rl.sfpo.K.when.rl.update: rl.update never takes the value ['grpo', 'spfo']"),
    ({"rl.sfpo.K": I(1, 3, when={"rl.update": "sfpo"})}, {},
     "optuna.space.rl.sfpo.K.when.rl.update: rl.update is not searched and base gives it 'grpo', not 'sfpo', so "
     "rl.sfpo.K would never be sampled"),
    ({"rl.group_size": I(2, 4), "rl.lr": F(1e-5, 1e-3, when={"rl.group_size": 9})}, {},
     "optuna.space.rl.lr.when.rl.group_size: rl.group_size never takes the value 9"),
    # a conditional key keeps its base value (3) where it is not sampled, but 7 it never has
    ({"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(1, 2, when={"rl.update": "sfpo"}),
      "rl.lr": F(1e-5, 1e-3, when={"rl.sfpo.K": 7})}, {},
     "optuna.space.rl.lr.when.rl.sfpo.K: rl.sfpo.K never takes the value 7"),
    # a knob of one update rule searched in trials of another
    ({"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(1, 3)}, {},
     "optuna.space.rl.sfpo.K: the run reads rl.sfpo.K only when rl.update is sfpo, but it would be searched with "
     "rl.update = 'gxpo' too"),
    ({"rl.gxpo.K": I(2, 4)}, {}, "optuna.space.rl.gxpo.K: the run reads rl.gxpo.K only when rl.update is gxpo"),
    # values the run config rejects, with the pydantic reason and the `when` values in place
    ({"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(0, 3, when={"rl.update": "sfpo"})}, {},
     "optuna.space.rl.sfpo.K: low 0 is rejected: rl.sfpo.K: Input should be greater than or equal to 1 (got 0)"),
    ({"rl.update": C("sfpo"), "rl.sfpo.alpha": F(0.5, 1.5, when={"rl.update": "sfpo"})}, {},
     "optuna.space.rl.sfpo.alpha: high 1.5 is rejected: rl.sfpo.alpha: Input should be less than or equal to 1"),
    ({"rl.update": C("grpo", "ppo")}, {}, "optuna.space.rl.update: choice 'ppo' is rejected: rl.update: "
                                         "unknown update rule 'ppo'; known: grpo, gxpo, sfpo"),
    # valid with the base's rl.checkpoint_every (2), not in the trials where the condition holds (5)
    ({"rl.checkpoint_every": C(2, 5), "eval.every": I(4, 8, step=4, when={"rl.checkpoint_every": 5})}, {},
     "optuna.space.eval.every: low 4 is rejected: eval.every: 4 must be a multiple of rl.checkpoint_every (5)"),
    ({"rl.update": C("sfpo"), "rl.sfpo.K": F(1, 5, when={"rl.update": "sfpo"})}, {},
     "optuna.space.rl.sfpo.K: rl.sfpo.K takes whole numbers; search it with type int"),
    # an eval setting is not part of the RL run's id: trials differing only in it would share a run
    ({"rl.lr": F(1e-5, 1e-3), "eval.temperature": F(0.1, 1.0)}, {},
     "optuna.space.eval.temperature: trials that differ only in eval settings would share one RL run"),
    # the block
    ({"rl.lr": F(1e-5, 1e-3)}, {"n_trials": 0}, "optuna.n_trials: must be at least 1 (got 0)"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"in_flight": 0}, "optuna.in_flight: must be at least 1 (got 0)"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"in_flight": 5}, "optuna.in_flight: 5 trials at once but only n_trials = 4"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"direction": "minimize", "directions": ["maximize"]},
     "optuna.directions: give `direction` or `directions`, not both"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"directions": []}, "optuna.directions: empty list"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"direction": "up"}, "optuna.direction: Input should be 'maximize' or 'minimize'"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"objective": "math_avg_at_kk"},
     "optuna.objective: unknown objective 'math_avg_at_kk'"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"objective": {"sql": "  "}}, "optuna.objective.sql: empty query"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"objective": 3}, "optuna.objective: Value error, must be a built-in objective's "
                                                 "name, {sql: <query>} or {avg_at_k_within: {KEY: N}} (got 3)"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"storage": "results/study.db"},
     "optuna.storage: 'results/study.db' is neither a storage URL"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"sampler": {"name": "bayes"}},
     "optuna.sampler.name: unknown sampler 'bayes'; known: cmaes, gp, grid, random, tpe"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"sampler": {"name": "tpe", "options": {"n_startup_trails": 3}}},
     "optuna.sampler.options.n_startup_trails: not an option of TPESampler; did you mean 'n_startup_trials'?"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"sampler": {"name": "random", "options": {"seed": 3}}},
     "optuna.sampler.options.seed: set by sampler.seed, not by options"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"pruner": {"name": "none", "options": {"n_warmup_steps": 3}}},
     "optuna.pruner.options.n_warmup_steps: not an option of NopPruner (it takes no options)"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"pruner": {"name": "median", "options": {"n_warmup_steps": -1}}},
     "optuna.pruner.options: ValueError: Number of warmup steps cannot be negative"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"directions": ["maximize", "minimize"], "pruner": {"name": "median"}},
     "optuna.pruner: median cannot prune a multi-objective study"),
    ({"rl.lr": F(1e-5, 1e-3)}, {"directions": ["maximize", "minimize"], "sampler": {"name": "cmaes"}},
     "optuna.sampler: cmaes cannot run a multi-objective study"),
    # the grid sampler walks finite lists, each point once
    ({"rl.lr": F(1e-5, 1e-3)}, {"sampler": {"name": "grid"}},
     "optuna.space.rl.lr: the grid sampler needs a finite list of values; give this float a `step:`"),
    ({"rl.steps": I(2, 4)}, {"sampler": {"name": "grid"}},
     "optuna.n_trials: 4 trials but the grid has only 3 points"),
]


@pytest.mark.parametrize("space, fields, expected", BAD, ids=[f"{i}-{e.split(':')[0]}" for i, (_, _, e) in
                                                               enumerate(BAD)])
def test_bad_optuna_block_names_file_key_and_reason(tmp_path, space, fields, expected):
    path = optuna_sweep(tmp_path, space, **fields)
    msg = errors_of(path)
    assert str(path) in msg
    assert expected in msg, msg


@pytest.mark.parametrize("top, expected", [
    ({"grid": {"rl.lr": [1e-4]}}, "optuna.space.rl.lr: also set by grid.rl.lr"),
    ({"zip": {"rl.lr": [1e-4], "rl.steps": [3]}}, "optuna.space.rl.lr: also set by zip.rl.lr"),
    ({"exclude": [{"rl.steps": 3}]}, "remove exclude"),
])
def test_optuna_is_not_combined_with_grid_zip_or_exclude(tmp_path, top, expected):
    msg = errors_of(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, top=top))
    assert "optuna: an Optuna sweep varies keys through optuna.space only" in msg
    assert expected in msg, msg


def test_every_problem_is_reported_at_once_and_base_still_validates(tmp_path):
    path = optuna_sweep(tmp_path, {"rl.lrr": F(1e-5, 1e-3), "rl.steps": I(5, 2), "seed": I(0, 1)}, n_trials=0,
                        base="base: {rl: {steps: -4}}\n")
    lines = errors_of(path).splitlines()
    for expected in ("base.rl.steps: Input should be greater than 0", "optuna.space.rl.lrr: unknown key",
                     "optuna.space.rl.steps: low (5) is greater than high (2)", "optuna.space.seed: use the top-level",
                     "optuna.n_trials: must be at least 1"):
        assert any(expected in x for x in lines), lines
    assert all(x.startswith(f"{path}: ") for x in lines)


# ------------------------------------------------------------------------------------------------ valid blocks
def test_the_issue_example_loads_and_makes_no_runs_up_front(tmp_path):
    sweep = load_sweep(optuna_sweep(tmp_path, SPACE, sampler={"name": "tpe", "seed": 0}, n_trials=6, in_flight=2))
    assert sweep.runs == []  # trials become runs when the study asks for them
    opt = sweep.spec.optuna
    assert list(opt.space) == list(SPACE)  # YAML order is the sampling order
    assert opt.study_directions == ["maximize"] and opt.in_flight == 2 and opt.sampler.seed == 0
    assert study_name(opt, sweep.name) == "opt"
    assert opt.space["rl.gxpo.tau"].log and opt.space["rl.gxpo.K"].step == 2


def test_named_objectives_come_from_the_registry(tmp_path):
    bad = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, objective="avg_at_kk")
    assert "unknown objective 'avg_at_kk'" in errors_of(bad) and "math_avg_at_k" in errors_of(bad)
    two = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, objective="avg_at_k", directions=["maximize", "minimize"],
                       name="two")
    assert "optuna.objective: the built-in 'avg_at_k' gives one value but there are 2 directions" in errors_of(two)
    path = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, objective="avg_at_k", direction="minimize",
                        study="named")
    opt = load_sweep(path).spec.optuna
    assert opt.objective == "avg_at_k" and opt.study_directions == ["minimize"]
    assert study_name(opt, "opt") == "named"


def test_a_compute_normalised_objective_reads_each_runs_last_evaluation_within_its_budget(tmp_path):
    from workflow.layout import eval_file, train_steps_file
    from workflow.results.membership import Member, record
    from workflow.results.writer import write_rows
    from workflow.study.objective import objective_name, objective_sql, run_values
    path = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, objective={"avg_at_k_within": {"backward_passes": 3}})
    opt = load_sweep(path).spec.optuna
    assert objective_name(opt.objective) == "avg@k within 3 backward_passes"
    two = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, name="two",
                       objective={"avg_at_k_within": {"backward_passes": 3, "flops": 1.0e9}})
    assert "give exactly one budget (backward_passes, rollouts or flops)" in errors_of(two)
    bad = optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, name="bad", objective={"avg_at_k_within": {"steps": 3}})
    assert "avg_at_k_within" in errors_of(bad)
    # run a: 1 backward pass a step, evaluated at steps 0, 2, 4; run b: 4 a step (SFPO-like), at steps 0 and 2
    for run, passes, evals in (("00000000000a", 1, {0: 0.1, 2: 0.3, 4: 0.5}), ("00000000000b", 4, {0: 0.2, 2: 0.6})):
        write_rows(tmp_path, "train_steps", train_steps_file("rl", run, 1, 4), [dict(run_id=run, sweep="s", stage="rl",
                   step=t, backward_passes=passes) for t in range(1, 5)])
        write_rows(tmp_path, "eval_scores", eval_file(run, "e" + run[1:], 4, "x"), [dict(run_id=run, sweep="s", step=t,
                   benchmark="x", k=1, avg_at_k=v) for t, v in evals.items()])
        record(tmp_path, "s", [Member("rl", run), Member("eval", "e" + run[1:])])
    # within 3 passes: a's step 2 (2 spent; step 4 has spent 4), b's step 0 (step 2 has spent 8)
    assert run_values(objective_sql(opt.objective), tmp_path, "s") == {"00000000000a": [0.3], "00000000000b": [0.2]}


def test_a_condition_on_the_value_an_unsampled_key_keeps_is_accepted(tmp_path):
    # rl.sfpo.K is sampled from 1..2 in sfpo trials and stays at its default 3 in gxpo trials
    space = {"rl.update": C("sfpo", "gxpo"), "rl.sfpo.K": I(1, 2, when={"rl.update": "sfpo"}),
             "rl.lr": F(1e-5, 1e-3, when={"rl.sfpo.K": 3})}
    sweep = load_sweep(optuna_sweep(tmp_path, space))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        a = suggest(study.ask(), sweep.spec.optuna, sweep.spec.base)
        assert ("rl.lr" in a) == (a["rl.update"] == "gxpo"), a


def test_a_condition_on_a_base_value_that_holds_is_accepted(tmp_path):
    # rl.update is not searched; base says sfpo, so the sfpo knob is searched in every trial
    sweep = load_sweep(optuna_sweep(tmp_path, {"rl.sfpo.K": I(1, 3, when={"rl.update": "sfpo"})},
                                    base="base: {rl: {update: sfpo}}\n"))
    opt = sweep.spec.optuna
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    assert set(suggest(study.ask(), opt, sweep.spec.base)) == {"rl.sfpo.K"}
    assert suggest(study.ask(), opt, {}) == {}  # over the defaults (grpo) the condition does not hold


# ------------------------------------------------------------------------------------------------ sampling
def test_suggest_follows_conditions_bounds_log_and_step(tmp_path):
    sweep = load_sweep(optuna_sweep(tmp_path, SPACE, sampler={"name": "tpe", "seed": 0}, n_trials=60))
    opt = sweep.spec.optuna
    study = optuna.create_study(direction="maximize", sampler=make_sampler(opt), pruner=make_pruner(opt))
    seen_rules = set()
    for _ in range(60):
        trial = study.ask()
        a = suggest(trial, opt, sweep.spec.base)
        assert a == trial.params  # exactly what Optuna recorded for the trial
        rule = a["rl.update"]
        seen_rules.add(rule)
        other = "gxpo" if rule == "sfpo" else "sfpo"
        assert not any(k.startswith(f"rl.{other}.") for k in a), a
        assert {k for k in a if k.startswith(f"rl.{rule}.")} == (
            {"rl.sfpo.K", "rl.sfpo.alpha"} if rule == "sfpo" else {"rl.gxpo.tau", "rl.gxpo.K"})
        assert 1e-5 <= a["rl.lr"] <= 1e-3
        if rule == "sfpo":
            assert isinstance(a["rl.sfpo.K"], int) and 1 <= a["rl.sfpo.K"] <= 5
            assert 0.1 <= a["rl.sfpo.alpha"] <= 1.0
        else:
            assert 0.5 <= a["rl.gxpo.tau"] <= 4.0
            assert a["rl.gxpo.K"] in (2, 4, 6, 8, 10)
        cfg = RunConfig.model_validate(apply(sweep.spec.base, a))
        assert cfg.rl.update == rule and cfg.rl.lr == a["rl.lr"]
        # a score that prefers high lr, so TPE moves after its startup trials
        study.tell(trial, math.log10(a["rl.lr"]) + (1 if rule == "sfpo" else 0))
    assert seen_rules == {"sfpo", "gxpo"}
    dists = {k: d for t in study.trials for k, d in t.distributions.items()}
    assert dists["rl.lr"].log and dists["rl.gxpo.tau"].log and not dists["rl.sfpo.alpha"].log
    assert dists["rl.gxpo.K"].step == 2 and dists["rl.sfpo.K"].step == 1


def test_grid_sampler_enumerates_exactly_the_product(tmp_path):
    space = {"rl.update": C("grpo", "sfpo", "gxpo"), "rl.group_size": I(2, 8, step=2)}
    sweep = load_sweep(optuna_sweep(tmp_path, space, sampler={"name": "grid", "seed": 3}, n_trials=12))
    opt = sweep.spec.optuna
    assert grid_search_space(opt) == {"rl.update": ["grpo", "sfpo", "gxpo"], "rl.group_size": [2, 4, 6, 8]}
    study = optuna.create_study(sampler=make_sampler(opt))
    points = []
    for _ in range(opt.n_trials):
        trial = study.ask()
        a = suggest(trial, opt, sweep.spec.base)
        points.append((a["rl.update"], a["rl.group_size"]))
        study.tell(trial, 0.0)  # the last tell must not raise (see AskTellGridSampler)
    assert sorted(points) == sorted(itertools.product(["grpo", "sfpo", "gxpo"], [2, 4, 6, 8]))


def test_grid_of_a_float_with_step_is_exact(tmp_path):
    space = {"rl.update": C("sfpo"), "rl.sfpo.alpha": F(0.1, 0.5, step=0.1, when={"rl.update": "sfpo"})}
    opt = load_sweep(optuna_sweep(tmp_path, space, sampler={"name": "grid"}, n_trials=5)).spec.optuna
    assert grid_search_space(opt)["rl.sfpo.alpha"] == [0.1, 0.2, 0.3, 0.4, 0.5]


# ------------------------------------------------------------------------------------------------ storage
def test_default_journal_storage_lives_in_the_sweep_results_and_reloads(tmp_path):
    sweep = load_sweep(optuna_sweep(tmp_path, SPACE, sampler={"name": "random", "seed": 0}))
    opt, results = sweep.spec.optuna, tmp_path / "results"
    name = study_name(opt, sweep.name)
    study = optuna.create_study(study_name=name, storage=make_storage(opt, results, sweep.name),
                                sampler=make_sampler(opt), direction="maximize")
    trial = study.ask()
    assigned = suggest(trial, opt, sweep.spec.base)
    study.tell(trial, 0.5)
    path = results / sweep.name / "optuna.journal"
    assert journal_path(opt, results, sweep.name) == path and path.is_file() and path.stat().st_size > 0
    again = optuna.load_study(study_name=name, storage=make_storage(opt, results, sweep.name))
    assert [t.params for t in again.trials] == [assigned] and again.trials[0].value == 0.5


def test_journal_path_and_url_storages(tmp_path):
    where = tmp_path / "elsewhere" / "deep" / "s.journal"
    opt = load_sweep(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, storage=str(where))).spec.optuna
    storage = make_storage(opt, tmp_path / "results", "opt")
    assert where.parent.is_dir() and not (tmp_path / "results").exists()
    optuna.create_study(study_name="s", storage=storage)
    assert optuna.load_study(study_name="s", storage=make_storage(opt, tmp_path / "r", "opt")).study_name == "s"
    url = f"sqlite:///{tmp_path / 'o.db'}"
    opt = load_sweep(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, storage=url, name="u")).spec.optuna
    assert make_storage(opt, tmp_path / "results", "u") == url  # optuna opens URLs itself


EVERY_2 = TINY_BASE.replace("eval: {k: 2, max_new_tokens: 16}", "eval: {k: 2, max_new_tokens: 16, every: 2}")


VERL_EVERY_2 = (EVERY_2.replace("base:\n", "base:\n  engine: {name: verl, verl: {model_path: m}}\n")
                .replace("sft: {steps: 20,", "sft: {enabled: false, steps: 20,"))


@pytest.mark.parametrize("base, message", [
    (TINY_BASE, "optuna.pruner: pruning reads intermediate evals: set eval.every"),
    (EVERY_2.replace("checkpoint_every: 2}", "checkpoint_every: 2, segment_steps: 0}"),
     "optuna.pruner: a trial is pruned between the segments of its runs, but base.rl.segment_steps 0 trains each "
     "run in one job"),
    (VERL_EVERY_2.replace("checkpoint_every: 2}", "checkpoint_every: 2, segment_steps: 0}"),
     "optuna.pruner: a trial is pruned between the segments of its runs, but base.rl.segment_steps 0 trains each "
     "run in one job"),
])
def test_pruning_needs_runs_that_split_at_their_evaluations(tmp_path, base, message):
    assert message in errors_of(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, base=base,
                                             pruner={"name": "median"}))


@pytest.mark.parametrize("base, top", [
    (EVERY_2, {"seeds": [0, 1]}),  # several seeds: the pruner reads their mean
    (VERL_EVERY_2, None),  # verl splits at its evaluated steps by default
], ids=["local-two-seeds", "verl"])
def test_pruning_takes_several_seeds_and_any_engine_that_trains_in_segments(tmp_path, base, top):
    sweep = load_sweep(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, top=top, base=base,
                                    pruner={"name": "median"}))
    assert sweep.spec.optuna.pruner.name == "median"


def test_pruners_and_sampler_options_reach_optuna(tmp_path):
    opt = load_sweep(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, base=EVERY_2,
                                  sampler={"name": "tpe", "seed": 1, "options": {"n_startup_trials": 2}},
                                  pruner={"name": "hyperband", "options": {"min_resource": 2,
                                                                           "reduction_factor": 4}})).spec.optuna
    sampler = make_sampler(opt)
    assert isinstance(sampler, optuna.samplers.TPESampler) and sampler._n_startup_trials == 2
    pruner = make_pruner(opt)
    assert isinstance(pruner, optuna.pruners.HyperbandPruner) and pruner._min_resource == 2
    none = load_sweep(optuna_sweep(tmp_path, {"rl.lr": F(1e-5, 1e-3)}, name="n")).spec.optuna
    assert isinstance(make_pruner(none), optuna.pruners.NopPruner)
