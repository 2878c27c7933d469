"""Checkpoints in a bucket against a real S3 server (moto, tests/support): the
commit is create-only (two writers, one wins, the other says so), a checkpoint damaged in
the bucket is moved under corrupt/ and the previous one used, keep-N pruning, resume into an
empty folder, and every fault gives one line."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest
from kubegan_api.contract import ENV_AWS_ENDPOINT_URL, ENV_CHECKPOINT_URI
from kubegan_trainer.launch.ports import reserve_port
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.bucket import BucketCheckpoints, CommitRefused
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position
from kubegan_trainer.storage.sync import BucketBackedStore, open_checkpoint_store

from tests.support.s3_server import S3Server, s3_server_fixture

s3 = pytest.fixture(scope="module")(s3_server_fixture)


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def _bucket(uri: str, warnings: list[str] | None = None) -> BucketCheckpoints:
    parsed = objstore.parse_uri(uri, "test")
    warn = warnings.append if warnings is not None else None
    return BucketCheckpoints(objstore.open_store(parsed), parsed, warn=warn)


def _store(root: Path, uri: str, keep: int = 3, warnings: list[str] | None = None):
    warn = warnings.append if warnings is not None else None
    return BucketBackedStore(root, keep, _bucket(uri, warnings), warn=warn)


def _save(store: CheckpointStore, pos: Position, size: int = 1000, seed: int = 0) -> None:
    staging = store.begin(pos)
    (staging / "state.pt").write_bytes(bytes((seed + i) % 251 for i in range(size)))
    (staging / "extra.bin").write_bytes(b"x" * 10)
    store.commit(staging, pos, extra={"framework": "test"})


def _keys(uri: str) -> list[str]:
    b = _bucket(uri)
    return sorted(m["path"] for batch in obstore.list(b.store) for m in batch)


@pytest.fixture
def uri(s3_env: S3Server) -> Iterator[str]:
    yield f"s3://{s3_env.make_bucket()}/jobs/one"


def test_upload_in_background_then_resume_into_an_empty_folder(uri: str, tmp_path: Path) -> None:
    store = _store(tmp_path / "a", uri, keep=2)
    for i in range(1, 5):
        _save(store, Position(i, 0), seed=i)
        assert store.finish(30).lost_from is None
    names = {k.split("/")[0] for k in _keys(uri)}
    assert names == {"ckpt-000003-00000000", "ckpt-000004-00000000"}  # keep 2, pruned
    # A new pod: an empty folder resumes from the bucket, and says which one.
    fresh = _store(tmp_path / "b", uri)
    ref = fresh.latest_valid()
    assert ref is not None and ref.position == Position(4, 0)
    assert (ref.path / "state.pt").read_bytes() == (
        tmp_path / "a" / ref.name / "state.pt"
    ).read_bytes()


def test_two_writers_racing_for_one_step_one_commits_the_other_is_refused(
    uri: str, tmp_path: Path
) -> None:
    a, b = CheckpointStore(tmp_path / "a", 3), CheckpointStore(tmp_path / "b", 3)
    _save(a, Position(1, 5), seed=1)
    _save(b, Position(1, 5), seed=2)  # same step, different bytes
    results: dict[str, object] = {}
    go = threading.Barrier(2)

    def race(tag: str, folder: Path) -> None:
        bucket = _bucket(uri)
        go.wait()
        try:
            results[tag] = bucket.upload(folder / "ckpt-000001-00000005", Position(1, 5))
        except CommitRefused as err:
            results[tag] = err

    threads = [threading.Thread(target=race, args=(t, tmp_path / t)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [t for t, r in results.items() if r is True]
    lost = [r for r in results.values() if isinstance(r, CommitRefused)]
    assert len(won) == 1 and len(lost) == 1, results
    assert "another writer committed this step first" in str(lost[0])
    assert "\n" not in str(lost[0])
    # The winner's bytes are what the bucket holds: the loser's never replaced them.
    fresh = _store(tmp_path / "c", uri)
    ref = fresh.latest_valid()
    winner = tmp_path / won[0] / "ckpt-000001-00000005" / "state.pt"
    assert (ref.path / "state.pt").read_bytes() == winner.read_bytes()


def _truncate(uri: str, name: str, file: str) -> None:
    b = _bucket(uri)
    key = next(k for k in _keys(uri) if k.startswith(f"{name}/") and k.endswith(f"/{file}"))
    data = bytes(obstore.get(b.store, key).bytes())
    obstore.put(b.store, key, data[: len(data) // 2])


def test_a_checkpoint_truncated_in_the_bucket_is_moved_aside_and_the_previous_used(
    uri: str, tmp_path: Path
) -> None:
    store = _store(tmp_path / "a", uri)
    _save(store, Position(1, 0), seed=1)
    store.finish(30)
    _save(store, Position(2, 0), seed=2)
    store.finish(30)
    _truncate(uri, "ckpt-000002-00000000", "state.pt")
    warnings: list[str] = []
    fresh = _store(tmp_path / "b", uri, warnings=warnings)
    ref = fresh.latest_valid()
    assert ref is not None and ref.position == Position(1, 0)
    keys = _keys(uri)
    assert not any(k.startswith("ckpt-000002") for k in keys)
    moved = [k for k in keys if k.startswith("corrupt/ckpt-000002-00000000/")]
    assert len(moved) == 3  # manifest + both files: every byte kept
    assert any("state.pt has 500 bytes, expected 1000" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        (b"", "manifest.json is malformed (0 bytes, not a manifest)"),
        (b"{" * (2 << 20), f"manifest.json is malformed ({2 << 20} bytes, not a manifest)"),
        (b'{"epoch": 2, "step": 0, "files": {"../../x": {}}}', "is not the name of a file"),
    ],
)
def test_a_hostile_manifest_in_the_bucket_is_moved_aside_unread(
    uri: str, tmp_path: Path, manifest: bytes, said: str
) -> None:
    """Whoever can write the bucket can write any manifest: an empty, a huge (never read
    past the bound) or a path-escaping one is moved aside and the previous checkpoint used."""
    store = _store(tmp_path / "a", uri)
    _save(store, Position(1, 0), seed=1)
    store.finish(30)
    _save(store, Position(2, 0), seed=2)
    store.finish(30)
    obstore.put(_bucket(uri).store, "ckpt-000002-00000000/manifest.json", manifest)
    warnings: list[str] = []
    ref = _store(tmp_path / "b", uri, warnings=warnings).latest_valid()
    assert ref is not None and ref.position == Position(1, 0)
    assert any(said in w for w in warnings), warnings
    assert any(k.startswith("corrupt/ckpt-000002-00000000/") for k in _keys(uri))
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


def test_an_object_that_grew_under_its_manifest_is_not_downloaded_whole(
    uri: str, tmp_path: Path
) -> None:
    """The listing said 1000 bytes; by the download the object is 40 MiB: reading stops
    soon after the manifest's size and nothing is installed."""
    store = _store(tmp_path / "a", uri)
    _save(store, Position(1, 0), seed=1)
    store.finish(30)
    b = _bucket(uri)
    remote = b.list()[-1]
    key = next(k for k in _keys(uri) if k.endswith("/state.pt"))
    obstore.put(b.store, key, b"z" * (40 << 20))
    why = b.download(remote, tmp_path / "b")
    assert (
        why is not None
        and why.startswith("state.pt has ")
        and why.endswith("bytes, expected 1000 (changed under its manifest)")
    ), why
    assert int(why.split()[2]) < 20 << 20
    assert not (tmp_path / "b" / remote.name).exists()


def test_faults_in_the_bucket_each_give_one_line(uri: str, tmp_path: Path) -> None:
    store = _store(tmp_path / "a", uri)
    _save(store, Position(1, 0), seed=1)
    store.finish(30)
    b = _bucket(uri)
    # An object changed under its manifest (same size: only the ETag tells).
    key = next(k for k in _keys(uri) if k.endswith("/extra.bin"))
    obstore.put(b.store, key, b"y" * 10)
    remote = b.list()[-1]
    assert b.listing_problem(remote) == "extra.bin changed under its manifest (its ETag differs)"
    # A manifest that names a missing object.
    obstore.delete(b.store, key)
    remote = b.list()[-1]
    assert b.listing_problem(remote) == (
        "the manifest names extra.bin, which is missing from the bucket"
    )
    # With no earlier checkpoint to fall back on, resume stops with the reason (one line).
    fresh = _store(tmp_path / "b", uri)
    assert fresh.latest_valid() is None  # moved aside; nothing whole is left
    assert any(k.startswith("corrupt/ckpt-000001-00000000/") for k in _keys(uri))


def test_missing_bucket_is_one_line(s3_env: S3Server, tmp_path: Path) -> None:
    store = _store(tmp_path, "s3://no-such-bucket-kubegan/x")
    with pytest.raises(objstore.StoreError) as err:
        store.latest_valid()
    assert str(err.value) == (
        "list the bucket (s3://no-such-bucket-kubegan/x): the bucket does not exist (NoSuchBucket)"
    )


def test_unreachable_endpoint_is_retried_with_backoff_then_one_line(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = reserve_port()  # leased and free: nothing listens there
    monkeypatch.setenv(ENV_AWS_ENDPOINT_URL, f"http://127.0.0.1:{closed}")
    b = _bucket("s3://bucket-x/p")
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(objstore.StoreError) as err:
        objstore.call(
            "list",
            lambda: [m for x in obstore.list(b.store) for m in x],
            budget=3,
            warn=said.append,
        )
    assert time.monotonic() - started < 10
    assert len(said) >= 2 and all("transient error, retry" in s for s in said), said
    line = str(err.value)
    assert line.startswith("list: still failing after") and "\n" not in line, line


def test_wrong_credentials_are_one_line_and_never_logged(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto checks credentials once told to (INITIAL_NO_AUTH_ACTION_COUNT=0): a server of its own.
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
    strict = S3Server.start(tmp_path)
    try:
        for key, value in strict.env().items():
            monkeypatch.setenv(key, value)
        secret = "not-the-right-secret-0123456789"
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        store = _store(tmp_path / "a", "s3://some-bucket/p")
        with pytest.raises(objstore.StoreError) as err:
            store.latest_valid()
    finally:
        strict.stop()
    line = str(err.value)
    assert line.startswith("list the bucket (s3://some-bucket/p): "), line
    assert "credentials are not valid" in line or "no permission" in line, line
    assert secret not in line and "\n" not in line


def test_bad_uri_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(objstore.StoreError) as err:
        open_checkpoint_store(tmp_path, 3, environ={ENV_CHECKPOINT_URI: "ftp://x/y"})
    # In the words `kubegan validate` says it (kubegan_api.urls), never quoting the value.
    assert str(err.value) == (
        f"{ENV_CHECKPOINT_URI}: must be s3://bucket/prefix, gs://bucket/prefix or "
        "az://container/prefix"
    )
    with pytest.raises(objstore.StoreError, match="the bucket or container name must be"):
        open_checkpoint_store(tmp_path, 3, environ={ENV_CHECKPOINT_URI: "s3://A_B/y"})


def test_local_copy_kept_until_committed_and_lost_work_reported(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upload stalls (the endpoint goes away): keep 1 locally still keeps the older local
    copy (not committed), and finish says how much work the bucket lacks."""
    uri = f"s3://{s3_env.make_bucket()}/p"
    store = _store(tmp_path, uri, keep=1)
    _save(store, Position(1, 0), seed=1)
    assert store.finish(30).committed == Position(1, 0)
    store.bucket.store = objstore.open_store(
        objstore.parse_uri(uri, "t"), f"http://127.0.0.1:{reserve_port()}"
    )
    monkeypatch.setattr(objstore, "RETRY_SECONDS", 2.0)
    _save(store, Position(2, 0), seed=2)
    outcome = store.finish(0.5)
    assert outcome.committed == Position(1, 0) and outcome.lost_from == Position(2, 0)
    assert os.path.isdir(tmp_path / "ckpt-000002-00000000")


def test_the_jobs_spec_names_the_bucket_and_its_endpoint(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec.checkpoint.uri and .endpoint reach the store when the pod's variables are unset;
    the pod's own variables win."""
    from kubegan_api.sections import CheckpointSpec

    for key, value in s3.env().items():
        if key != ENV_AWS_ENDPOINT_URL:
            monkeypatch.setenv(key, value)
    monkeypatch.delenv(ENV_AWS_ENDPOINT_URL, raising=False)
    spec = CheckpointSpec(uri=f"s3://{s3.make_bucket()}/from-spec", endpoint=s3.endpoint)
    store = open_checkpoint_store(tmp_path / "a", 3, spec=spec, environ={})
    assert isinstance(store, BucketBackedStore) and str(store.bucket.uri).endswith("/from-spec")
    _save(store, Position(1, 0))
    assert store.finish(30).committed == Position(1, 0)
    other = f"s3://{s3.make_bucket()}/from-env"
    env = {ENV_CHECKPOINT_URI: other}
    assert str(open_checkpoint_store(tmp_path / "b", 3, spec=spec, environ=env).bucket.uri) == other


def test_only_the_errors_first_line_decides_transient() -> None:
    """The client's debug dump under the first line names `retry_timeout` and URLs full of
    digits: neither makes a permanent error look transient."""
    dump = (
        "Generic S3 error: Error performing PUT http://127.0.0.1:9/b/ckpt-000500-00000503/x "
        "in 2ms - Server returned non-2xx status code: 400 Bad Request\n"
        "Debug source: RetryError { retries: 0, retry_timeout: 1s }"
    )
    assert objstore.classify(RuntimeError(dump))[0] is False
    refused = "Generic S3 error: Error performing GET http://h/b - HTTP error: error sending"
    refused += " request"
    assert objstore.classify(RuntimeError(refused))[0] is True


@pytest.mark.parametrize(
    "answer",
    [
        "Server returned non-2xx status code: 507 Insufficient Storage: <Code>XMinioStorageFull",
        "Server returned non-2xx status code: 403 Forbidden: <Code>QuotaExceeded</Code>",
        "Server returned non-2xx status code: 507 Insufficient Storage: ",
    ],
)
def test_a_full_store_is_named_and_not_retried(answer: str) -> None:
    """S3-compatible stores with quotas (MinIO, Ceph) say they are full: that is for a person
    to fix, so it is said at once instead of being retried."""
    transient, reason = objstore.classify(RuntimeError(f"Generic S3 error: PUT x - {answer}"))
    assert transient is False and reason.startswith("the store is full"), reason
