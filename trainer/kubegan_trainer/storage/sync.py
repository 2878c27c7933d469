"""The checkpoint store a backend opens: the local folder alone, or the local folder as the
copy of a bucket (`ENV_CHECKPOINT_URI`), uploaded in the background (bucket.py).

`BucketBackedStore` is a CheckpointStore whose decisions (what is whole, what to prune, what
to move aside) are the folder's own; it adds the bucket's I/O around them:

- `latest_valid`: the bucket decides (local copies are only a cache), see bucket.py.
- `commit`: commits locally as before, then hands the checkpoint to the uploader thread; a
  permanent upload failure seen since the last commit is raised here, so the job fails
  with its one line instead of training on without checkpoints.
- `pinned`: local copies not yet committed in the bucket are never pruned locally.
- `finish(timeout)`: wait for what is pending (at most `timeout` seconds after a stop);
  returns what is the latest in the bucket and how many steps were not committed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubegan_api.contract import ENV_CHECKPOINT_URI
from kubegan_api.sections import CheckpointSpec

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage import objstore, termination
from kubegan_trainer.storage.bucket import BucketCheckpoints, CommitRefused, Remote
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.retention import to_export
from kubegan_trainer.storage.store import CheckpointRef, Position, Store, checkpoint_name

log = logging.getLogger(__name__)

# After SIGTERM: GKE spot gives 15 s (30 s where the pool asks) from SIGTERM to the kill;
# the stop checkpoint itself takes a few of them, the rest is the upload's.
STOP_UPLOAD_SECONDS = 10.0


@dataclass(frozen=True)
class Outcome:
    """Where the bucket stands after `finish`."""

    committed: Position | None  # the newest checkpoint committed by this run (or resumed)
    lost_from: Position | None  # the newest local one that did not make it, if any
    reason: str = ""


def open_checkpoint_store(
    root: Path,
    keep: int,
    warn: Callable[[str], None] | None = None,
    writer: bool = True,
    spec: CheckpointSpec | None = None,
    environ: Mapping[str, str] | None = None,
) -> Store:
    """The folder's store, or a BucketBackedStore when the job names a bucket: the pod's
    `ENV_CHECKPOINT_URI` (and endpoint) first, else the job's `spec.checkpoint.uri` (and
    `.endpoint`), which is how `kubegan run` of a job with a bucket gets there."""
    e = os.environ if environ is None else environ
    uri = e.get(ENV_CHECKPOINT_URI) or (spec.uri if spec else "")
    keep_best = spec.keep_best if spec else 0
    if not uri:
        return CheckpointStore(root, keep, warn=warn, writer=writer, keep_best=keep_best)
    field = ENV_CHECKPOINT_URI if e.get(ENV_CHECKPOINT_URI) else "spec.checkpoint.uri"
    parsed = objstore.parse_uri(uri, field)
    override, name = objstore.endpoint_setting(e)
    endpoint = override or (spec.endpoint if spec else "") or None
    store = objstore.open_store(parsed, endpoint, name if override else "spec.checkpoint.endpoint")
    bucket = BucketCheckpoints(store, parsed, warn=warn)
    return BucketBackedStore(root, keep, bucket, warn=warn, writer=writer, keep_best=keep_best)


class BucketBackedStore(CheckpointStore):
    def __init__(
        self,
        root: Path,
        keep: int,
        bucket: BucketCheckpoints,
        warn: Callable[[str], None] | None = None,
        writer: bool = True,
        keep_best: int = 0,
    ) -> None:
        super().__init__(root, keep, warn=warn, writer=writer, keep_best=keep_best)
        self.bucket = bucket
        self._lock = threading.Condition()
        self._pending: list[CheckpointRef] = []  # committed locally, not yet in the bucket
        self._busy: CheckpointRef | None = None  # being uploaded now
        self._failure: TrainerError | None = None
        self.committed: Position | None = None  # newest whole one in the bucket we know of
        self._thread: threading.Thread | None = None

    # ---- resume: the bucket decides ---------------------------------------------------------
    def latest_valid(self) -> CheckpointRef | None:
        remotes = self.bucket.list()
        newest = max((r.position for r in remotes if r.committed), default=None)
        if self.writer:
            self._upload_newer_local(newest)
            remotes = self.bucket.list()
        self._fetch_newest_whole(remotes)
        return super().latest_valid()

    def _upload_newer_local(self, newest: Position | None) -> None:
        """Local whole checkpoints newer than the bucket's newest: finished by an earlier
        run in this folder, never committed. Committed now, oldest first."""
        for ref in self.list():
            if newest is not None and ref.position <= newest:
                continue
            if self.validate(ref) is None:
                log.info("uploading %s, finished here but never committed", ref.name)
                self._upload(ref)

    def _fetch_newest_whole(self, remotes: list[Remote]) -> None:
        """Install the bucket's newest whole checkpoint locally (moving damaged newer ones
        aside when this process writes); none in the bucket leaves the folder as it is."""
        local = {ref.name for ref in self.list() if self.validate(ref) is None}
        for remote in reversed(remotes):
            why = self.bucket.listing_problem(remote)
            if why is None and remote.name not in local:
                why = self.bucket.download(remote, self.root)
            if why is None:
                self.committed = remote.position
                self._good.discard(remote.name)  # checked again by the folder's own rules
                log.info("resuming from %s/%s", self.bucket.uri, remote.name)
                return
            if self.writer:
                self.bucket.move_aside(remote, why)
                local_copy = self.root / remote.name
                if local_copy.is_dir():  # a copy of a checkpoint the bucket no longer holds
                    self.move_aside(CheckpointRef(local_copy, remote.position, 0.0), why)
        if remotes and self.writer and not any(r.committed for r in remotes):
            log.info("no whole checkpoint in %s", self.bucket.uri)

    def best_checkpoint(self) -> CheckpointRef | None:
        """The bucket's whole checkpoint to export (the best scored, else the newest),
        downloaded when this folder has no copy of it."""
        whole = self.bucket.whole()
        name = to_export([(r.name, self.bucket.score(r)) for r in whole])
        remote = next((r for r in whole if r.name == name), None)
        if remote is None:
            return None
        local = CheckpointRef(self.root / remote.name, remote.position, 0.0)
        if local.path.is_dir() and self.validate(local) is None:
            return local
        why = self.bucket.download(remote, self.root)
        if why is not None:
            self._warn(f"checkpoint {remote.name} not exported: {why}")
            return None
        return local

    # ---- writing ----------------------------------------------------------------------------
    def commit(self, staging: Path, pos: Position, extra: dict | None = None) -> CheckpointRef:
        self.raise_failure()
        with self._lock:
            ref = super().commit(staging, pos, extra)
            self._pending.append(ref)
            self._lock.notify_all()
        self._start()
        return ref

    def pinned(self) -> set[str]:
        with self._lock:
            names = {ref.name for ref in self._pending}
            if self._busy is not None:
                names.add(self._busy.name)
        return names

    def failure(self) -> TrainerError | None:
        """The first upload that failed for good (one line), if any."""
        with self._lock:
            return self._failure

    def raise_failure(self) -> None:
        failure = self.failure()
        if failure is not None:
            raise failure

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ckpt-upload", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    self._lock.wait()
                # Only the newest is worth uploading: an older one still queued is superseded.
                self._busy, self._pending = self._pending[-1], []
                ref = self._busy
            try:
                self._upload(ref)
            except TrainerError as err:
                with self._lock:
                    self._failure = self._failure or err
                log.error("checkpoint %s not committed to the bucket: %s", ref.name, err)
            finally:
                with self._lock:
                    self._busy = None
                    self._lock.notify_all()

    def _upload(self, ref: CheckpointRef) -> None:
        started = time.monotonic()
        try:
            ours = self.bucket.upload(ref.path, ref.position)
        except CommitRefused as err:
            self._warn(str(err))
            raise
        with self._lock:
            if self.committed is None or ref.position > self.committed:
                self.committed = ref.position
        seconds = time.monotonic() - started
        log.info("committed %s to %s in %.2f s", ref.name, self.bucket.uri, seconds)
        if ours and self.writer:
            self.bucket.prune(self.keep, self.keep_best)

    def finish(self, timeout: float | None) -> Outcome:
        """Wait until every local checkpoint is committed, at most `timeout` seconds (None:
        as long as the uploads take, each bounded by its retries)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._busy is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._lock.wait(left)
            newest = max((r.position for r in self._pending), default=None)
            if self._busy is not None:
                newest = max(filter(None, (newest, self._busy.position)))
            failure = self._failure
        if failure is not None:
            return Outcome(self.committed, newest or self._newest_local(), str(failure))
        if newest is not None:
            return Outcome(self.committed, newest, f"not committed within {timeout:.0f} s")
        return Outcome(self.committed, None)

    def _newest_local(self) -> Position | None:
        refs = self.list()
        return refs[-1].position if refs else None


def steps_between(old: Position | None, new: Position, steps_per_epoch: int) -> int:
    """Optimizer steps from checkpoint `old` (None: the start) to checkpoint `new`."""
    base = old or Position(0, 0)
    return (new.epoch - base.epoch) * steps_per_epoch + new.step - base.step


def finish_uploads(store: Store, code: int, steps_per_epoch: int, stop_at: float | None) -> int:
    """At the end of a run: wait for the bucket (bounded after a stop), say where it stands,
    rewrite the termination message with the bucket's latest (and the work lost, if any).
    A permanent upload failure raises TrainerError (one line); a stop that ran out of time
    keeps `code` (the job resumes from the bucket's latest)."""
    if not isinstance(store, BucketBackedStore):
        return code
    stopping = stop_at is not None
    outcome = store.finish(STOP_UPLOAD_SECONDS if stopping else None)
    if outcome.lost_from is None:
        if stopping and outcome.committed is not None:
            log.info(
                "stop checkpoint %s committed to %s %.2f s after the stop request",
                outcome.committed,
                store.bucket.uri,
                time.monotonic() - stop_at,
            )
        termination.write(outcome.committed)
        return code
    lost = steps_between(outcome.committed, outcome.lost_from, steps_per_epoch)
    latest = checkpoint_name(outcome.committed) if outcome.committed else "none (start over)"
    line = (
        f"checkpoint {checkpoint_name(outcome.lost_from)} not committed to "
        f"{store.bucket.uri} ({outcome.reason}); the bucket's latest is {latest}: "
        f"{lost} steps of work lost"
    )
    termination.write(outcome.committed, {"steps": lost, "reason": line})
    if store.failure() is not None:
        raise objstore.StoreError(line)
    log.error("%s", line)
    return code
