"""`rlsweep preflight`: the integrity preflight of every SFT job and mixed-policy RL job of a sweep, on demand
(each job also runs it before it trains; workflow/preflight.py says what it checks)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.layout import done_path
from workflow.sweep.expand import load_sweep


def cmd_preflight(a) -> int:
    from workflow import preflight  # torch: only this command pays for it
    from workflow.engine_api.registry import get_engine
    from workflow.launch import read_done
    from workflow.stages import parse_stage

    sweep = load_sweep(a.sweep_file)
    root = results_root(a)
    jobs = [("sft", sft_id, cfg, None, cfg.get("data_id")) for sft_id, cfg in sweep.configs("sft").items()]
    for r in sweep.runs:
        if r.config.rl.mix != "none":
            sft_done = done_path(root, "sft", r.sft_id) if r.sft_id else None
            init = read_done(sft_done)["checkpoint_path"] if sft_done and sft_done.is_file() else None
            jobs.append(("rl", r.run_id, r.stage_config("rl"), init, r.data_id))
    if not jobs:
        err.print(f"{sweep.name}: no SFT or mixed-policy job to check")
        return 0
    t = Table(title=f"{sweep.name}: integrity preflight (tolerance {preflight.TOLERANCE:g}, relative L2)")
    for col in ("stage", "id", "method", "micro-batch", "splits checked", "gradient diff", "update diff", "result"):
        t.add_column(col)
    failed = []
    for stage, stage_id, cfg, init, data_id in jobs:
        typed = parse_stage(stage, cfg)
        make_probe = getattr(get_engine(typed.engine.name), "integrity_probe", None)
        method = typed.rl.method if stage == "rl" else "sft"
        micro = (typed.rl if stage == "rl" else typed.sft).micro_batch_size
        data_done = done_path(root, "data", data_id) if data_id else None
        if data_done is not None and not data_done.is_file():  # the probe trains on the job's own rows
            t.add_row(stage, stage_id, method, str(micro or "whole"), "-", "-", "-",
                      f"needs its data stage {data_id} first (snakemake ... runs it)")
            continue
        data = read_done(data_done)["output_path"] if data_done else None
        probe = make_probe(typed, init, data) if make_probe is not None else None
        if probe is None:
            t.add_row(stage, stage_id, method, str(micro or "whole"), "-", "-", "-",
                      f"not available on engine {typed.engine.name}")
            continue
        result = preflight.check(probe)
        status = result.as_row()["preflight"] + ("" if init is None or stage == "sft" else " (SFT checkpoint)")
        t.add_row(stage, stage_id, method, str(micro or "whole"), ", ".join(map(str, result.splits)) or "-",
                  f"{result.grad_diff:.2e}", f"{result.update_diff:.2e}",
                  f"[green]{status}[/]" if result.passed else f"[red]{status}[/]")
        failed += [f"{stage} {stage_id}: {p}" for p in result.problems]
    Console(highlight=False).print(t)
    for line in failed:
        err.print(f"[red]{line}[/]")
    return 1 if failed else 0
