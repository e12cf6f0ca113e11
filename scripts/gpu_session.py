#!/usr/bin/env python3
"""What a lent GPU must measure, as one prepared script (issue 83, item 4): GPU time comes without notice and is
short (15 minutes a task, starts included), so nothing here is improvised on the machine.

    python scripts/gpu_session.py                  # on one GPU, <= 8 minutes: prints the table, writes it into
                                                   # docs/gpu-check.md (between its gpu-session markers)
    python scripts/gpu_session.py --device cpu     # the dry run: every part, shrunk, on the CPU (CI's fast tier
                                                   # runs each part's); prints the table, writes a doc only with --doc
    python scripts/gpu_session.py --only syncs     # some parts (--only gpu-check,update rules,syncs,verl)

On the lent machine (its image has CUDA torch, transformers, pyarrow, no pydantic or DuckDB): the cp312 wheels that
travel with the call installed with `pip install --no-index --no-deps --target .wheels/site .wheels/*.whl`, then
`PYTHONPATH=.wheels/site python scripts/gpu_session.py` (the parts' processes inherit PYTHONPATH).

The parts, each in its own process with its own time limit (one that fails or overruns is a row that says so, and the
rest still run):

    gpu-check      `rlsweep gpu-check --engine local`: every local-engine path as a real stage job
                   (dry run: `--allow-cpu --only grpo`, 10 SFT steps, 2 RL steps)
    update rules   `bench/update_rules.py --device cuda --profile`: SFPO's and GXPO's time per pass and extra peak
                   memory against GRPO's at Qwen2-0.5B's shape, their kernel launches and host syncs per step
                   (dry run: `--real --shape tiny`, one repeat)
    syncs          each step of workflow/engines/step_syncs.py (GRPO, SFPO, GXPO, LUFFY, SRFT) on the device: the
                   syncs SyncCounter counts, and those the CUDA driver warns of under set_sync_debug_mode("warn")
    verl           one verl GRPO step with verl 0.9's HF rollout, where verl and Ray are installed and vLLM is not:
                   not built yet, so the row says which of them the machine has and that the step is missing

Exit 0 when every part that ran passed, 1 otherwise. The machine's image (../shared/notes, the device tool's notes)
has CUDA torch, transformers and pyarrow but no Snakemake: the parts use none.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a file: the package is the checkout's
    sys.path.insert(0, str(REPO))

BEGIN, END = "<!-- gpu-session: begin -->", "<!-- gpu-session: end -->"
DOC = REPO / "docs" / "gpu-check.md"


@dataclass
class Row:
    part: str
    result: str  # pass | fail | skipped
    figure: str = ""
    note: str = ""


def run_part(cmd: list[str], limit_s: float) -> tuple[int | None, str, float]:
    """Run one part's command: its exit code (None past `limit_s`), its output's tail and its wall time."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=limit_s, env=env)
        return out.returncode, (out.stdout + out.stderr)[-4000:], time.perf_counter() - t0
    except subprocess.TimeoutExpired as e:
        tail = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
        return None, tail[-4000:], time.perf_counter() - t0


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def gpu_check(device: str, work: Path, limit_s: float) -> list[Row]:
    out = work / "gpu_check.json"
    cmd = [sys.executable, "-m", "workflow.cli", "gpu-check", "--engine", "local", "--json", str(out)]
    if device == "cpu":
        cmd += ["--allow-cpu", "--only", "grpo", "--sft-steps", "10", "--steps", "2"]
    code, tail, wall = run_part(cmd, limit_s)
    if not out.exists():
        return [Row("gpu-check", "fail", "", f"exit {code}: {last_line(tail)}" if code is not None
                    else f"over its {limit_s:.0f} s")]
    checks = json.loads(out.read_text())["checks"]
    passed = sum(c["passed"] for c in checks)
    failed = "; ".join(f"{c['name']}: {c['error']}" for c in checks if not c["passed"])
    return [Row("gpu-check", "pass" if code == 0 and passed == len(checks) else "fail",
                f"{passed}/{len(checks)} checks passed in {wall:.0f} s", failed)]


def update_rules(device: str, work: Path, limit_s: float) -> list[Row]:
    out = work / "update_rules.json"
    cmd = [sys.executable, str(REPO / "bench" / "update_rules.py"), "--profile", "--json", str(out)]
    cmd += ["--device", "cuda"] if device != "cpu" else ["--real", "--shape", "tiny", "--batch", "2", "--seq", "32",
                                                         "--repeat", "1"]
    code, tail, wall = run_part(cmd, limit_s)
    if code != 0 or not out.exists():
        return [Row("update rules", "fail", "", f"exit {code}: {last_line(tail)}" if code is not None
                    else f"over its {limit_s:.0f} s")]
    fig = json.loads(out.read_text())
    rows = []
    for name, f in fig["rules"].items():
        parts = [f"{f['per_pass_s'] * 1e3:.1f} ms a pass = {f['per_pass_ratio']:.3f}x GRPO's"]
        if "extra_param_bytes" in f:
            parts.append(f"extra peak memory {f['extra_param_bytes']:.2f}x parameter bytes")
        parts.append(f"{f['launches']} kernel launches a step, {f['syncs']} host sync(s)"
                     + (f" ({f['syncs_driver']} by the driver)" if f.get("syncs_driver") is not None else ""))
        rows.append(Row(f"update rules: {name}", "pass", "; ".join(parts),
                        f"{fig['shape']} ({fig['params'] / 1e6:.0f}M parameters), {fig['batch']} x {fig['seq']} "
                        f"tokens, median of {fig['repeat']}" + (f", {wall:.0f} s" if name == "grpo" else "")))
    return rows


def syncs(device: str, work: Path, limit_s: float) -> list[Row]:
    out = work / "syncs.json"
    code, tail, _ = run_part([sys.executable, __file__, "--syncs-child", device, "--doc", str(out)], limit_s)
    if code != 0 or not out.exists():
        return [Row("syncs", "fail", "", f"exit {code}: {last_line(tail)}" if code is not None
                    else f"over its {limit_s:.0f} s")]
    rows = []
    for name, f in json.loads(out.read_text()).items():
        ok = f["counted"] <= 1 and (f["driver"] is None or f["driver"] <= 1)
        rows.append(Row(f"syncs: {name}", "pass" if ok else "fail",
                        f"{f['counted']} counted" + (f", {f['driver']} by the driver" if f["driver"] is not None
                                                     else ""), f["where"]))
    return rows


def syncs_child(device: str, out: Path) -> None:
    """In a process of its own: each step of step_syncs.STEPS on `device`, counted twice over (goal <= 1)."""
    from workflow.engines.step_syncs import STEPS, count_step_syncs, step_name
    found = {}
    for rl in STEPS:
        s = count_step_syncs(rl, device, driver=True)
        found[step_name(rl)] = {"counted": s.counted.count, "driver": s.driver, "where": s.counted.report()}
    out.write_text(json.dumps(found, indent=1))


def verl_step(device: str, work: Path, limit_s: float) -> list[Row]:
    have = {m: importlib.util.find_spec(m) is not None for m in ("verl", "ray", "vllm")}
    said = ", ".join(f"{m} {'installed' if ok else 'missing'}" for m, ok in have.items())
    if not (have["verl"] and have["ray"]) or have["vllm"]:
        return [Row("verl HF rollout", "skipped", said, "the step is for a machine with verl and Ray but no vLLM")]
    return [Row("verl HF rollout", "skipped", said,
                "not built yet: a verl GRPO step with rollout.name=hf (verl/workers/rollout/hf_rollout.py) is "
                "issue 83's last part, left for a session with a GPU")]


PARTS = (("gpu-check", gpu_check, 180), ("update rules", update_rules, 210), ("syncs", syncs, 60),
         ("verl", verl_step, 60))


def table(rows: list[Row]) -> str:
    lines = ["| part | result | figure | note |", "|---|---|---|---|"]
    lines += [f"| {r.part} | {r.result} | {r.figure} | {r.note.replace('|', '/')} |" for r in rows]
    return "\n".join(lines)


def device_name(device: str) -> str:
    import torch
    if device == "cpu":
        return f"CPU (dry run), torch {torch.__version__}"
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "?"


def write_doc(doc: Path, text: str) -> None:
    """Put `text` between the doc's gpu-session markers (appended with them when the doc has none); the rest of the
    doc is kept as it is."""
    old = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + block + "\n"
    doc.write_text(new)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda (the session) or cpu (the dry run)")
    p.add_argument("--doc", help="where the table goes (default docs/gpu-check.md on a GPU; none on the CPU)")
    p.add_argument("--only", help="run only these parts, comma-separated: " + ", ".join(n for n, _, _ in PARTS))
    p.add_argument("--syncs-child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.syncs_child:
        syncs_child(a.syncs_child, Path(a.doc))
        return 0
    if a.device != "cpu":
        import torch
        if not torch.cuda.is_available():
            sys.exit(f"--device {a.device}: torch sees no GPU here (--device cpu is the dry run)")
    only = [n.strip() for n in a.only.split(",")] if a.only else [n for n, _, _ in PARTS]
    unknown = sorted(set(only) - {n for n, _, _ in PARTS})
    if unknown:
        sys.exit(f"--only: no part {', '.join(unknown)} (the parts: {', '.join(n for n, _, _ in PARTS)})")
    t0 = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu-session-") as tmp:
        for name, part, limit_s in (p for p in PARTS if p[0] in only):
            print(f"gpu-session: {name} ...", flush=True)
            rows += part(a.device, Path(tmp), limit_s)
    wall = time.perf_counter() - t0
    head = (f"GPU session of {datetime.date.today().isoformat()} at {commit()}: {device_name(a.device)}; "
            f"{wall / 60:.1f} min (`python scripts/gpu_session.py`)")
    text = f"{head}\n\n{table(rows)}"
    print(text)
    doc = Path(a.doc) if a.doc else (DOC if a.device != "cpu" else None)
    if doc is not None:
        write_doc(doc, text)
        print(f"gpu-session: the table is in {doc}")
    return 0 if all(r.result != "fail" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
