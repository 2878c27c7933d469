"""The run's epoch history (`metrics.jsonl`) as it is kept in a bucket. Pure.

An object store cannot append, so the bucket's `metrics.jsonl` is rewritten whole from rank
0's in-memory history after every epoch. It is small (a few hundred bytes per epoch), one
object is what a person, `kubegan metrics` and any tool reads with one GET, and a PUT
replaces it atomically: a reader sees the old history or the new one, never a torn line.
(Per-epoch part objects merged on read would make every reader list and merge, and leave
thousands of objects behind.)

On resume from a checkpoint at epoch E, the bucket's history is read back (bounded), cut to
the epochs <= E the checkpoint covers, merged with the local file's rows (a folder that
outlived its pod may hold an epoch whose history upload did not finish), and training appends
from there: no epoch is lost or listed twice. A torn last line (a killed writer of a local
file) is not a JSON object and is dropped on read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# What is read back from a bucket: thousands of epochs fit many times over; a larger object
# is not the trainer's and is not read.
HISTORY_MAX_BYTES = 64 << 20


def parse_rows(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The lines of `data` that are JSON objects, and how many other non-blank lines there
    were (torn by a killed writer, not JSON, nested too deeply, not an object)."""
    rows, other = [], 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            other += 1
    return rows, other


def epoch_of(row: dict[str, Any]) -> int | None:
    """A row's epoch (1-based), or None when it names none that is a whole number."""
    epoch = row.get("epoch")
    return epoch if type(epoch) is int and epoch >= 1 else None


def cut(rows: Iterable[dict[str, Any]], epoch: int) -> dict[int, dict[str, Any]]:
    """The rows of epochs 1..`epoch`, one per epoch (a later row of an epoch, from a gang
    that trained it again, replaces an earlier one); rows without an epoch are dropped."""
    kept: dict[int, dict[str, Any]] = {}
    for row in rows:
        e = epoch_of(row)
        if e is not None and e <= epoch:
            kept[e] = row
    return kept


def merge(
    stored: Iterable[dict[str, Any]], local: Iterable[dict[str, Any]], epoch: int
) -> list[dict[str, Any]]:
    """The history to continue from a checkpoint at `epoch`: the bucket's rows of epochs
    <= `epoch`, completed with local rows of epochs the bucket lacks; in epoch order."""
    merged = cut(local, epoch)
    merged.update(cut(stored, epoch))  # the bucket's record wins where both have an epoch
    return [merged[e] for e in sorted(merged)]


def render(rows: Iterable[dict[str, Any]]) -> bytes:
    """The history as metrics.jsonl bytes: one compact JSON object per line."""
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode("utf-8")
