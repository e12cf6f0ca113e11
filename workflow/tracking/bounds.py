"""How long a tracker that cannot be reached may hold anything up: the same bound for a job's trackers (child.py),
the aggregate stage's backfill and `rlsweep track` (backfill.py).

MLflow retries an HTTP request 7 times with a backoff factor of 2 and a 120 s timeout: about 4 minutes a request by
its own comment, and a dead server costs every request that. Here a request gets one retry, a short backoff and a
10 s timeout, so an unreachable server fails a call within ~25 s; the first failure switches the tracker off for
the rest of that job or call (sending.py, backfill.py), with one warning, and the next `rlsweep track` sends the
rest. A user's own MLFLOW_HTTP_REQUEST_* variables win (they are set only where unset). W&B is bounded by its
init_timeout (wandb.py).
"""

from __future__ import annotations

import os
from typing import MutableMapping

BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
          "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def bounded(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """`env` (default: this process's environment) with each bound set where the user set none; returns it."""
    env = os.environ if env is None else env
    for name, value in BOUNDS.items():
        env.setdefault(name, value)
    return env
