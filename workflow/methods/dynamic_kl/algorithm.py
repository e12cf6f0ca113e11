"""Dynamic KL's coefficient (workflow/algos/fast_grpo.py): per group, from its accuracy."""

from __future__ import annotations

import numpy as np

from workflow.algos.part import Part


def group_kl_coef(accuracy: np.ndarray, cfg) -> np.ndarray:
    """Per group, the KL penalty's coefficient: beta_min at accuracy 0, beta_max at 1, linear between."""
    return cfg.beta_min + (cfg.beta_max - cfg.beta_min) * np.asarray(accuracy, float)


class DynamicKL(Part):
    """The part: each group's KL coefficient from its accuracy."""

    def kl_coef(self, accuracy: np.ndarray) -> np.ndarray:
        return group_kl_coef(accuracy, self.cfg)
