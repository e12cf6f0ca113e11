"""The prepared GPU session (scripts/gpu_session.py, issue 83 item 4): its dry run on the CPU runs every part and
reports each, and its table lands in the doc between the markers without touching the rest."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_session.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_session", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


def dry_run(*args: str) -> tuple[dict[str, str], list[str]]:
    """The script's dry run (--device cpu) of some parts: each row's result, and the rows."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| part")]
    return {ln.split(" | ")[0][2:]: ln.split(" | ")[1] for ln in rows}, rows


# each part's dry run is a test of its own: the fast tier's 30 s are per test, and the whole dry run takes ~50 s
def test_the_dry_run_of_gpu_check_runs_its_stage_jobs():
    results, _ = dry_run("--only", "gpu-check")
    assert results == {"gpu-check": "pass"}


def test_the_dry_run_of_the_update_rules_bench_reports_pass_ratios_launches_and_syncs():
    results, rows = dry_run("--only", "update rules")
    assert results == {f"update rules: {rule}": "pass" for rule in ("grpo", "sfpo", "gxpo")}
    assert all("x GRPO's" in row and "1 host sync(s)" in row for row in rows), rows


def test_the_dry_run_counts_every_steps_syncs_and_puts_its_table_in_the_doc(tmp_path):
    doc = tmp_path / "gpu-check.md"
    doc.write_text("# GPU check\n\nbefore\n\n<!-- gpu-session: begin -->\nnot yet run\n<!-- gpu-session: end -->\n"
                   "\nafter\n")
    results, _ = dry_run("--only", "syncs,verl", "--doc", str(doc))
    assert {k: v for k, v in results.items() if k.startswith("syncs")} == {
        f"syncs: {name}": "pass" for name in ("grpo", "sfpo", "gxpo", "grpo+luffy", "grpo+srft")}
    assert "verl HF rollout" in results  # said, whether it ran or why not
    text = doc.read_text()
    assert text.startswith("# GPU check\n\nbefore\n\n") and text.endswith("\nafter\n")
    assert "not yet run" not in text and "| syncs: gxpo | pass |" in text and "CPU (dry run)" in text


def test_a_doc_without_markers_gets_the_table_appended_once_and_then_replaced(tmp_path):
    session = load_script()
    doc = tmp_path / "gpu-check.md"
    doc.write_text("# GPU check\n\nkept\n")
    session.write_doc(doc, "first table")
    session.write_doc(doc, "second table")
    text = doc.read_text()
    assert text.startswith("# GPU check\n\nkept\n") and text.count(session.BEGIN) == 1
    assert "second table" in text and "first table" not in text


def test_a_part_that_fails_or_overruns_says_so():
    session = load_script()
    code, tail, _ = session.run_part([sys.executable, "-c", "raise SystemExit('no GPU memory left')"], 30)
    assert code == 1 and session.last_line(tail) == "no GPU memory left"
    code, _, _ = session.run_part([sys.executable, "-c", "import time; time.sleep(5)"], 0.5)
    assert code is None  # over its limit
