"""The RL stage's verl process: `python -m workflow.engines.verl.controller.ppo CONFIG.yaml` runs verl's run_ppo with its v1
task runner (controller/trainer.py's, whose process alone imports our trainer: trainer_mode rlsweep) on the composed
config the verl engine saved; the engine supervises it (process.py)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import run_ppo

    from workflow.engines.verl.controller.trainer import TASK_RUNNER
    (config_path,) = argv
    run_ppo(OmegaConf.load(config_path), TASK_RUNNER)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
