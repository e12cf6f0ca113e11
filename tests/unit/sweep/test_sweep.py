"""Sweep files -> runs: validation messages, expansion, identity."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import refusal, write_sweep
from workflow.sweep.expand import load_sweep
from workflow.identity import stable_id


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("body, expected", [
    ("grid: {rl.lrr: [1.0e-4]}\n", "grid.rl.lrr: unknown key 'lrr' in rl; did you mean 'lr'?"),
    ("grid: {rl.lr: []}\n", "grid.rl.lr: empty list"),
    ("grid: {rl.lr: [-1.0]}\n", "rl.lr: Input should be greater than 0"),
    ("grid: {rl: [1]}\n", "grid.rl: 'rl' is a section"),
    ("grid: {rl.lr.x: [1]}\n", "grid.rl.lr.x: 'rl.lr' is a value, not a section"),
    ("grid: {seed: [1, 2]}\n", "grid.seed: use the top-level `seeds:` list"),
    ("grid: {rl.lr: [1.0e-4, 0.0001]}\n", "expand to the same run"),
    ("grid: {rl.steps: [ten]}\n", "rl.steps: Input should be a valid integer"),
    ("seeds: []\n", "seeds: Value error, empty list"),
    ("zip: {rl.lr: [1.0e-4, 2.0e-4], rl.steps: [3]}\n",
     "zip: lists must have the same length, got rl.lr: 2, rl.steps: 1"),
    ("grid: {rl.lr: [1.0e-4]}\nexclude: [{rl.lr: 1.0e-4}]\n", "exclude: every grid point is excluded"),
    ("grid: {rl.kl_coef: {values: [0.1], when: {rl.nope: 1}}}\n", "grid.rl.kl_coef.when.rl.nope: unknown key 'nope'"),
    ("typo_key: 3\n", "typo_key: unknown key"),
    # update rules and evaluation
    ("grid: {rl.sfpo.K: [0]}\n", "rl.sfpo.K: Input should be greater than or equal to 1"),
    ("grid: {rl.gxpo.K: [1]}\n", "rl.gxpo.K: Input should be greater than or equal to 2"),
    ("grid: {rl.sfpo.alpha: [1.2]}\n", "rl.sfpo.alpha: Input should be less than or equal to 1"),
    ("grid: {rl.gxpo.alpha: [-0.1]}\n", "rl.gxpo.alpha: Input should be greater than or equal to 0"),
    ("grid: {rl.gxpo.tau: [0]}\n", "rl.gxpo.tau: Input should be greater than 0"),
    ("grid: {rl.sfpo.window: [1]}\n", "rl.sfpo.window: Input should be greater than or equal to 2"),
    ("grid: {rl.update: [ppo]}\n", "rl.update: unknown update rule 'ppo'; known: grpo, gxpo, sfpo"),
    ("grid: {rl.gxpo.ratio_source: [hessian]}\n", "rl.gxpo.ratio_source: Input should be 'grad' or 'displacement'"),
    ("grid: {eval.every: [3]}\n", "eval.every: 3 must be a multiple of rl.checkpoint_every (2)"),
    ("grid: {eval.benchmarks: [[math5000]]}\n", "unknown benchmark(s) ['math5000']"),
    ("grid: {eval.benchmarks: [[math500]]}\n", "the local engine's tiny character-level models can only answer"),
    # varying an SFPO knob over GRPO runs makes identical runs: the error says so (use `when:`)
    ("grid: {rl.sfpo.K: [3, 5]}\n", "expand to the same run"),
    # resources
    ("resources: {rl: {time: 25h}}\n", "resources.rl.time: Value error, '25h' is not a time limit"),
    ("resources: {sft: {mem: lots}}\n", "resources.sft.mem: Value error, 'lots' is not a memory size"),
    ("resources: {eval: {sbatch_extra: [gres=gpu:1]}}\n", "must be a long flag"),
    ("resources: {rl: {gpus_per_node: -1}}\n", "resources.rl.gpus_per_node: Input should be greater than or equal"),
    ("resources: {train: {threads: 2}}\n", "resources.train: unknown key"),
])
def test_bad_input_names_file_key_and_reason(tmp_path, body, expected):
    path = write_sweep(tmp_path / "bad.yaml", "bad", body)
    msg = refusal(path)
    assert str(path) in msg
    assert expected in msg, msg


def test_bad_base_value_and_unknown_base_key(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("name: b\nbase: {rl: {clip_low: 1.5, lrate: 3}, model: {hidden: 30, n_heads: 4}}\n")
    msg = refusal(path)
    assert "base.rl.clip_low: Input should be less than 1" in msg
    assert "base.rl.lrate: unknown key" in msg
    assert "base.model.hidden: 30 must be divisible by n_heads (4)" in msg


def test_missing_file_and_bad_yaml_and_bad_name(tmp_path):
    assert "sweep file not found" in refusal(tmp_path / "nope.yaml")
    (tmp_path / "y.yaml").write_text("name: [unclosed\n")
    assert "not valid YAML" in refusal(tmp_path / "y.yaml")
    (tmp_path / "n.yaml").write_text("name: ../escape\n")
    assert "name: Value error, must be 1-64 characters" in refusal(tmp_path / "n.yaml")


# ------------------------------------------------------------------------------------------------ expansion
def test_grid_zip_exclude_and_conditional_axes(tmp_path):
    path = write_sweep(tmp_path / "s.yaml", "s", """
        grid:
          rl.std_norm: [true, false]
          rl.kl_coef: {values: [0.0, 0.05], when: {rl.std_norm: true}}
        zip:
          rl.lr: [1.0e-4, 5.0e-5]
          rl.steps: [4, 8]
        exclude:
          - {rl.std_norm: false, rl.lr: 5.0e-5}
        seeds: [0, 1]
    """)
    runs = load_sweep(path).runs
    points = {(r.config.rl.std_norm, r.config.rl.kl_coef, r.config.rl.lr, r.config.rl.steps) for r in runs}
    # std_norm=true: 2 kl x 2 zip; std_norm=false: kl stays at its base value, 2 zip minus the excluded one
    assert points == {(True, 0.0, 1e-4, 4), (True, 0.05, 1e-4, 4), (True, 0.0, 5e-5, 8), (True, 0.05, 5e-5, 8),
                      (False, 0.0, 1e-4, 4)}
    assert len(runs) == 5 * 2
    assert len({r.run_id for r in runs}) == len(runs)
    assert all("rl.kl_coef" not in r.assignment for r in runs if not r.config.rl.std_norm)


def test_rl_runs_share_one_sft_job_unless_sft_changes(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "s.yaml", "s", "grid: {rl.lr: [1.0e-4, 2.0e-4]}\nseeds: [0, 1, 2]\n"))
    assert len(sweep.runs) == 6 and len(sweep.jobs("sft")) == 1
    sweep = load_sweep(write_sweep(tmp_path / "t.yaml", "t", "grid: {sft.steps: [10, 20]}\nseeds: [0, 1]\n"))
    assert len(sweep.jobs("sft")) == 2
    # eval settings do not change the RL run id: changing them never retrains
    a = load_sweep(write_sweep(tmp_path / "a.yaml", "a", "grid: {eval.k: [2, 4]}\n"))
    assert len({r.run_id for r in a.runs}) == 1 and len({r.eval_id for r in a.runs}) == 2


def test_ids_do_not_depend_on_yaml_key_order_number_spelling_or_process(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("name: x\nbase: {rl: {lr: 1e-4, steps: 5}, sft: {steps: 7}}\ngrid: {rl.clip_high: [0.28]}\n")
    b = tmp_path / "b.yaml"
    b.write_text("grid:\n  rl.clip_high: [0.28]\nbase:\n  sft: {steps: 7}\n  rl: {steps: 5, lr: 0.0001}\nname: x\n")
    ids_a = [(r.sft_id, r.run_id, r.eval_id) for r in load_sweep(a).runs]
    assert ids_a == [(r.sft_id, r.run_id, r.eval_id) for r in load_sweep(b).runs]
    code = ("import json,sys; from workflow.sweep.expand import load_sweep; "
            "print(json.dumps([(r.sft_id, r.run_id, r.eval_id) for r in load_sweep(sys.argv[1]).runs]))")
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code, str(a)], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        assert [tuple(x) for x in json.loads(out)] == ids_a


def test_stable_id_is_sha256_of_canonical_json():
    # The documented canonical form: sorted keys, no spaces, shortest float repr. Pinning it protects every
    # existing results directory from a silent change of ids.
    import hashlib
    obj = {"b": [1, 2.5, "x"], "a": {"d": None, "c": True}}
    canonical = '{"a":{"c":true,"d":null},"b":[1,2.5,"x"]}'
    assert stable_id(obj) == hashlib.sha256(canonical.encode()).hexdigest()[:12]
    assert stable_id({"a": 0.1 + 0.2}) != stable_id({"a": 0.3})  # no rounding: different configs, different ids
    with pytest.raises(ValueError):
        stable_id({"lr": float("nan")})


def test_rule_knobs_vary_only_where_the_rule_applies(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "r.yaml", "r", """
        grid:
          rl.update: [grpo, sfpo, gxpo]
          rl.sfpo.alpha: {values: [0.5, 0.8], when: {rl.update: sfpo}}
          rl.gxpo.K: {values: [3, 5, 10], when: {rl.update: gxpo}}
    """))
    by_rule = {}
    for r in sweep.runs:
        by_rule.setdefault(r.method, []).append(r)
    assert {k: len(v) for k, v in by_rule.items()} == {"grpo": 1, "sfpo": 2, "gxpo": 3}
    assert len(sweep.jobs("sft")) == 1


def test_resources_do_not_change_run_ids_and_convert_for_schedulers(tmp_path):
    a = load_sweep(write_sweep(tmp_path / "a.yaml", "a", ""))
    b = load_sweep(write_sweep(tmp_path / "b.yaml", "a", "resources: {rl: {threads: 4, time: '1-02:30:00', "
                                                          "mem: 64G, partition: gpu}}\n"))
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]
    rl = b.spec.resources.rl
    assert (rl.time_minutes, rl.mem_gb, rl.threads) == (24 * 60 + 150, 64, 4)
    assert a.spec.resources.sft.gpus_per_node == 1 and a.spec.resources.sft.time == "12:00:00"


def test_runs_share_a_step0_evaluation_only_with_the_same_sft_checkpoint_and_eval_settings(tmp_path):
    body = "grid:\n  rl.lr: [1.0e-4, 2.0e-4]\n  sft.lr: [1.0e-3, 2.0e-3]\n  eval.k: [2, 4]\nseeds: [0, 1]\n"
    sweep = load_sweep(write_sweep(tmp_path / "s.yaml", "s", body))
    assert sweep.start_sources() == {}  # no eval.at_start: no step-0 evaluation to share
    path = write_sweep(tmp_path / "a.yaml", "a", body)
    path.write_text(path.read_text().replace("eval: {k: 2,", "eval: {at_start: true, k: 2,"))
    sweep = load_sweep(path)
    sources = sweep.start_sources()
    assert len(sweep.runs) == 16 and len(sources) == 16 - 4  # one evaluation per SFT checkpoint x eval.k
    for eval_id, source in sources.items():
        run = next(r for r in sweep.runs if r.eval_id == eval_id)
        assert source.eval_id not in sources and sweep.runs.index(source) < sweep.runs.index(run)
        assert (source.sft_id, source.config.eval.k) == (run.sft_id, run.config.eval.k)
    assert len({(r.sft_id, r.config.eval.k) for r in sweep.runs}) == 4
