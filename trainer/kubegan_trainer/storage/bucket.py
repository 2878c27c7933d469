"""Checkpoints in a bucket: the checkpoint contract of `kubegan_trainer.storage.folder`, with the
bucket as the truth and the checkpoint directory as a local copy.

Layout under the URI's prefix:

    ckpt-000003-000120/manifest.json         written last, create-only: the commit
    ckpt-000003-000120/<upload>/state.pt     the files, under this upload's own prefix
    corrupt/ckpt-000003-000120[-<ns>]/...    damaged or partial checkpoints, moved aside

- A checkpoint is whole once its manifest exists. The files go first, each under a prefix
  unique to the upload (multipart above CHUNK_BYTES), then the manifest with `mode="create"`
  (S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`, Azure `If-None-Match: *`): of two writers
  of one step exactly one commits; the other's manifest is refused (CommitRefused says so),
  and because its files sit under its own upload prefix it cannot have overwritten the
  winner's. The manifest is the local one (sizes, sha256) plus `objects` (the upload prefix)
  and `etags` (each object's ETag), so a changed object is seen from a listing alone.
- Resume (`BucketBackedStore.latest_valid`) never depends on local state: local whole
  checkpoints newer than the bucket's newest are uploaded first (work the last pod finished
  but did not commit), then the bucket's newest whole checkpoint is downloaded, checked
  against its manifest (size, ETag, sha256) and installed locally; a damaged or partial
  one is moved aside under `corrupt/` (copies, then the originals deleted: the only move
  S3 has; no byte is lost) and the previous one is tried.
- During training a checkpoint is written locally as before and uploaded by a background
  thread; the local copy is pinned until its upload is committed. Only the newest pending
  checkpoint is uploaded (an older one still queued is superseded). On a stop `finish`
  waits at most the grace left; what could not be committed in time is reported as lost
  work (log and termination message), and the bucket's newest whole one stays the latest.
- Keep-N pruning in the bucket uses `folder.prunable`, the folder's decision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_trainer.base.bounded_read import MANIFEST_MAX_BYTES
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.folder import CORRUPT_DIR, content_problem, prunable, read_manifest
from kubegan_trainer.storage.manifest import MANIFEST, Manifest, ManifestError, parse_manifest
from kubegan_trainer.storage.retention import Score, best_kept, score_from
from kubegan_trainer.storage.store import Position, checkpoint_name

log = logging.getLogger(__name__)

_NAME = re.compile(r"^ckpt-(\d{6,})-(\d{8,})$")  # checkpoint.checkpoint_name's shape
CHUNK_BYTES = 16 << 20  # multipart part size (S3 needs >= 5 MiB parts)
UPLOAD_CONCURRENCY = 8
READ_BYTES = 8 << 20


class CommitRefused(TrainerError):
    """Another writer committed this step first; ours was not taken."""


@dataclass(frozen=True)
class Remote:
    """One checkpoint prefix in the bucket: its objects (relative key -> (size, etag))."""

    name: str
    position: Position
    objects: dict[str, tuple[int, str | None]]

    @property
    def committed(self) -> bool:
        return MANIFEST in self.objects


def _position(name: str) -> Position | None:
    """The position a checkpoint prefix names (the folder's naming), or None."""
    m = _NAME.match(name)
    return Position(int(m.group(1)), int(m.group(2))) if m else None


def upload_id() -> str:
    """A prefix no other writer can pick: host, process and time."""
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{time.time_ns()}"


class BucketCheckpoints:
    """The checkpoints under one bucket prefix: list, upload, download, move aside, prune."""

    def __init__(
        self, store: Any, uri: objstore.BucketUri, warn: Callable[[str], None] | None = None
    ) -> None:
        self.store, self.uri = store, uri
        self._warn = warn or log.warning

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return objstore.call(f"{what} ({self.uri})", fn, warn=self._warn)

    # ---- reading ---------------------------------------------------------------------------
    def list(self) -> list[Remote]:
        """Every checkpoint prefix (committed or not), oldest first; corrupt/ is not one."""
        import obstore

        def collect() -> list[dict[str, Any]]:
            return [m for batch in obstore.list(self.store) for m in batch]

        found: dict[str, dict[str, tuple[int, str | None]]] = {}
        for meta in self._call("list the bucket", collect):
            name, _, rest = meta["path"].partition("/")
            if _position(name) is not None and rest:
                found.setdefault(name, {})[rest] = (meta["size"], meta.get("e_tag"))
        refs = [Remote(n, p, objs) for n, objs in found.items() if (p := _position(n))]
        return sorted(refs, key=lambda r: r.position)

    def manifest(self, remote: Remote) -> tuple[Manifest, dict[str, Any]]:
        """The checked manifest and its raw JSON; ManifestError when it is not one."""
        import obstore

        # A manifest is small; anyone who can write the bucket could make it huge, so no
        # more than one byte past the bound is ever read (and an empty one is not asked
        # for: S3 refuses a range of an empty object).
        listed = remote.objects.get(MANIFEST, (0, None))[0]
        if listed == 0 or listed > MANIFEST_MAX_BYTES:
            raise ManifestError(f"{listed} bytes, not a manifest")
        raw = self._call(
            f"read {remote.name}/{MANIFEST}",
            lambda: bytes(
                obstore.get_range(
                    self.store, f"{remote.name}/{MANIFEST}", start=0, length=MANIFEST_MAX_BYTES + 1
                )
            ),
        )
        if len(raw) > MANIFEST_MAX_BYTES:
            raise ManifestError(f"larger than {MANIFEST_MAX_BYTES} bytes")
        manifest = parse_manifest(raw)
        data = json.loads(raw)
        objects = data.get("objects")
        if not isinstance(objects, str) or not objects or "/" in objects or objects in ".":
            raise ManifestError("objects: expected the upload's prefix")
        return manifest, data

    def listing_problem(self, remote: Remote) -> str | None:
        """Why the committed checkpoint is not whole, from its manifest and the listing
        alone (no download): a missing object, a size or ETag that changed."""
        if not remote.committed:
            return "it has no manifest (an upload that never committed)"
        try:
            manifest, data = self.manifest(remote)
        except ManifestError as err:
            return f"manifest.json is malformed ({err})"
        if (manifest.epoch, manifest.step) != astuple(remote.position):
            return "manifest position does not match the prefix"
        etags = data.get("etags") if isinstance(data.get("etags"), dict) else {}
        for name, entry in manifest.files.items():
            key = f"{data['objects']}/{name}"
            if key not in remote.objects:
                return f"the manifest names {name}, which is missing from the bucket"
            size, etag = remote.objects[key]
            problem = content_problem(name, entry, size, None)
            if problem is not None:
                return f"{problem} (changed under its manifest)"
            if etags.get(name) and etag and _etag(etags[name]) != _etag(etag):
                return f"{name} changed under its manifest (its ETag differs)"
        return None

    # ---- writing ---------------------------------------------------------------------------
    def upload(self, folder: Path, pos: Position) -> bool:
        """Upload the local whole checkpoint in `folder` and commit it: True when committed
        by us, False when this very checkpoint (same checksums) was already committed.
        CommitRefused when another writer committed a different one at this step."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        name = checkpoint_name(pos)
        local = read_manifest(folder)
        uid = upload_id()
        etags = {}
        for file in sorted(local.files):
            key = f"{name}/{uid}/{file}"
            result = self._call(
                f"upload {name}/{file}",
                lambda key=key, file=file: obstore.put(
                    self.store,
                    key,
                    folder / file,
                    chunk_size=CHUNK_BYTES,
                    max_concurrency=UPLOAD_CONCURRENCY,
                ),
            )
            etags[file] = result.get("e_tag")
        data = json.loads((folder / MANIFEST).read_bytes())
        data.update(objects=uid, etags=etags)
        body = json.dumps(data, indent=1, sort_keys=True).encode()
        try:
            self._call(
                f"commit {name}",
                lambda: obstore.put(self.store, f"{name}/{MANIFEST}", body, mode="create"),
            )
        except AlreadyExistsError:
            return self._already_committed(name, pos, local)
        return True

    def _already_committed(self, name: str, pos: Position, local: Manifest) -> bool:
        theirs = next((r for r in self.list() if r.name == name), None)
        try:
            other = self.manifest(theirs)[0] if theirs else None
        except ManifestError:
            other = None
        if other is not None and other.files == local.files:
            return False
        raise CommitRefused(
            f"checkpoint {name}: another writer committed this step first in {self.uri}; "
            "this writer's manifest was refused (create-only) and its upload is not used"
        )

    def download(self, remote: Remote, root: Path) -> str | None:
        """Download the committed checkpoint into `root/<name>` (aside, then renamed into
        place), checking every file's size and sha256 as it arrives: None when whole, else
        why not (nothing is installed then)."""
        import obstore

        manifest, data = self.manifest(remote)
        staging = root / f".tmp-{remote.name}-dl-{os.getpid()}-{time.time_ns()}"
        staging.mkdir(parents=True)
        try:
            for file, entry in manifest.files.items():
                key = f"{remote.name}/{data['objects']}/{file}"
                got = self._call(
                    f"download {remote.name}/{file}",
                    lambda key=key, file=file, entry=entry: _fetch(
                        self.store, key, staging / file, obstore, entry.size
                    ),
                )
                if got is None:
                    return f"the manifest names {file}, which is missing from the bucket"
                problem = content_problem(file, entry, got[0], got[1])
                if problem is not None:
                    return f"{problem} (changed under its manifest)"
            (staging / MANIFEST).write_text(json.dumps(data, indent=1, sort_keys=True))
            _install(staging, root / remote.name)
            return None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def move_aside(self, remote: Remote, why: str) -> str:
        """Copy every object of the checkpoint under corrupt/ and only then delete the
        originals (a move in S3); returns the new prefix."""
        import obstore

        target = f"{CORRUPT_DIR}/{remote.name}"
        if any(True for batch in obstore.list(self.store, f"{target}/") for _ in batch):
            target = f"{target}-{time.time_ns()}"
        for rel in remote.objects:
            self._call(
                f"move {remote.name}/{rel} aside",
                lambda rel=rel: obstore.copy(self.store, f"{remote.name}/{rel}", f"{target}/{rel}"),
            )
        for rel in remote.objects:
            self._call(
                f"delete {remote.name}/{rel}",
                lambda rel=rel: obstore.delete(self.store, f"{remote.name}/{rel}"),
            )
        self._warn(f"moved damaged checkpoint {remote.name} aside to {self.uri}/{target} ({why})")
        return target

    def score(self, remote: Remote) -> Score | None:
        """The quality score in a committed checkpoint's manifest, if it carries one."""
        try:
            return score_from(self.manifest(remote)[1])
        except ManifestError:
            return None

    def whole(self) -> list[Remote]:
        """The whole checkpoints (committed, nothing changed under their manifest), newest
        first."""
        remotes = reversed(self.list())
        return [r for r in remotes if r.committed and self.listing_problem(r) is None]

    def prune(self, keep: int, keep_best: int = 0) -> None:
        """Delete whole checkpoints older than the newest `keep` whole ones, except the
        `keep_best` best scored (never one that is not whole: that is left for resume to
        move aside)."""
        import obstore

        whole = {r.name: r for r in self.whole()}
        scored = [(n, self.score(r)) for n, r in whole.items()] if keep_best else []
        best = best_kept(scored, keep_best)
        for name in prunable(list(whole), keep, set(), best):
            keys = [f"{name}/{rel}" for rel in sorted(whole[name].objects, key=_manifest_last)]
            for key in keys:  # the manifest last: a half-deleted one is never taken as whole
                self._call(f"prune {key}", lambda key=key: obstore.delete(self.store, key))


def _etag(value: object) -> str:
    """An ETag as compared: Azure's PUT answers it quoted and its listing bare."""
    return str(value).removeprefix("W/").strip('"').lower()


def _manifest_last(rel: str) -> tuple[bool, str]:
    return rel == MANIFEST, rel


def astuple(pos: Position) -> tuple[int, int]:
    return pos.epoch, pos.step


def _fetch(store: Any, key: str, dest: Path, obstore: Any, limit: int) -> tuple[int, str] | None:
    """Stream one object to `dest`: (bytes, sha256), or None when it does not exist. An
    object that grows past `limit` (its manifest's size) is not read further: the size
    returned then says it is not the file the manifest names."""
    from obstore.exceptions import NotFoundError

    try:
        result = obstore.get(store, key)
    except (NotFoundError, FileNotFoundError):
        return None
    h, size = hashlib.sha256(), 0
    with dest.open("wb") as f:
        for chunk in result.stream(min_chunk_size=READ_BYTES):
            f.write(chunk)
            h.update(chunk)
            size += len(chunk)
            if size > limit:
                break
    return size, h.hexdigest()


def _install(staging: Path, final: Path) -> None:
    """Rename a downloaded checkpoint into place; another process (a TF worker sharing the
    folder) may have installed the same one first, which is as good."""
    try:
        os.replace(staging, final)
    except OSError:
        if not (final / MANIFEST).is_file():
            raise
