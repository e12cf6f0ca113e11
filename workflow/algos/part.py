"""The part interface: a switch on plain on-policy GRPO that an engine applies to one step's groups (FAST-GRPO's
thinking reward, dynamic KL and Slow2Fast sampling are parts; workflow/algos/fast_grpo.py). Plain numpy over the
step's [P prompts, G responses] groups, written once for both engines; a part knows no engine.

A part implements any of three hooks (the base class's do nothing); an engine calls them once per step, in order:

    keep(accuracy, progress) -> bool [P] | None     which groups the step trains on (None: all); with
                                                    `refill_rounds` > 0 the engine samples more prompts, at most that
                                                    many extra rounds of a step's prompts, to replace dropped groups
    bonus(rewards, lengths, max_len, prompts, prompt_lens) -> ([P, G], columns) | None
                                                    added to the rewards before the group advantages
    kl_coef(accuracy) -> [P] | None                 each group's KL coefficient in place of rl.kl_coef

`accuracy` is each group's share of correct responses (group_accuracy). The module-level functions combine the
parts a run switched on (workflow/methods/registry.py builds them), so an engine never names one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from workflow.algos.fast_grpo import group_accuracy


class Part:
    name: ClassVar[str] = ""  # the name it is registered under (workflow/methods/registry.py)
    filters_groups: ClassVar[bool] = False  # implements keep
    shapes_rewards: ClassVar[bool] = False  # implements bonus
    reads_prompt_text: bool = False  # bonus needs the prompts' texts (else "" is passed)
    refill_rounds: int = 0  # see keep

    def __init__(self, cfg: Any):
        self.cfg = cfg  # its settings section, rl.<name>

    def keep(self, accuracy: np.ndarray, progress: float) -> np.ndarray | None:
        return None

    def bonus(self, rewards: np.ndarray, lengths: np.ndarray, max_len: int, prompts: list[str],
              prompt_lens: list[int]) -> tuple[np.ndarray, dict[str, float]] | None:
        return None

    def kl_coef(self, accuracy: np.ndarray) -> np.ndarray | None:
        return None


def filtering(parts: list[Part]) -> bool:
    """Whether any part decides which groups a step keeps."""
    return any(p.filters_groups for p in parts)


def refill_rounds(parts: list[Part]) -> int:
    """Extra sampling rounds a step may take to replace dropped groups."""
    return max((p.refill_rounds for p in parts if p.filters_groups), default=0)


def keep(parts: list[Part], rewards: np.ndarray, progress: float) -> np.ndarray:
    """bool [P]: the groups (by their [P, G] rewards) every filtering part keeps at `progress` (0..1 of training)."""
    out = np.ones(len(rewards), bool)
    accuracy = group_accuracy(rewards)
    for p in parts:
        mask = p.keep(accuracy, progress)
        if mask is not None:
            out &= mask
    return out


def bonus(parts: list[Part], rewards: np.ndarray, lengths: np.ndarray, max_len: int, prompts: list[str],
          prompt_lens: list[int]) -> tuple[np.ndarray | None, dict[str, float]]:
    """The parts' reward bonuses summed ([P, G], None when no part gives one) and their step columns."""
    total, columns = None, {}
    for p in parts:
        got = p.bonus(rewards, lengths, max_len, prompts, prompt_lens)
        if got is not None:
            total = got[0] if total is None else total + got[0]
            columns.update(got[1])
    return total, columns


def kl_coef(parts: list[Part], rewards: np.ndarray) -> np.ndarray | None:
    """Each group's KL coefficient from the part that sets it (None: rl.kl_coef applies)."""
    found = [c for c in (p.kl_coef(group_accuracy(rewards)) for p in parts) if c is not None]
    if len(found) > 1:
        raise ValueError(f"{len(found)} parts set the KL coefficient; at most one may")
    return found[0] if found else None


def shaping(parts: list[Part]) -> bool:
    """Whether any part adds a bonus to the rewards."""
    return any(p.shapes_rewards for p in parts)


def reads_prompt_text(parts: list[Part]) -> bool:
    """Whether a part's bonus needs the prompts' texts."""
    return any(p.reads_prompt_text for p in parts if p.shapes_rewards)
