"""What a backend sees of checkpoint storage: where training stands (`Position`), a
checkpoint it can resume from (`CheckpointRef`), and the `Store` it writes them through.

Two stores implement it: the checkpoint directory alone (folder.py) and the checkpoint
directory as the local copy of a bucket (sync.py); `sync.open_checkpoint_store` picks one
from the job. Backends only fill a staging folder with their files; the store decides what
is whole, what is the latest and what to prune.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, order=True)
class Position:
    """Where training stands: `epoch` epochs fully done, `step` steps into the next one."""

    epoch: int
    step: int


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    position: Position
    created: float

    @property
    def name(self) -> str:
        return self.path.name


def checkpoint_name(pos: Position) -> str:
    """The checkpoint's folder name, the same in a directory and in a bucket."""
    return f"ckpt-{pos.epoch:06d}-{pos.step:08d}"


class Store(Protocol):
    """The calls a backend makes on its checkpoint storage."""

    root: Path

    def begin(self, pos: Position) -> Path:
        """A fresh staging folder for the checkpoint at `pos`."""
        ...

    def commit(self, staging: Path, pos: Position, extra: dict | None = None) -> CheckpointRef:
        """Make the filled staging folder the checkpoint at `pos` (atomically)."""
        ...

    def abort(self, staging: Path) -> None:
        """Drop a staging folder whose checkpoint failed."""
        ...

    def clean_staging(self) -> None:
        """Remove staging folders an earlier process left behind."""
        ...

    def latest_valid(self) -> CheckpointRef | None:
        """The newest whole checkpoint to resume from, or None to start over."""
        ...

    def best_checkpoint(self) -> CheckpointRef | None:
        """The whole checkpoint whose generator is exported: the best by the model's primary
        quality score, else the newest (retention.py); a local copy."""
        ...
