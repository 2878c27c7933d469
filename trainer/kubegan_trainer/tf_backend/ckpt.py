"""Checkpoints through `tf.train.CheckpointManager`, with DESIGN §5's guarantees.

- Atomic: TensorFlow writes the data and index files under temporary names and renames
  them, then rewrites the `checkpoint` state file; only after that does the chief write
  `ckpt-<global step>.manifest.json` (atomically: aside, then rename) with the position
  and a sha256 per file. A checkpoint without a valid manifest is never resumed from.
- Keep N: the manager's `max_to_keep`; manifests of pruned checkpoints are removed.
- Damaged after the fact (a bad disk, a truncated copy): checksums catch it and resume
  falls back to the previous checkpoint with a warning; none intact -> one-line error.
- Data only: `tf.train.Checkpoint.read` restores variable values into objects this job
  built; nothing in the files names code to run (no pickle, no Keras model or layer
  deserialization), and the `checkpoint` state file may only name checkpoints inside
  this directory.
- Damaged checkpoints passed over on resume are moved to `corrupt/` by the chief, never
  deleted (the manager's pruning would otherwise remove them unseen).
- Multi-worker: every worker calls save (saving can involve collectives); non-chief
  workers write into a scratch folder that is deleted right away, as TF recommends.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from kubegan_trainer.checkpoint import CORRUPT_DIR, Position
from kubegan_trainer.errors import TrainerError

log = logging.getLogger("kubegan_trainer")

PREFIX = "ckpt"
MANIFEST_SUFFIX = ".manifest.json"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files_of(prefix: str) -> list[str]:
    return sorted(
        p
        for p in glob.glob(prefix + ".*")
        if not p.endswith(MANIFEST_SUFFIX)
        and ".tmp" not in os.path.basename(p)
        and "_temp" not in p
    )


@dataclass(frozen=True)
class SavedCheckpoint:
    prefix: str
    position: Position
    global_step: int
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return os.path.basename(self.prefix)


class TfCheckpoints:
    def __init__(
        self, directory: Path, keep: int, checkpoint: tf.train.Checkpoint, worker_index: int
    ) -> None:
        self.directory = Path(directory)
        self.chief = worker_index == 0
        self.checkpoint = checkpoint
        self.write_dir = (
            self.directory if self.chief else self.directory / f".worker-{worker_index}-scratch"
        )
        self.keep = keep
        self._manager: tf.train.CheckpointManager | None = None

    def _mgr(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, str(self.write_dir), max_to_keep=self.keep, checkpoint_name=PREFIX
            )
        return self._manager

    # ---- writing ----------------------------------------------------------------------------
    def save(self, pos: Position, global_step: int, extra: dict[str, Any]) -> str:
        prefix = self._mgr().save(checkpoint_number=global_step)
        if not self.chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)
            self._manager = None  # its folder is gone; a fresh manager next time
            return prefix
        manifest = {
            "epoch": pos.epoch,
            "step": pos.step,
            "global_step": global_step,
            "files": {
                os.path.basename(f): {"bytes": os.path.getsize(f), "sha256": _sha256(f)}
                for f in _files_of(prefix)
            },
            **extra,
        }
        target = prefix + MANIFEST_SUFFIX
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        self._prune_manifests()
        return prefix

    def _prune_manifests(self) -> None:
        live = {os.path.basename(p) for p in self._mgr().checkpoints}
        for m in glob.glob(str(self.directory / f"{PREFIX}-*{MANIFEST_SUFFIX}")):
            if os.path.basename(m)[: -len(MANIFEST_SUFFIX)] not in live:
                os.remove(m)

    # ---- reading ----------------------------------------------------------------------------
    def _listed(self) -> list[str]:
        """Checkpoint prefixes the state file lists, oldest first; only names of this
        directory's own checkpoints (a state file pointing elsewhere is not followed)."""
        if not self.directory.is_dir():
            return []
        try:
            state = tf.train.get_checkpoint_state(str(self.directory))
        except (tf.errors.OpError, ValueError) as err:
            first = str(err).strip().splitlines()[0][:200]
            raise TrainerError(
                f"checkpoint state file {self.directory / 'checkpoint'} is unreadable ({first})"
            ) from None
        if state is None:
            return []
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        out = []
        here = os.path.realpath(self.directory)
        for p in paths:
            name = os.path.basename(p)
            if not p or os.path.realpath(os.path.dirname(os.path.join(here, p))) != here:
                log.warning("checkpoint state file names %r outside %s; ignored", p, self.directory)
                continue
            out.append(str(self.directory / name))
        return out

    def _move_aside(self, prefix: str, why: str) -> None:
        """Chief only: a damaged checkpoint's files go to `corrupt/`, never deleted."""
        if not self.chief:
            return
        aside = self.directory / CORRUPT_DIR
        aside.mkdir(exist_ok=True)
        for f in glob.glob(prefix + ".*"):
            target = aside / os.path.basename(f)
            if target.exists():
                target = aside / f"{os.path.basename(f)}-{time.time_ns()}"
            os.replace(f, target)
        log.warning(
            "moved damaged checkpoint %s aside to %s (%s)", os.path.basename(prefix), aside, why
        )

    @staticmethod
    def validate(prefix: str) -> tuple[dict[str, Any] | None, str | None]:
        mpath = prefix + MANIFEST_SUFFIX
        try:
            with open(mpath, encoding="utf-8") as f:
                manifest = json.load(f)
        except FileNotFoundError:
            return None, "its manifest is missing (a save that did not finish)"
        except (OSError, json.JSONDecodeError) as err:
            return None, f"its manifest is unreadable ({err})"
        files = manifest.get("files") or {}
        if not any(name.endswith(".index") for name in files):
            return None, "its manifest lists no index file"
        base = os.path.dirname(prefix)
        for name, info in files.items():
            f = os.path.join(base, name)
            if not os.path.isfile(f):
                return None, f"{name} is missing"
            if os.path.getsize(f) != info.get("bytes"):
                return None, f"{name} has {os.path.getsize(f)} bytes, expected {info.get('bytes')}"
            if _sha256(f) != info.get("sha256"):
                return None, f"{name} fails its checksum"
        return manifest, None

    def latest_valid(self) -> SavedCheckpoint | None:
        problems: list[tuple[str, str]] = []
        for prefix in reversed(self._listed()):
            manifest, why = self.validate(prefix)
            if manifest is not None:
                for bad, bad_why in problems:
                    log.warning(
                        "checkpoint %s is unusable (%s); falling back to %s",
                        os.path.basename(bad),
                        bad_why,
                        os.path.basename(prefix),
                    )
                    self._move_aside(bad, bad_why)
                return SavedCheckpoint(
                    prefix,
                    Position(int(manifest["epoch"]), int(manifest["step"])),
                    int(manifest["global_step"]),
                    manifest,
                )
            problems.append((prefix, why or "invalid"))
        if problems:
            bad, why = problems[0]
            raise TrainerError(
                f"checkpoint {bad} is unusable ({why}) and no earlier valid "
                "checkpoint exists; move it away to start from scratch"
            )
        return None

    def restore(self, saved: SavedCheckpoint) -> None:
        try:
            status = self.checkpoint.read(saved.prefix)
            status.assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as err:
            first = str(err).strip().splitlines()[0][:200]
            raise TrainerError(
                f"checkpoint {saved.prefix} does not fit this job's model or optimizers ({first})"
            ) from None
