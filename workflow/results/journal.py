"""A study's journal file checked before anyone appends to it.

Optuna's journal storage is one JSON record per line, appended. A journal cut mid-line (a full disk, a copy
interrupted), cut in half, or with a garbage line appended makes Optuna fail on replay with a JSONDecodeError, and
worse: the next append joins the torn line, so the file no longer reads at all. So a journal is read here first;
a damaged one is refused with the file, the line and the way back (`rlsweep doctor --fix` keeps the intact records
before the damage, after moving the file to the sweep's quarantine). Records after a damaged line are not kept:
Optuna's records replay in order, and one missing in the middle would make the rest mean something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workflow.errors import UserError


@dataclass(frozen=True)
class Damage:
    path: Path
    line: int  # the first damaged line, 1-based
    lines: int  # how many lines the file has
    reason: str
    intact: bytes  # the records before it, each with its line end

    def __str__(self) -> str:
        return (f"study journal {self.path} is damaged at line {self.line} of {self.lines}: {self.reason}; "
                f"{self.line - 1} record(s) before it are intact")


class JournalDamaged(UserError):
    """A damaged journal, refused before anything is appended to it."""


def inspect(path: str | Path) -> Damage | None:
    """The journal's first damaged line, or None when every line is a whole JSON record (or there is no file)."""
    path = Path(path)
    if not path.is_file():
        return None
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last line end: b"" in a whole journal
    if tail:
        lines.append(tail)
    good = 0
    for n, raw in enumerate(lines, 1):
        reason = _bad_record(raw)
        if reason is None and n == len(lines) and tail:
            reason = "the last record has no line end (the file was cut, or a write stopped half-way)"
        if reason is not None:
            return Damage(path, n, len(lines), reason, data[:good])
        good += len(raw) + 1
    return None


def _bad_record(raw: bytes) -> str | None:
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except ValueError as e:
        return f"not a JSON record ({e.msg} at column {e.colno})"
    if not isinstance(record, dict) or "op_code" not in record:
        return "not an Optuna journal record (no op_code)"
    return None


def check(path: str | Path, sweep: str | None = None) -> None:
    """Raise JournalDamaged, saying how to recover, when the journal at `path` is damaged."""
    damage = inspect(path)
    if damage is not None:
        doctor = f"rlsweep doctor --sweep {sweep} --fix" if sweep else "rlsweep doctor SWEEP.yaml --fix"
        raise JournalDamaged(f"{damage}. Nothing was added to it. `{doctor}` keeps those records (the file itself "
                             "goes to the sweep's quarantine); the study then resumes from them")
