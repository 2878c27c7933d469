"""A store that fills up while the trainer checkpoints into it: a real Azure Blob
server (Azurite, blobs kept on disk) whose files may not grow past a limit, as a full disk
behaves. The checkpoint that does not fit is never taken as one (no manifest; a reader in a
new folder resumes from the previous whole checkpoint), its local copy is kept, the retries
are bounded and logged, and the failure is one line naming the checkpoint, the bucket, the
retries and the work lost, in the exception and in the termination message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubegan_api.contract import ENV_TERMINATION_LOG
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.bucket import BucketCheckpoints
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position
from kubegan_trainer.storage.sync import BucketBackedStore, finish_uploads

from tests.support.azurite import Azurite

# Room for the first checkpoint and Azurite's own metadata, not for the second one.
DISK_BYTES = 400_000
SMALL, LARGE = 50_000, 1_000_000
STEPS_PER_EPOCH = 10


@pytest.fixture(scope="module")
def full_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    root = tmp_path_factory.mktemp("azurite-full")
    server = Azurite.start(root, disk=root / "blobs", disk_bytes=DISK_BYTES)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def uri(full_store: Azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in full_store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(objstore, "RETRY_SECONDS", 3.0)
    return f"az://{full_store.make_container()}/jobs/full"


def _store(root: Path, uri: str, warnings: list[str]) -> BucketBackedStore:
    parsed = objstore.parse_uri(uri, "test")
    bucket = BucketCheckpoints(objstore.open_store(parsed), parsed, warn=warnings.append)
    return BucketBackedStore(root, 3, bucket, warn=warnings.append)


def _save(store: CheckpointStore, pos: Position, size: int) -> None:
    staging = store.begin(pos)
    (staging / "state.pt").write_bytes(bytes(i % 251 for i in range(size)))
    store.commit(staging, pos)


def test_a_store_that_fills_up_keeps_the_previous_checkpoint_and_says_so_in_one_line(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    termination = tmp_path / "termination-log"
    termination.write_text("")
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(termination))
    said: list[str] = []
    store = _store(tmp_path / "run", uri, said)
    _save(store, Position(1, 0), SMALL)
    assert store.finish(60).committed == Position(1, 0)

    _save(store, Position(2, 0), LARGE)
    with pytest.raises(objstore.StoreError) as err:
        finish_uploads(store, 0, STEPS_PER_EPOCH, stop_at=None)
    line = str(err.value)
    assert "\n" not in line and len(line) < 700, line
    assert line.startswith(f"checkpoint ckpt-000002-00000000 not committed to {uri} ("), line
    assert "still failing after" in line, line
    assert line.endswith(
        f"the bucket's latest is ckpt-000001-00000000: {STEPS_PER_EPOCH} steps of work lost"
    ), line
    # Bounded retries, each said, never silent.
    assert any("transient error, retry" in s for s in said + caplog.messages), said
    # The stop's message says the same, so the job's status can.
    message = json.loads(termination.read_text())
    assert message["checkpoint"]["epoch"] == 1 and message["lost"]["steps"] == STEPS_PER_EPOCH
    assert message["lost"]["reason"] == line
    # Never lose work: the checkpoint the store refused stays in the run folder.
    assert (tmp_path / "run" / "ckpt-000002-00000000" / "state.pt").stat().st_size == LARGE

    # A new pod (an empty folder) resumes from the last whole checkpoint, never the half one.
    fresh = _store(tmp_path / "new-pod", uri, [])
    ref = fresh.latest_valid()
    assert ref is not None and ref.position == Position(1, 0)
    assert (ref.path / "state.pt").read_bytes() == bytes(i % 251 for i in range(SMALL))
