"""Checkpoint bookkeeping, framework-free (DESIGN §5).

Layout under the checkpoint directory:

    ckpt-000003-000000/         epoch 3 finished (3 epochs done, step 0 of epoch 4)
        state.pt                backend-specific payload files ...
        manifest.json           written last: position, time, size + sha256 of every file
    ckpt-000003-000120/         mid-epoch: 3 epochs done, 120 steps of epoch 4 done
    .tmp-ckpt-.../              being written; never considered

A checkpoint is written into a `.tmp-*` folder and renamed into place, so a pod killed
while writing leaves no torn "latest". The manifest's checksums catch a checkpoint
damaged after the fact (a bad disk, a truncated copy), and a manifest of the wrong shape
(manifest.py) counts as damage too; discovery then falls back to the
previous one with a warning and moves the damaged one to `corrupt/` (never deleted: it is
evidence, and maybe recoverable). Pruning deletes only intact checkpoints older than the
newest `keep` intact ones, and never one of the `keepBest` with the best quality score in
its manifest (retention.py), so a good checkpoint is never removed before a newer good one
exists. Backends only fill a folder with files: PyTorch one `state.pt`, TensorFlow the
files of `tf.train.Checkpoint.write`; the contract above is the same for both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from kubegan_trainer.base.bounded_read import MANIFEST_MAX_BYTES, file_kind, read_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.manifest import (
    MANIFEST,
    FileEntry,
    Manifest,
    ManifestError,
    parse_manifest,
)
from kubegan_trainer.storage.retention import Score, best_kept, score_from, to_export
from kubegan_trainer.storage.store import CheckpointRef, Position, checkpoint_name

log = logging.getLogger(__name__)

CORRUPT_DIR = "corrupt"
_NAME = re.compile(r"^ckpt-(\d{6,})-(\d{8,})$")


def _sha256(path: Path) -> str:
    """The file's sha256; a file that is not (or no longer) a regular file raises
    OSError instead of being read (a FIFO would block, a device never end)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path) -> Manifest:
    """The checked manifest of the checkpoint in `folder`; FileNotFoundError when it has
    none, ManifestError (one line) for anything else that is not a manifest."""
    try:
        raw = read_regular(folder / MANIFEST, MANIFEST_MAX_BYTES)
    except TrainerError as err:  # not a regular file, too large
        raise ManifestError(str(err).split(": ", 1)[-1]) from None
    return parse_manifest(raw)


def _file_problem(folder: Path, name: str, size: int, sha256: str) -> str | None:
    """Why the listed file `name` does not match its manifest entry, or None."""
    f = folder / name
    try:
        mode = os.lstat(f)
        if not stat.S_ISREG(mode.st_mode):
            return f"{name} is {file_kind(mode.st_mode)}, not a regular file"
        expected = FileEntry(size, sha256)
        problem = content_problem(name, expected, mode.st_size, None)
        if problem is None:
            problem = content_problem(name, expected, mode.st_size, _sha256(f))
        if problem is not None:
            return problem
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as err:
        return f"{name} is unreadable ({err.strerror or err})"
    return None


def content_problem(name: str, expected: FileEntry, size: int, sha256: str | None) -> str | None:
    """Why a file of `size` bytes (and `sha256`, None when not computed) is not the one the
    manifest lists, or None. The same words for a folder and for a bucket."""
    if size != expected.size:
        return f"{name} has {size} bytes, expected {expected.size}"
    if sha256 is not None and sha256 != expected.sha256:
        return f"{name} fails its checksum"
    return None


def prunable(
    intact_newest_first: list[str], keep: int, pinned: set[str], best: set[str] | None = None
) -> list[str]:
    """Which intact checkpoints (names, newest first) pruning deletes: all but the newest
    `keep`, never a pinned one (a local copy whose upload is not committed yet) nor one of
    the `best` (keepBest). The same decision for a folder and for a bucket."""
    spared = pinned | (best or set())
    return [name for name in intact_newest_first[keep:] if name not in spared]


def checkpoint_created(root: Path, pos: Position) -> float:
    """When the checkpoint at `pos` was written (its manifest's time), for reporting only:
    the file's time when the manifest cannot say, now when neither can."""
    folder = Path(root) / checkpoint_name(pos)
    try:
        created = read_manifest(folder).created
        if created:
            return created
        return (folder / MANIFEST).stat().st_mtime
    except (OSError, ManifestError):
        return time.time()


class CheckpointStore:
    """Writes, lists, validates and prunes checkpoints in one directory."""

    def __init__(
        self,
        root: Path,
        keep: int,
        warn: Callable[[str], None] | None = None,
        writer: bool = True,
        keep_best: int = 0,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.root = Path(root)
        self.keep = keep
        self.keep_best = keep_best
        self._warn = warn or log.warning
        # Several processes may read one directory (TF workers); one of them changes it.
        self.writer = writer
        self._good: set[str] = set()  # names verified intact (written or checked) by us

    # ---- writing -------------------------------------------------------------------
    def begin(self, pos: Position) -> Path:
        """A fresh staging folder for the checkpoint at `pos`; fill it, then `commit`."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".tmp-{checkpoint_name(pos)}-{os.getpid()}-{time.time_ns()}"
        staging.mkdir()
        return staging

    def commit(self, staging: Path, pos: Position, extra: dict | None = None) -> CheckpointRef:
        """Checksum the staged files, write the manifest, fsync, rename into place, prune."""
        files = {}
        for f in sorted(p for p in staging.iterdir() if p.is_file()):
            files[f.name] = {"bytes": f.stat().st_size, "sha256": _sha256(f)}
            _fsync_file(f)
        created = time.time()
        manifest = {
            "epoch": pos.epoch,
            "step": pos.step,
            "created": created,
            "files": files,
            **(extra or {}),
        }
        mpath = staging / MANIFEST
        mpath.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        _fsync_file(mpath)
        final = self.root / checkpoint_name(pos)
        if final.exists():
            # Only a checkpoint that failed validation can sit at a position we are writing
            # again (we resumed from an earlier one); keep it aside for inspection.
            self.move_aside(CheckpointRef(final, pos, created), "replaced by a new save")
        os.replace(staging, final)
        _fsync_dir(self.root)
        self._good.add(final.name)
        self.prune()
        return CheckpointRef(final, pos, created)

    def abort(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    # ---- reading -------------------------------------------------------------------
    def list(self) -> list[CheckpointRef]:
        """Committed checkpoints (valid or not), oldest first."""
        if not self.root.is_dir():
            return []
        refs = []
        for p in self.root.iterdir():
            m = _NAME.match(p.name)
            if m and p.is_dir():
                pos = Position(int(m.group(1)), int(m.group(2)))
                refs.append(CheckpointRef(p, pos, p.stat().st_mtime))
        return sorted(refs, key=lambda r: r.position)

    def validate(self, ref: CheckpointRef) -> str | None:
        """None when the checkpoint is intact, else why it is not (one line). A manifest
        of the wrong shape is damage like a failed checksum, never an exception."""
        try:
            manifest = read_manifest(ref.path)
        except FileNotFoundError:
            return "manifest.json is missing"
        except ManifestError as err:
            return f"manifest.json is malformed ({err})"
        except OSError as err:
            return f"manifest.json is unreadable ({err.strerror or err})"
        if (manifest.epoch, manifest.step) != (ref.position.epoch, ref.position.step):
            return "manifest position does not match the folder name"
        for name, entry in manifest.files.items():
            problem = _file_problem(ref.path, name, entry.size, entry.sha256)
            if problem is not None:
                return problem
        return None

    def latest_valid(self) -> CheckpointRef | None:
        """The newest intact checkpoint; warns about each newer damaged one it skips.

        Raises TrainerError when checkpoints exist but none is intact: starting from
        scratch would silently throw away training and overwrite the evidence.
        """
        refs = self.list()
        problems = []
        for ref in reversed(refs):
            why = self.validate(ref)
            if why is None:
                self._good.add(ref.name)
                for bad, bad_why in problems if self.writer else ():
                    self._warn(
                        f"checkpoint {bad.name} is unreadable ({bad_why}); "
                        f"falling back to {ref.name}"
                    )
                    self.move_aside(bad, bad_why)
                return ref
            problems.append((ref, why))
        if problems:
            # Nothing is moved: the user decides what to do with the only checkpoints there are.
            bad, why = problems[0]
            raise TrainerError(
                f"checkpoint {bad.path} is unreadable ({why}) and no earlier valid "
                "checkpoint exists; move it away to start from scratch"
            )
        return None

    def manifest(self, ref: CheckpointRef) -> Manifest:
        """The checked manifest (ManifestError when it is not one)."""
        return read_manifest(ref.path)

    # ---- pruning -------------------------------------------------------------------
    def move_aside(self, ref: CheckpointRef, why: str) -> Path:
        """Move a damaged checkpoint to `corrupt/<name>` (a unique name if taken)."""
        aside_dir = self.root / CORRUPT_DIR
        aside_dir.mkdir(exist_ok=True)
        target = aside_dir / ref.name
        if target.exists():
            target = aside_dir / f"{ref.name}-{time.time_ns()}"
        os.replace(ref.path, target)
        _fsync_dir(self.root)
        self._good.discard(ref.name)
        self._warn(f"moved damaged checkpoint {ref.name} aside to {target} ({why})")
        return target

    def _intact(self, ref: CheckpointRef) -> bool:
        if ref.name in self._good:
            return True
        why = self.validate(ref)
        if why is None:
            self._good.add(ref.name)
            return True
        self.move_aside(ref, why)
        return False

    def pinned(self) -> set[str]:
        """Names pruning must keep whatever their age (a bucket's store pins local copies
        until their upload is committed)."""
        return set()

    def scored(self, refs: list[CheckpointRef]) -> list[tuple[str, Score | None]]:
        """Each checkpoint's name and the quality score its manifest carries, if any."""
        out = []
        for ref in refs:
            try:
                out.append((ref.name, score_from(read_manifest(ref.path).extra)))
            except (OSError, ManifestError):
                out.append((ref.name, None))
        return out

    def best_checkpoint(self) -> CheckpointRef | None:
        """The intact checkpoint whose generator is exported: the best scored, else the
        newest (retention.to_export); None when there is none."""
        refs = [ref for ref in reversed(self.list()) if self.validate(ref) is None]
        name = to_export(self.scored(refs))
        return next((ref for ref in refs if ref.name == name), None)

    def prune(self) -> None:
        """Keep the newest `keep` intact checkpoints and the `keep_best` best scored ones,
        delete older intact ones; a damaged one found on the way is moved aside, never
        deleted."""
        refs = {ref.name: ref for ref in reversed(self.list()) if self._intact(ref)}
        scored = self.scored(list(refs.values())) if self.keep_best else []
        best = best_kept(scored, self.keep_best)
        for name in prunable(list(refs), self.keep, self.pinned(), best):
            shutil.rmtree(refs[name].path, ignore_errors=True)
            self._good.discard(name)

    def clean_staging(self) -> None:
        """Remove staging folders left by killed writers (called once at start-up)."""
        if self.root.is_dir():
            for p in self.root.glob(".tmp-ckpt-*"):
                shutil.rmtree(p, ignore_errors=True)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and Windows) refuse directory fsync; rename is still atomic
    finally:
        os.close(fd)
