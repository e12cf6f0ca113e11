"""Run identity: a short hash of the canonical JSON of a stage's resolved config.

Canonical = keys sorted, no whitespace, floats in Python's shortest round-trip repr (the same on every CPython
>= 3.1), non-ASCII kept as \\u escapes. The hash therefore does not depend on YAML key order, the process
(PYTHONHASHSEED) or the Python version, and values are hashed *after* validation, so `1e-4`, `0.0001` and
`1.0e-4` in YAML all give the same id.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

ID_LENGTH = 12


def canonical_json(obj: Any) -> str:
    _reject_non_finite(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def stable_id(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("ascii")).hexdigest()[:ID_LENGTH]


def _reject_non_finite(obj: Any) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite number {obj!r} cannot be part of a run identity")
    if isinstance(obj, dict):
        for v in obj.values():
            _reject_non_finite(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _reject_non_finite(v)
