"""Where everything a sweep produces lives on disk, in one place and with no heavy imports (the Snakefile, the
CLI and the study driver read it without importing torch).

    results/<sweep>/
      sft/<sft_id>/                     one SFT stage: DONE.json, RUNNING.lock, config.json, checkpoints/step_N/
      rl/<run_id>/                      one RL stage (the same files; PRUNED.json when an Optuna pruner stopped it)
      eval/<run_id>/<eval_id>/step_<N>/<group>/DONE.json   one eval job: an RL checkpoint x a benchmark group
      tables/<table>/*.parquet          runs, train_steps, eval_samples, eval_scores
      summary.md                        the aggregate stage's table
      optuna.journal                    an Optuna study's default storage
      study/trials/trial_N.json         the parameters of every trial the study driver started
      study/logs/trial_N.log            each trial's nested snakemake output
      study/pruning/<run_id>.json       what a pruned study's RL stage needs to report to its trial

Every function takes strings too, so the Snakefile can pass wildcard patterns ("{run_id}") as ids.
"""

from __future__ import annotations

import re
from pathlib import Path

DONE = "DONE.json"  # a stage's last write; the file Snakemake waits for
CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def sweep_dir(results_root: str | Path, sweep: str) -> Path:
    return Path(results_root) / sweep


def stage_dir(results_root: str | Path, sweep: str, stage: str, stage_id: str, run_id: str | None = None,
              step: int | str | None = None, group: str | None = None) -> Path:
    """An SFT or RL stage's directory, or (stage eval) one eval job's: the run, the eval id, the step, the group."""
    if stage == "eval":
        return sweep_dir(results_root, sweep) / "eval" / str(run_id) / stage_id / f"step_{step}" / str(group)
    return sweep_dir(results_root, sweep) / stage / stage_id


def done_path(results_root: str | Path, sweep: str, stage: str, stage_id: str, run_id: str | None = None,
              step: int | str | None = None, group: str | None = None) -> Path:
    return stage_dir(results_root, sweep, stage, stage_id, run_id, step, group) / DONE


def table_dir(results_root: str | Path, sweep: str, table: str) -> Path:
    return sweep_dir(results_root, sweep) / "tables" / table


def summary_path(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "summary.md"


# ---------------------------------------------------------------------------------------------- checkpoints
def step_dir(checkpoints: str | Path, step: int) -> Path:
    """`checkpoints/step_000040`: a complete checkpoint (written to a temporary and renamed into place)."""
    return Path(checkpoints) / f"step_{step:06d}"


def list_checkpoints(checkpoints: str | Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint, oldest first."""
    root = Path(checkpoints)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(checkpoints: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(checkpoints)
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------- Optuna studies
def study_dir(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "study"


def default_journal(results_root: str | Path, sweep: str) -> Path:
    return sweep_dir(results_root, sweep) / "optuna.journal"


def trial_record(results_root: str | Path, sweep: str, number: int) -> Path:
    return study_dir(results_root, sweep) / "trials" / f"trial_{number:05d}.json"


def trial_records(results_root: str | Path, sweep: str) -> list[Path]:
    return sorted((study_dir(results_root, sweep) / "trials").glob("trial_*.json"))


def trial_log(results_root: str | Path, sweep: str, number: int) -> Path:
    return study_dir(results_root, sweep) / "logs" / f"trial_{number:05d}.log"


def pruning_context(results_root: str | Path, sweep: str, run_id: str) -> Path:
    return study_dir(results_root, sweep) / "pruning" / f"{run_id}.json"
