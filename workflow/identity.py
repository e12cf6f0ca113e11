"""Run identity: a short hash of the canonical JSON of a stage's resolved config.

Canonical = keys sorted, no whitespace, floats in Python's shortest round-trip repr (the same on every CPython
>= 3.1), non-ASCII kept as \\u escapes. The hash therefore does not depend on YAML key order, the process
(PYTHONHASHSEED) or the Python version, and values are hashed *after* validation, so `1e-4`, `0.0001` and
`1.0e-4` in YAML all give the same id.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from workflow.layout import ID_LENGTH  # (re-exported: the length of every stage id)


def canonical_json(obj: Any) -> str:
    try:  # allow_nan=False: the C encoder refuses NaN and infinities itself, no walk of the tree needed
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except ValueError as e:
        raise ValueError(f"non-finite number cannot be part of a run identity ({e})") from None


def stable_id(obj: Any) -> str:
    return id_of_json(canonical_json(obj))


def id_of_json(text: str) -> str:
    """stable_id of the object whose canonical_json is `text` (for a caller that keeps the JSON too)."""
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:ID_LENGTH]
