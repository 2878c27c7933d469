"""Where a run's artifacts are stored: beside the checkpoints, in the same place.

    <store>/metrics.jsonl                     the epoch history (rewritten whole in a bucket)
    <store>/samples/epoch-NNNN.png            each epoch's sample grid
    <store>/tensorboard/events.out.tfevents.* one event file per epoch (worker/tensorboard.py)
    <store>/logs/<start>-worker-0.log         rank 0's log, one file per process start
    <store>/export/                           the exported generator (export.py)

`<store>` is the run's output folder (a `kubegan run` directory, or the job's folder on its
checkpoint claim: the trainer writes the files there directly, nothing is copied), or the
bucket prefix of `spec.checkpoint.uri`, where rank 0 writes the files locally as before and
a background thread uploads them (`BucketSink`), so a step never waits for a bucket. Keys
queued again before their upload (the history after two quick epochs, the log) are
uploaded once, with their newest content. Upload failures are logged, never fatal:
checkpoints are what a job cannot lose, and their own store fails the job for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kubegan_api.contract import ENV_CHECKPOINT_URI
from kubegan_api.sections import CheckpointSpec

from kubegan_trainer.base.bounded_read import read_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage import objstore

log = logging.getLogger(__name__)

Stored = Callable[[str], None]  # called with a key once its content is in the store


class Sink(Protocol):
    """The calls rank 0 makes on the artifacts' store; keys are relative ("samples/x.png")."""

    location: str  # the store, for messages: a folder path or a bucket URI

    def put_file(self, key: str, path: Path) -> None: ...
    def put_bytes(self, key: str, data: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def keys(self, prefix: str) -> list[str]: ...
    def read(self, key: str, limit: int) -> bytes | None: ...
    def flush(self, timeout: float | None) -> bool: ...


def open_bucket(
    spec: CheckpointSpec | None, environ: Mapping[str, str] | None = None
) -> tuple[objstore.BucketUri, Any] | None:
    """The checkpoint bucket (its URI and an obstore store) the job names, as the checkpoint
    store opens it (sync.open_checkpoint_store), or None when it names none."""
    e = os.environ if environ is None else environ
    uri = e.get(ENV_CHECKPOINT_URI) or (spec.uri if spec else "")
    if not uri:
        return None
    field = ENV_CHECKPOINT_URI if e.get(ENV_CHECKPOINT_URI) else "spec.checkpoint.uri"
    parsed = objstore.parse_uri(uri, field)
    override, name = objstore.endpoint_setting(e)
    endpoint = override or (spec.endpoint if spec else "") or None
    where = name if override else "spec.checkpoint.endpoint"
    return parsed, objstore.open_store(parsed, endpoint, where)


class FolderSink:
    """The output folder itself: the trainer already wrote each file where it belongs."""

    def __init__(self, root: Path, on_stored: Stored | None = None) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self._stored = on_stored or (lambda key: None)

    def put_file(self, key: str, path: Path) -> None:
        dest = self.root / key
        if os.path.abspath(path) != os.path.abspath(dest):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, dest)
        self._stored(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        dest = self.root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        self._stored(key)

    def delete(self, key: str) -> None:
        path = self.root / key
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
        except FileNotFoundError:
            pass

    def keys(self, prefix: str) -> list[str]:
        """Regular files under `prefix/` (symlinks and anything else are not artifacts)."""
        top = self.root / prefix
        if not top.is_dir() or top.is_symlink():
            return []
        out = []
        for entry in os.scandir(top):
            if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                out.append(f"{prefix}/{entry.name}")
        return sorted(out)

    def read(self, key: str, limit: int) -> bytes | None:
        """The file's bytes; None when it is missing, a symlink (a run folder holds none:
        launch/rundir.py), larger than `limit` or not a regular file."""
        path = self.root / key
        try:
            if os.path.islink(path):
                return None
            return read_regular(path, limit)
        except FileNotFoundError:
            return None
        except TrainerError as err:  # too large, not a regular file: not ours to read
            log.warning("artifacts: %s not read: %s", key, err)
            return None

    def flush(self, timeout: float | None) -> bool:
        return True


class BucketSink:
    """The bucket prefix: puts and deletes queued for one uploader thread, in order."""

    def __init__(
        self,
        store: Any,
        uri: objstore.BucketUri,
        on_stored: Stored | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.store, self.uri = store, uri
        self.location = str(uri)
        self._stored = on_stored or (lambda key: None)
        self._warn = warn or log.warning
        self._lock = threading.Condition()
        self._queue: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._busy = False
        self._thread: threading.Thread | None = None

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return objstore.call(f"{what} ({self.uri})", fn, warn=self._warn)

    # ---- queued writes ---------------------------------------------------------------------
    def put_file(self, key: str, path: Path) -> None:
        self._enqueue(key, ("file", Path(path)))

    def put_bytes(self, key: str, data: bytes) -> None:
        self._enqueue(key, ("bytes", bytes(data)))

    def delete(self, key: str) -> None:
        self._enqueue(key, ("delete", None))

    def _enqueue(self, key: str, op: tuple[str, Any]) -> None:
        with self._lock:
            self._queue.pop(key, None)  # superseded: only the newest content goes up
            self._queue[key] = op
            self._lock.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="artifacts", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                key, op = self._queue.popitem(last=False)
                self._busy = True
            try:
                self._apply(key, op)
            except (TrainerError, OSError) as err:
                self._warn(f"artifact {key} not stored in {self.uri}: {err}")
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def _apply(self, key: str, op: tuple[str, Any]) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        kind, value = op
        if kind == "delete":
            with contextlib.suppress(NotFoundError, FileNotFoundError):
                self._call(f"delete {key}", lambda: obstore.delete(self.store, key))
            return
        if kind == "file" and not value.is_file():
            return  # replaced or removed locally since it was queued: nothing to store
        self._call(f"upload {key}", lambda: obstore.put(self.store, key, value))
        self._stored(key)

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything queued is stored, at most `timeout` seconds; whether it was."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    # ---- reads (synchronous: at start-up and by the CLI) -----------------------------------
    def keys(self, prefix: str) -> list[str]:
        import obstore

        def collect() -> list[str]:
            return [m["path"] for batch in obstore.list(self.store, f"{prefix}/") for m in batch]

        return sorted(self._call(f"list {prefix}/", collect))

    def read(self, key: str, limit: int) -> bytes | None:
        """The object's bytes, or None when it does not exist or is larger than `limit`."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            size = self._call(f"read {key}", lambda: obstore.head(self.store, key))["size"]
        except (NotFoundError, FileNotFoundError):
            return None
        if size > limit:
            self._warn(f"artifact {key} in {self.uri} is larger than {limit} bytes; not read")
            return None
        if size == 0:  # S3 refuses a range of an empty object
            return b""
        data = self._call(
            f"read {key}",
            lambda: bytes(obstore.get_range(self.store, key, start=0, length=size)),
        )
        return data[:limit]
