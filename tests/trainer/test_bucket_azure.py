"""The checkpoint contract on Azure Blob's code path (obstore's Azure client) against Azurite
(tests/support/azurite.py): commit and resume into an empty folder, a truncated checkpoint
moved under corrupt/ and the previous one used, two writers racing for one step (the
create-only manifest: `If-None-Match: *`)."""

from __future__ import annotations

import threading
from pathlib import Path

import obstore
import pytest
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.bucket import BucketCheckpoints, CommitRefused
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position
from kubegan_trainer.storage.sync import BucketBackedStore

from tests.support.azurite import Azurite, azurite_fixture

azurite = pytest.fixture(scope="module")(azurite_fixture)


@pytest.fixture
def uri(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in azurite.env().items():
        monkeypatch.setenv(key, value)
    return f"az://{azurite.make_container()}/jobs/one"


def _bucket(uri: str, warnings: list[str] | None = None) -> BucketCheckpoints:
    parsed = objstore.parse_uri(uri, "test")
    warn = warnings.append if warnings is not None else None
    return BucketCheckpoints(objstore.open_store(parsed), parsed, warn=warn)


def _save(store: CheckpointStore, pos: Position, seed: int) -> None:
    staging = store.begin(pos)
    (staging / "state.pt").write_bytes(bytes((seed + i) % 251 for i in range(1000)))
    store.commit(staging, pos)


def _keys(uri: str) -> list[str]:
    return sorted(m["path"] for b in obstore.list(_bucket(uri).store) for m in b)


def test_commit_resume_and_truncation_on_azure(uri: str, tmp_path: Path) -> None:
    store = BucketBackedStore(tmp_path / "a", 3, _bucket(uri))
    for i in (1, 2):
        _save(store, Position(i, 0), seed=i)
        assert store.finish(30).lost_from is None
    fresh = BucketBackedStore(tmp_path / "b", 3, _bucket(uri))
    ref = fresh.latest_valid()
    assert ref is not None and ref.position == Position(2, 0)
    assert (ref.path / "state.pt").read_bytes() == (
        tmp_path / "a" / ref.name / "state.pt"
    ).read_bytes()
    b = _bucket(uri)
    key = next(k for k in _keys(uri) if k.startswith("ckpt-000002") and k.endswith("state.pt"))
    obstore.put(b.store, key, bytes(obstore.get(b.store, key).bytes())[:500])
    warnings: list[str] = []
    again = BucketBackedStore(tmp_path / "c", 3, _bucket(uri, warnings))
    ref = again.latest_valid()
    assert ref is not None and ref.position == Position(1, 0)
    assert len([k for k in _keys(uri) if k.startswith("corrupt/ckpt-000002-00000000/")]) == 2
    assert any("state.pt has 500 bytes, expected 1000" in w for w in warnings), warnings


def test_two_writers_racing_on_azure_one_commits(uri: str, tmp_path: Path) -> None:
    for tag, seed in (("a", 1), ("b", 2)):
        _save(CheckpointStore(tmp_path / tag, 3), Position(1, 5), seed)
    results: dict[str, object] = {}
    go = threading.Barrier(2)

    def race(tag: str) -> None:
        bucket = _bucket(uri)
        go.wait()
        try:
            results[tag] = bucket.upload(tmp_path / tag / "ckpt-000001-00000005", Position(1, 5))
        except CommitRefused as err:
            results[tag] = err

    threads = [threading.Thread(target=race, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(r).__name__ for r in results.values()) == ["CommitRefused", "bool"]
    assert any(r is True for r in results.values()), results
    refused = next(r for r in results.values() if isinstance(r, CommitRefused))
    assert "another writer committed this step first" in str(refused)
