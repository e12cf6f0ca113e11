"""Read a W&B offline run back from disk for the tests: wandb 0.31 has no reader of its own any more (its datastore
module and `wandb sync --view` are gone), so this reads the `.wandb` transaction log the way wandb writes it (the
leveldb log format: a 7-byte header, 32 KiB blocks, records `<crc32 u32><length u16><type u8>`, types FULL / FIRST /
MIDDLE / LAST) into wandb's own protobuf `Record`s (wandb.proto.wandb_internal_pb2)."""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path
from typing import Iterator

BLOCK, HEADER = 32768, 7


def records(path: Path) -> Iterator:
    from wandb.proto import wandb_internal_pb2 as pb
    buf = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", buf[:7])
    assert ident == b":W&B" and magic == 0xBEE1 and version == 0, f"{path}: not a W&B transaction log"
    i, pending = 7, b""
    while i + HEADER <= len(buf):
        if BLOCK - i % BLOCK < HEADER:  # a block's tail too short for a header: padding
            i += BLOCK - i % BLOCK
            continue
        crc, n, kind = struct.unpack("<IHB", buf[i:i + HEADER])
        data = buf[i + HEADER:i + HEADER + n]
        if kind == 0 or len(data) < n:  # zero padding, or a tail cut short by a kill
            break
        assert crc == zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF, f"{path}: bad record checksum"
        i += HEADER + n
        if kind in (2, 3):  # FIRST, MIDDLE: more to come
            pending = data if kind == 2 else pending + data
            continue
        payload = data if kind == 1 else pending + data
        record = pb.Record()
        record.ParseFromString(payload)
        yield record


def history(wandb_dir: Path, run_id: str) -> list[dict]:
    """Every history row logged to run `run_id`, over all its offline directories (one per process), in order."""
    rows = []
    # a run's directory per process: offline-run-<time>-<id>, and -<id>-<n> for the n-th more in the same second
    # (two processes of one run starting within a second: a job's trackers and an evaluation's)
    same_run = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-(\d+))?")
    found = [(d.name[:len("offline-run-YYYYmmdd_HHMMSS")], int(m.group(2) or 0), d)
             for d in Path(wandb_dir).glob("offline-run-*") if (m := same_run.fullmatch(d.name))]
    for *_, directory in sorted(found):
        log = directory / f"run-{run_id}.wandb"
        for r in records(log):
            if r.WhichOneof("record_type") == "history":
                rows.append({it.key or "/".join(it.nested_key): json.loads(it.value_json) for it in r.history.item})
    return rows
