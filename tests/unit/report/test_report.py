"""`rlsweep report`: on tables small enough to check by hand (two settings x 3 seeds, one run failed), the accuracy
table (mean ± std, the 95% t interval, the best marked, the starting point, a cell short of seeds), the efficiency
table against the baseline, the figures, the runs marked, and the shipped queries giving the same numbers again."""

from __future__ import annotations

import math
import re

import pytest

from helpers import cli, write_sweep
from workflow.layout import eval_file, table_dir, train_steps_file
from workflow.results.membership import Member, record
from workflow.results.writer import write_rows

SWEEP = """
grid:
  rl.update: [grpo, sfpo]
seeds: [0, 1, 2]
"""
# avg@k at steps 2 and 4 per seed; sfpo's seed 2 failed before any evaluation
ACC = {"grpo": {2: [0.2, 0.3, 0.4], 4: [0.4, 0.5, 0.6]}, "sfpo": {2: [0.5, 0.6], 4: [0.6, 0.7]}}
# per problem, its two samples' correctness (every seed alike): grpo 0, .5, .5, 1; sfpo .5, .5, 1, 1
SAMPLES = {"grpo": [(0, 0), (1, 0), (0, 1), (1, 1)], "sfpo": [(1, 0), (1, 0), (1, 1), (1, 1)]}
START = [(0, 0), (0, 0), (1, 0), (0, 1)]  # step 0 (the SFT model every run starts from): 0, 0, .5, .5
PASSES = {"grpo": 1, "sfpo": 4}  # backward passes per step; flops = 100 x passes, wall_s = 1 s x (1 + (sfpo))


def final_eval(run) -> str:
    """The name of a run's eval files (layout.eval_file): these hold its step-0 and final evaluations."""
    return eval_file(run.run_id, run.eval_id, run.config.rl.steps, "arithmetic")


@pytest.fixture
def sweep_results(tmp_path):
    from workflow.sweep.expand import load_sweep
    path = write_sweep(tmp_path / "rep.yaml", "rep", SWEEP)
    path.write_text(path.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                             "eval: {k: 2, max_new_tokens: 16, every: 2, at_start: true}"))
    sweep = load_sweep(path)
    results = tmp_path / "results"
    for run in sweep.runs:
        method, seed = run.method, run.config.seed
        failed = method == "sfpo" and seed == 2
        write_rows(results, "runs", f"rl_{run.run_id}", [dict(
            run_id=run.run_id, sweep="rep", stage="rl", parent_id=run.sft_id, method=method, label=run.label,
            seed=seed, status="failed" if failed else "completed", error="RuntimeError: boom" if failed else None)])
        steps = 1 if failed else 4
        write_rows(results, "train_steps", train_steps_file("rl", run.run_id, 1, steps), [dict(
            run_id=run.run_id, sweep="rep", stage="rl", step=s, reward=0.1 * s, entropy=1.0 - 0.1 * s,
            backward_passes=PASSES[method], rollouts=16, flops=100.0 * PASSES[method],
            wall_s=1.0 + (method == "sfpo"), gate_tripped=method == "sfpo" and s == 2,
            off_policy_frac=0.1 * s if method == "sfpo" else None) for s in range(1, steps + 1)])
        if failed:
            continue
        scores = {0: 0.1, **{step: acc[seed] for step, acc in ACC[method].items()}}
        # the start's and the final evaluation's samples: 4 problems x 2 samples
        write_rows(results, "eval_samples", final_eval(run), [dict(
            run_id=run.run_id, eval_id=run.eval_id, sweep="rep", step=step, benchmark="arithmetic",
            problem_id=f"p{i}", sample_idx=j, correct=bool(c))
            for step, correct in ((0, START), (4, SAMPLES[method])) for i, pair in enumerate(correct)
            for j, c in enumerate(pair)])
        write_rows(results, "eval_scores", final_eval(run), [dict(
            run_id=run.run_id, eval_id=run.eval_id, sweep="rep", step=step, benchmark="arithmetic", k=2,
            avg_at_k=a, pass_at_k=a, n_problems=16, n_samples=2, mean_len=5.0, avg_ci_low=a - 0.05,
            avg_ci_high=a + 0.05) for step, a in scores.items()])
    record(results, sweep.name, sweep.members())  # what Snakemake records when it plans the sweep
    return sweep, results


def cells(markdown: str, section: str) -> dict[str, list[str]]:
    """The rows of a section's table, by first cell."""
    part = markdown.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in part.splitlines() if line.startswith("| ")]
    return {r[0] if section not in ("Efficiency", "Noise", "Did RL") else r[1]: r for r in rows[1:]}


def test_the_report_shows_accuracy_efficiency_curves_and_the_failed_run(sweep_results):
    from workflow.report.build import write_report
    sweep, results = sweep_results
    index = write_report(sweep, results)
    out = index.parent
    md = (out / "report.md").read_text()

    acc = cells(md, "Accuracy")
    t2, t1 = 4.302653, 12.706205  # Student's t 0.975 quantiles, 2 and 1 degrees of freedom
    half = t2 * 0.1 / math.sqrt(3)
    assert acc["rl.update=grpo"][2] == "3"  # seeds
    assert acc["rl.update=grpo"][3] == f"0.500 ± 0.100 [{0.5 - half:.3f}, {0.5 + half:.3f}]"
    sd = math.sqrt(0.005)  # seeds 0.6, 0.7
    half = t1 * sd / math.sqrt(2)
    assert acc["rl.update=sfpo"][3] == f"**0.650 ± {sd:.3f} [{0.65 - half:.3f}, 1.000] (n=2 of 3)**"  # clipped
    # the SFT model: one row, one evaluation with its interval over problems
    assert acc["start (step 0)"][1:] == ["sft", "—", "0.100 [0.050, 0.150]"]

    eff = cells(md, "Efficiency")  # target: grpo's best mean, 0.5 at step 4 (sfpo reaches 0.55 at step 2)
    assert eff["rl.update=grpo (baseline)"][2:9] == ["0.500", "0.500", "×1.00 (4)", "×1.00 (4)", "×1.00 (64)",
                                                     "×1.00 (400)", "×1.00 (4)"]
    assert eff["rl.update=sfpo"][2:11] == ["0.500", "0.650", "**×0.50 (2)**", "×2.00 (8)", "**×0.50 (32)**",
                                           "×2.00 (800)", "×1.00 (4)", "—", "0.550"]
    # at grpo's 4 backward passes sfpo had no evaluation yet (step 2 = 8 passes); at its 4 s, step 2's 0.55

    noise = cells(md, "Noise")  # paired with grpo on seeds 0 and 1: per-problem differences .5, 0, .5, 0
    assert noise["rl.update=sfpo"][2:4] == ["2", "4"] and noise["rl.update=sfpo"][4].startswith("+0.250 [")
    low, high = (float(x) for x in re.findall(r"[+-]\d\.\d+", noise["rl.update=sfpo"][4])[1:])
    p = float(noise["rl.update=sfpo"][5])  # a resample sees 0 when it draws only the two tied problems
    assert 0 <= low < 0.25 < high <= 0.5 and 0.02 < p < 0.4

    # final minus start: grpo's per-problem gains 0, .5, 0, .5 (a resample of only the 0s: 1 in 16), sfpo's .5 on
    # every problem (no resample can hold 0); beside them the start, the final mean ± std and the training FLOPs
    # (4 steps x 100 x backward passes; sfpo's failed seed, which trained 1 of its 4 steps, not counted)
    gain = cells(md, "Did RL")
    assert gain["rl.update=grpo"][2:5] == ["3", "0.100", "0.500 ± 0.100"]
    assert gain["rl.update=grpo"][5].startswith("+0.250 [+0.000, ") and gain["rl.update=grpo"][7] == "400"
    assert 0.05 < float(gain["rl.update=grpo"][6]) < 0.25
    assert gain["rl.update=sfpo"][2:] == ["2", "0.100", f"0.650 ± {sd:.3f}", "**+0.500 [+0.500, +0.500]**",
                                          "< 0.001", "1600"]

    runs = cells(md, "Runs")
    failed = [r for r in runs.values() if r[3] == "**FAILED**"]
    assert len(failed) == 1 and failed[0][:2] == ["rl.update=sfpo", "2"] and failed[0][4] == "1/4"
    assert "1 run(s) failed: rl.update=sfpo seed 2" in md

    # the methods' own numbers: sfpo's runs logged off_policy_frac (a card's column), grpo's none
    for name in ("train_curves", "method_curves", "accuracy_arithmetic"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 5000 and (out / "figures" / f"{name}.svg").is_file()
    html = index.read_text()
    assert html.count('src="data:image/png;base64,') == 3 and not re.search(r'(src|href)="(https?:)?//', html)
    assert '<table id="accuracy">' in html and '<td class="failed"' in html and "RuntimeError: boom" in html


@pytest.mark.slow  # builds a report
def test_the_shipped_queries_give_the_reports_numbers_again(sweep_results):
    from workflow.report.build import write_report
    sweep, results = sweep_results
    out = write_report(sweep, results).parent
    text = (out / "queries.sql").read_text()
    block = re.search(r"^-- name: accuracy\n(.*?)^;$", text, re.S | re.M)[1]
    res = cli("--results", str(results), "query", block, "--sweep", "rep", "--format", "json")
    assert res.returncode == 0, res.stderr
    import json
    rows = {(r["label"], r["start"]): r for r in json.loads(res.stdout)}
    assert rows[("rl.update=grpo", False)]["mean"] == pytest.approx(0.5)
    assert rows[("rl.update=sfpo", False)]["seeds"] == 2 and rows[("start", True)]["mean"] == pytest.approx(0.1)


@pytest.mark.slow  # (the CLI as subprocesses: seconds each; the fast tier keeps under 2 min)
def test_the_cli_writes_the_report_and_a_baseline_must_be_a_setting(sweep_results, tmp_path):
    from helpers import refusal
    sweep, results = sweep_results
    res = cli("report", sweep.path, "--results", str(results))
    assert res.returncode == 0, res.stderr
    assert (results / "rep" / "report" / "index.html").is_file() and "report.md" in res.stderr
    bad = write_sweep(tmp_path / "bad.yaml", "rep", SWEEP + "report: {baseline: rl.update=gxpo}\n")
    assert "report.baseline: 'rl.update=gxpo' is none of the sweep's settings ('rl.update=grpo', " \
           "'rl.update=sfpo')" in refusal(bad)
    nothing = cli("report", str(bad).replace("bad", "none"), "--results", str(tmp_path / "empty"))
    assert nothing.returncode != 0


def test_without_a_single_grpo_setting_the_report_says_how_to_name_the_baseline(tmp_path):
    from workflow.report.build import write_report
    from workflow.sweep.expand import load_sweep
    path = write_sweep(tmp_path / "lr.yaml", "lr", "grid:\n  rl.lr: [1.0e-4, 2.0e-4]\n")
    sweep = load_sweep(path)
    results = tmp_path / "results"
    for run in sweep.runs:
        write_rows(results, "train_steps", train_steps_file("rl", run.run_id, 1, 1),
                   [dict(run_id=run.run_id, sweep="lr", stage="rl", step=1, reward=0.5)])
    md = (write_report(sweep, results).parent / "report.md").read_text()
    assert "name the baseline with `report: {baseline: SETTING}`" in md
    assert "## Efficiency" not in md and "2 run(s) not finished" in md


def test_the_readmes_example_sweep_loads_with_its_report_baseline(tmp_path):
    from helpers import REPO
    from workflow.sweep.expand import load_sweep
    text = (REPO / "README.md").read_text().split("## A sweep file", 1)[1]
    (tmp_path / "example.yaml").write_text(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    sweep = load_sweep(tmp_path / "example.yaml")
    assert sweep.spec.report.baseline in {r.label for r in sweep.runs}


def headless_browser() -> str:
    """A Chromium to render the report with (scripts/headless_browser.sh installs Debian's as root); a skip where
    there is none, a failure under RLSWEEP_REQUIRE_BROWSER=1 (CI)."""
    import os
    import subprocess
    from helpers import REPO
    found = subprocess.run([str(REPO / "scripts" / "headless_browser.sh")], capture_output=True, text=True,
                           timeout=900)
    if found.returncode != 0:
        if os.environ.get("RLSWEEP_REQUIRE_BROWSER") == "1":
            pytest.fail(f"RLSWEEP_REQUIRE_BROWSER is set but: {found.stderr.strip()}")
        pytest.skip(found.stderr.strip())
    return found.stdout.strip()


# run in the page once it has loaded: what a reader would see (images decoded, tables with their rows)
PROBE = """<script>window.addEventListener("load", () => document.body.setAttribute("data-check", JSON.stringify({
images: [...document.images].map(i => i.naturalWidth),
tables: Object.fromEntries([...document.querySelectorAll("table")].map(t => [t.id, t.rows.length]))})));</script>"""


def test_a_setting_with_one_seeds_evaluation_shows_its_mean_without_a_spread_or_interval(sweep_results):
    from workflow.report.build import write_report
    sweep, results = sweep_results
    sfpo_seed_1 = next(r for r in sweep.runs if r.method == "sfpo" and r.config.seed == 1)
    for table in ("eval_scores", "eval_samples"):
        (table_dir(results, table) / f"{final_eval(sfpo_seed_1)}.parquet").unlink()
    md = (write_report(sweep, results).parent / "report.md").read_text()
    assert cells(md, "Accuracy")["rl.update=sfpo"][3] == "**0.600 (n=1 of 3)**"  # seed 0 alone: no std, no t interval


@pytest.mark.slow  # builds reports
def test_the_seeds_section_sizes_claims_from_the_spread_the_sweep_measured(sweep_results):
    from workflow.report import power
    from workflow.report.build import write_report
    sweep, results = sweep_results
    md = (write_report(sweep, results).parent / "report.md").read_text()
    # every seed of a setting has the same final samples: no spread between seeds, only each run's sampling noise,
    # per problem accuracy 0, .5, .5, 1 (grpo) or .5, .5, 1, 1 (sfpo) over k=2: (.25 + .25) / (2 - 1) / 4^2
    run_variance = 0.5 / 16
    part = md.split("## How many seeds a claim needs", 1)[1].split("\n## ", 1)[0]
    spread = [line for line in part.splitlines() if line.startswith("| arithmetic | 2 |")][0].split(" | ")
    assert spread[2:4] == ["0.000", f"{run_variance ** 0.5:.3f}"]
    assert spread[4] == f"{power.detectable(run_variance, 3):.3f}"  # 3 seeds per setting planned
    assert spread[5:] == [f"{power.seeds_needed(d, run_variance)}" for d in (0.01, 0.02)] + [
        f"{power.seeds_needed(0.05, run_variance)} |"]
    claim = [line for line in part.splitlines() if line.startswith("| arithmetic | rl.update=sfpo |")][0]
    assert "| 2 | +0.250 |" in claim and "below what these seeds detect" in claim  # 2 seeds detect ~1.0 only


@pytest.mark.slow  # builds a report
def test_the_graders_section_flags_a_winner_that_changes_with_the_grader(sweep_results):
    from workflow.report.build import write_report
    sweep, results = sweep_results
    no_graders = (write_report(sweep, results).parent / "report.md").read_text()
    assert "## Graders" not in no_graders  # nothing judged again: no section
    for run in sweep.runs:
        if run.method == "sfpo" and run.config.seed == 2:
            continue
        # math_equal finds every grpo sample right and every sfpo sample wrong: the winner flips
        verdict = run.method == "grpo"
        write_rows(results, "eval_grades", f"{run.run_id}_{run.eval_id}_step000004_arithmetic-math_equal",
                   [dict(run_id=run.run_id, eval_id=run.eval_id, sweep="rep", step=4, benchmark="arithmetic",
                         problem_id=f"p{i}", sample_idx=j, grader="math_equal", correct=verdict, extracted="7",
                         gold="8") for i in range(4) for j in range(2)])
    md = (write_report(sweep, results).parent / "report.md").read_text()
    assert "| arithmetic | rl.update=grpo | 0.500 | **1.000** |" in md  # exact (own), then math_equal
    assert "| arithmetic | rl.update=sfpo | **0.750** | 0.000 |" in md
    assert ("arithmetic: the best setting changes with the grader: rl.update=sfpo under exact; rl.update=grpo under "
            "math_equal.") in md
    assert "arithmetic: rl.update=sfpo − rl.update=grpo changes sign with the grader: +0.250 under exact, -1.000 " \
           "under math_equal." in md
    # over every judged sample: grpo 3 seeds x 8 samples, 4 right by exact (all by math_equal); sfpo 2 x 8, 6 right
    # by exact (none by math_equal): 12 + 12 of 40 disagree
    assert "| arithmetic | math_equal | exact | 40 | 60.00% | 0.600 | 0.600 | 12 | 12 |" in md


@pytest.mark.slow  # builds a report
def test_published_references_sit_beside_the_measured_rows_with_the_papers_own_averages_checked(sweep_results):
    from workflow.report.build import write_report
    from workflow.sweep.expand import load_sweep
    sweep, results = sweep_results
    path = sweep.path
    text = open(path).read() + ("report:\n  references: [{file: references/published.yaml, papers: [sft_then_rl], "
                                "models: [Qwen2.5-Math-7B]}]\n")
    with open(path, "w") as f:
        f.write(text)
    md = (write_report(load_sweep(path), results).parent / "report.md").read_text()
    part = md.split("## Published references", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("| ")][1:]  # (after the header)
    assert rows[0].startswith("| measured: start (step 0) | this sweep |")  # the sweep's own rows first
    assert rows[1].startswith("| measured: rl.update=grpo | this sweep |") and "| 0.500 |" in rows[1]
    published = [r for r in rows if r.startswith("| sft_then_rl |")]
    assert published and all("Qwen2.5-Math-7B" in r for r in published)
    # Table 1 averages the six math benchmarks: recomputed, its stated Avg ID agrees; Table 2 averages another set
    assert "Flagged, sft_then_rl Table 2 (" in part and "minerva missing" in part
    assert "Flagged, sft_then_rl Table 1" not in part


@pytest.mark.slow
def test_the_html_report_renders_in_a_real_browser_from_a_file_url(sweep_results, tmp_path):
    import html
    import json
    import shutil
    import subprocess
    from workflow.report.build import write_report
    chromium = headless_browser()
    sweep, results = sweep_results
    index = write_report(sweep, results)
    alone = tmp_path / "laptop" / "index.html"  # copied on its own: nothing it shows may come from beside it
    alone.parent.mkdir()
    shutil.copy(index, alone)
    probe = alone.with_name("probe.html")
    probe.write_text(alone.read_text().replace("</body>", PROBE + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run([chromium, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    seen = json.loads(html.unescape(re.search(r'data-check="([^"]*)"', dom)[1]))
    assert len(seen["images"]) == 3 and all(width > 300 for width in seen["images"])  # every figure decoded
    assert seen["tables"] == {"accuracy": 4, "efficiency": 3, "gain": 3, "paired": 2, "runs": 7,  # header + rows
                              "seeds-1": 2, "seeds-2": 2}
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *flags, "--window-size=1280,2400", f"--screenshot={shot}", alone.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one


@pytest.mark.slow  # imports verl, builds a report
def test_each_starting_model_has_its_own_start_row(tmp_path):
    """verl runs without SFT start from their model_path: a sweep over two models shows two start rows, each its
    own model's step-0 evaluation."""
    pytest.importorskip("verl")  # a verl sweep is validated by verl's config classes when it loads
    from workflow.report.build import write_report
    from workflow.sweep.expand import load_sweep
    base = """
    base:
      engine: {name: verl, verl: {n_gpus_per_node: 2, model_path: Qwen/Qwen2.5-Math-1.5B}}
      sft: {enabled: false}
      rl: {steps: 4, prompts_per_step: 16, group_size: 4}
      eval: {at_start: true, benchmarks: [arithmetic]}
    """
    body = "grid:\n  engine.verl.model_path: [Qwen/Qwen2.5-Math-1.5B, Qwen/Qwen2.5-1.5B]\nseeds: [0, 1]\n"
    sweep = load_sweep(write_sweep(tmp_path / "m.yaml", "m", body, base=base))
    results, start_acc = tmp_path / "results", {"Qwen/Qwen2.5-Math-1.5B": 0.4, "Qwen/Qwen2.5-1.5B": 0.2}
    for run in sweep.runs:
        write_rows(results, "runs", f"rl_{run.run_id}", [dict(
            run_id=run.run_id, sweep="m", stage="rl", parent_id=None, method="grpo", label=run.label,
            seed=run.config.seed, status="completed", error=None)])
        a0 = start_acc[run.start]
        write_rows(results, "eval_scores", final_eval(run), [dict(
            run_id=run.run_id, eval_id=run.eval_id, sweep="m", step=step, benchmark="arithmetic", k=2,
            avg_at_k=a, pass_at_k=a, n_problems=16, n_samples=2, mean_len=5.0, avg_ci_low=a - 0.05,
            avg_ci_high=a + 0.05) for step, a in ((0, a0), (4, a0 + 0.1))])
    acc = cells((write_report(sweep, results).parent / "report.md").read_text(), "Accuracy")
    assert acc["start (step 0), Qwen/Qwen2.5-Math-1.5B"][1:] == ["base", "—", "0.400 [0.350, 0.450]"]
    assert acc["start (step 0), Qwen/Qwen2.5-1.5B"][1:] == ["base", "—", "0.200 [0.150, 0.250]"]


def test_one_checkpoint_evaluated_under_two_eval_settings_has_a_start_row_for_each(tmp_path):
    """A grid over eval.temperature: the SFT checkpoint's step 0 is evaluated once per temperature, and each of
    those evaluations is its own start row (not one of them standing for both)."""
    from workflow.report.build import write_report
    from workflow.sweep.expand import load_sweep
    body = "grid:\n  eval.temperature: [0.6, 1.0]\nseeds: [0, 1]\n"
    path = write_sweep(tmp_path / "t.yaml", "t", body)
    path.write_text(path.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                             "eval: {k: 2, max_new_tokens: 16, at_start: true}"))
    sweep = load_sweep(path)
    # one SFT job and one RL job per seed, each RL run evaluated under both temperatures
    assert len({r.sft_id for r in sweep.runs}) == 1 and len({r.run_id for r in sweep.runs}) == 2
    assert len({r.start_key for r in sweep.runs}) == 2
    results, start_acc = tmp_path / "results", {0.6: 0.4, 1.0: 0.2}
    for run in sweep.runs:
        write_rows(results, "runs", f"rl_{run.run_id}", [dict(
            run_id=run.run_id, sweep="t", stage="rl", parent_id=run.sft_id, method="grpo", label=run.label,
            seed=run.config.seed, status="completed", error=None)])
        a0 = start_acc[run.config.eval.temperature]
        write_rows(results, "eval_scores", final_eval(run), [dict(
            run_id=run.run_id, eval_id=run.eval_id, sweep="t", step=step, benchmark="arithmetic", k=2,
            avg_at_k=a, pass_at_k=a, n_problems=16, n_samples=2, mean_len=5.0, avg_ci_low=a - 0.05,
            avg_ci_high=a + 0.05) for step, a in ((0, a0), (run.config.rl.steps, a0 + 0.1))])
    acc = cells((write_report(sweep, results).parent / "report.md").read_text(), "Accuracy")
    starts = {name: row[1:] for name, row in acc.items() if name.startswith("start (step 0)")}
    sft = f"SFT {sweep.runs[0].sft_id}"
    assert starts == {f"start (step 0), {sft} eval.temperature=0.6": ["sft", "—", "0.400 [0.350, 0.450]"],
                      f"start (step 0), {sft} eval.temperature=1.0": ["sft", "—", "0.200 [0.150, 0.250]"]}
    # and each temperature's final evaluations are its own setting's (both RL runs, none of the other's)
    assert acc["eval.temperature=0.6"][3] == "**0.500 ± 0.000 [0.500, 0.500]**"  # (best of the column)
    assert acc["eval.temperature=1.0"][3] == "0.300 ± 0.000 [0.300, 0.300]"


def test_gpu_hours_are_wall_clock_times_the_runs_gpus(sweep_results, tmp_path):
    from dataclasses import replace
    from workflow.report.build import planned_runs
    from workflow.report.queries import fill, run_all
    from workflow.report.tables import efficiency
    from workflow.results.catalog import Catalog
    sweep, results = sweep_results
    on_gpus = [replace(r, gpus=2) for r in planned_runs(sweep)]  # as a verl run on 2 GPUs would be
    assert {r.gpus for r in planned_runs(sweep)} == {0}  # the local engine: CPU, no GPU-hours
    answers = run_all(Catalog(results, "rep"), fill(on_gpus, "rl.update=grpo"))
    rows = {r["label"]: r for r in answers["efficiency"].to_pylist()}
    assert rows["rl.update=grpo"]["gpu_hours"] == pytest.approx(4 * 1.0 * 2 / 3600)  # 4 steps of 1 s on 2 GPUs
    assert rows["rl.update=sfpo"]["gpu_hours_ratio"] == pytest.approx(1.0)  # 2 steps of 2 s
    assert "GPU-hours" in efficiency(list(rows.values()), "rl.update=grpo").columns
    # compute as an axis (issue 63): the accuracy curves against GPU-hours too, where the runs had GPUs
    from workflow.report.figures import eval_curves
    curve = answers["eval_curves"].to_pylist()
    last = max((r for r in curve if r["label"] == "rl.update=grpo"), key=lambda r: r["step"])
    assert last["gpu_hours"] == pytest.approx(4 * 1.0 * 2 / 3600)
    [fig] = eval_curves(curve, tmp_path / "figures")
    assert fig.title.endswith("FLOPs and GPU-hours")
    on_cpu = run_all(Catalog(results, "rep"), fill(planned_runs(sweep), "rl.update=grpo"))["eval_curves"].to_pylist()
    assert {r["gpu_hours"] for r in on_cpu} == {None}
    assert eval_curves(on_cpu, tmp_path / "cpu")[0].title.endswith("backward passes and FLOPs")  # no GPU panel


def test_an_optuna_sweeps_report_shows_its_best_trials_history_and_importances(tmp_path):
    import optuna
    import yaml
    from workflow.report.build import write_report
    from workflow.study.factory import make_storage
    from workflow.sweep.expand import load_sweep
    space = {"rl.lr": {"type": "float", "low": 1.0e-5, "high": 1.0e-3, "log": True},
             "rl.temperature": {"type": "float", "low": 0.5, "high": 1.0}}
    block = {"objective": "avg_at_k", "sampler": {"name": "random", "seed": 0}, "n_trials": 6, "space": space}
    sweep = load_sweep(write_sweep(tmp_path / "o.yaml", "o", yaml.safe_dump({"optuna": block})))
    results = tmp_path / "results"
    write_rows(results, "runs", "rl_0000000000c1", [dict(run_id="0000000000c1", sweep="o", stage="rl", status="completed")])
    record(results, "o", [Member("rl", "0000000000c1")])
    study = optuna.create_study(study_name="o", direction="maximize",
                                storage=make_storage(sweep.spec.optuna, results, "o"))
    dists = {"rl.lr": optuna.distributions.FloatDistribution(1e-5, 1e-3, log=True),
             "rl.temperature": optuna.distributions.FloatDistribution(0.5, 1.0)}
    for i in range(5):  # the value follows the temperature: it is what matters
        params = {"rl.lr": 1e-5 * 3 ** i % 1e-3 + 1e-5, "rl.temperature": 0.5 + 0.1 * i}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=0.1 * i))
    md = (write_report(sweep, results).parent / "report.md").read_text()
    section = md.split("## Optuna study", 1)[1].split("\n## ", 1)[0]
    assert "5 of 6 trials complete" in section and "maximize avg_at_k" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| **4** | 0.4 | rl.lr=") and len(rows) == 1 + 5  # the best first, bold
    assert "optuna_history.png" in md and "optuna_importances.png" in md


@pytest.mark.slow  # (the CLI as subprocesses: seconds each; the fast tier keeps under 2 min)
def test_rlsweep_gain_says_which_settings_improved_on_their_start(sweep_results):
    """`rlsweep gain`: per setting the start, each seed's final and the report's paired final − start; exit 1 naming
    each setting whose gain does not hold (here grpo: a resample of its unchanged problems gives 0; sfpo holds)."""
    from workflow.report.gain import gains
    sweep, results = sweep_results
    found = {g.label: g for g in gains(sweep, results)}
    assert found["rl.update=sfpo"].start == pytest.approx(0.1)
    assert found["rl.update=sfpo"].finals == {0: pytest.approx(0.6), 1: pytest.approx(0.7)}  # seed 2 failed
    assert found["rl.update=sfpo"].ci_low == pytest.approx(0.5) and found["rl.update=sfpo"].shortfalls() == []
    assert found["rl.update=grpo"].finals == {0: pytest.approx(0.4), 1: pytest.approx(0.5), 2: pytest.approx(0.6)}
    res = cli("--results", str(results), "gain", str(results.parent / "rep.yaml"), env={"COLUMNS": "200"})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "rl.update=sfpo" in res.stdout and "0.600, 0.700" in res.stdout and "+0.500 [+0.500, +0.500]" in res.stdout
    short = [line for line in res.stderr.splitlines() if line.startswith("does not hold")]
    assert short == ["does not hold: rl.update=grpo on arithmetic: the paired interval [+0.000, "
                     f"{found['rl.update=grpo'].ci_high:+.3f}] does not exclude 0"]
    # --setting: only the settings whose label says so (one regime of a sweep): sfpo alone holds, exit 0
    only = cli("--results", str(results), "gain", str(results.parent / "rep.yaml"), "--setting", "update=sfpo",
                   env={"COLUMNS": "200"})
    assert only.returncode == 0 and "rl.update=sfpo" in only.stdout and "grpo" not in only.stdout, only.stdout
    none = cli("--results", str(results), "gain", str(results.parent / "rep.yaml"), "--setting", "update=sfpo",
                   "--setting", "lr=9", env={"COLUMNS": "200"})
    assert none.returncode != 0 and "no setting of rep has it in its label" in none.stderr, none.stderr


def test_a_gain_holds_only_when_every_seed_ends_above_the_start_and_the_interval_excludes_0():
    from workflow.report.gain import Gain
    ok = Gain("a", "math", start=0.3, finals={0: 0.35, 1: 0.32}, mean_diff=0.03, ci_low=0.01, ci_high=0.05)
    assert ok.shortfalls() == []
    tie = Gain("a", "math", start=0.3, finals={0: 0.35, 1: 0.30}, mean_diff=0.03, ci_low=0.01, ci_high=0.05)
    assert tie.shortfalls() == ["a on math, seed 1: final 0.300 is not above the start 0.300"]
    assert Gain("a", "math", start=None, finals={0: 0.4}).shortfalls() == ["a on math: no start evaluation"]
    wide = Gain("a", "math", start=0.3, finals={0: 0.35}, mean_diff=0.05, ci_low=-0.01, ci_high=0.1)
    assert wide.shortfalls() == ["a on math: the paired interval [-0.010, +0.100] does not exclude 0"]


def test_every_table_is_also_latex_and_csv_with_the_reports_rows(sweep_results):
    """Issue 82, item 6: report/exports/<name>.tex (booktabs) and .csv beside report.md, the same rows and cells; the
    best of a column bold; LaTeX's special characters escaped, so each line has one & fewer than its columns."""
    import csv
    sweep, results = sweep_results
    assert cli("report", sweep.path, "--results", str(results)).returncode == 0
    out = results / "rep" / "report"
    accuracy = cells((out / "report.md").read_text(), "Accuracy")
    tex = (out / "exports" / "accuracy.tex").read_text()
    assert tex.count(r"\begin{tabular}") == 1 and r"\toprule" in tex and r"\bottomrule" in tex
    body = tex.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0].strip().splitlines()
    assert len(body) == len(accuracy)
    header = tex.split("\\toprule\n", 1)[1].split("\n", 1)[0]
    columns = len(re.split(r"(?<!\\)&", header))
    assert all(len(re.split(r"(?<!\\)&", line)) == columns and line.endswith(r"\\") for line in body)
    assert r"\textbf{" in tex and r"$\pm$" in tex and "±" not in tex
    rows = list(csv.reader((out / "exports" / "accuracy.csv").open()))
    assert len(rows) == len(accuracy) + 1 and len(rows[0]) == columns
    assert {r[0] for r in rows[1:]} == set(accuracy)
    names = {p.stem for p in (out / "exports").glob("*.tex")}
    assert {"accuracy", "runs"} <= names and names == {p.stem for p in (out / "exports").glob("*.csv")}
