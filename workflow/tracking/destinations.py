"""Where each tracker sends: the sweep file's setting, else the ecosystem's variable, else our default, and which said
so. Resolved once, where the sweep is planned (hook.record_tracking writes the result to tracking.json), so every job
of one sweep sends to one place whatever its own environment says; `rlsweep track --to X` for a tracker the sweep's
block lacks resolves from the environment at that moment.

The variables are those verl, TRL and Lightning honour: MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME; WANDB_PROJECT,
WANDB_MODE and WANDB_DIR (WANDB_ENTITY is read by W&B itself when no entity is set). Credentials are not among them:
they stay in the environment (MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN, WANDB_API_KEY), read by the tracker
libraries, written nowhere; a MLFLOW_TRACKING_URI that holds credentials is not used (a warning says why, without it).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

# field -> the variable a block's unset field takes
ENVIRONMENT = {"mlflow": {"uri": "MLFLOW_TRACKING_URI", "experiment": "MLFLOW_EXPERIMENT_NAME"},
               "wandb": {"project": "WANDB_PROJECT", "mode": "WANDB_MODE", "dir": "WANDB_DIR"}}
SOURCES = "sources"  # the key of a resolved block that says where each field came from

# what a URI may not hold: credentials (user:password@host, or a token in the query); sweep/spec.py refuses them too
CREDENTIALS = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*@|[?&](?:token|access_token|password|api_key)=", re.I)
_MODES = {"online": "online", "offline": "offline", "dryrun": "offline"}  # WANDB_MODE's values we can follow


def defaults(name: str, sweep: str) -> dict[str, tuple[Any, str]]:
    """field -> (our default, how a listing names it)."""
    if name == "mlflow":
        return {"uri": (None, f"default: results/{sweep}/mlflow.db"),
                "experiment": (sweep, "default: the sweep's name")}
    if name == "wandb":
        return {"project": (sweep, "default: the sweep's name"), "mode": ("online", "default"),
                "dir": (None, f"default: results/{sweep}/ (its wandb/ folder)")}
    return {}


def resolve(name: str, block: Mapping[str, Any] | None, sweep: str, environ: Mapping[str, str],
            warn=lambda message: None) -> dict[str, Any]:
    """The block with every field of ENVIRONMENT set (None: our default), and `sources`: field -> what said so."""
    out = {k: v for k, v in dict(block or {}).items() if k != SOURCES}
    sources = {}
    for field, (default, named) in defaults(name, sweep).items():
        if out.get(field) is not None:
            sources[field] = "the sweep file"
            continue
        variable = ENVIRONMENT[name][field]
        value = environ.get(variable) or None
        if value is not None and field == "uri" and CREDENTIALS.search(value):
            warn(f"tracker {name}: {variable} holds credentials, so it is not used (give them as "
                 "MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN)")
            value = None
        if value is not None and field == "mode":
            if value.lower() not in _MODES:
                warn(f"tracker {name}: {variable}={value!r} is not online or offline; not used")
                value = None
            else:
                value = _MODES[value.lower()]
        if value is not None:
            out[field], sources[field] = value, f"the environment: {variable}"
        else:
            out[field], sources[field] = default, named
    if sources:
        out[SOURCES] = sources
    return out


def describe(name: str, resolved: Mapping[str, Any], sweep: str) -> str:
    """One line: where the tracker sends and which source said so (`rlsweep validate`)."""
    sources = resolved.get(SOURCES, {})
    if name == "tensorboard":
        return f"tracker tensorboard: event files in {resolved.get('dir') or f'results/{sweep}/tensorboard/'}"
    shown = {"mlflow": ("uri", "experiment"), "wandb": ("project", "mode", "dir", "entity")}.get(name, ())
    parts = []
    for field in shown:
        value = resolved.get(field)
        if value is None:
            if field in sources:
                parts.append(f"{field}: {sources[field]}")
            continue
        parts.append(f"{field} {value}" + (f" ({sources[field]})" if field in sources else ""))
    return f"tracker {name}: " + ", ".join(parts)
