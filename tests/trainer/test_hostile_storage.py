"""The trainer against data and stores that misbehave: a bucket endpoint that accepts
connections and never answers (bounded: `kubegan run` speaks within a minute and ends with
one line), a data folder whose entries vanish while it is walked (they are simply gone), and
library errors about in-memory data (never an object's repr)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubegan_api.contract import ENV_STORE_TIMEOUT_SECONDS
from kubegan_trainer.base.errors import TrainerError, error_text
from kubegan_trainer.base.walk import walk_entries
from kubegan_trainer.data.files import decode_image, load_image_folder
from kubegan_trainer.launch.ports import reserve_port
from kubegan_trainer.storage import objstore

from tests.trainer.util import REPO
from tests.trainer.workers import start_kubegan_run

# ---- a store that accepts and never answers --------------------------------------------------


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that accepts every connection and never answers."""
    server = socket.create_server(("127.0.0.1", reserve_port()))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


# Credentials of no store: they keep the S3 client from asking a metadata server for some.
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.mark.parametrize("budget", ["2", "4"])
def test_a_silent_store_is_given_up_within_the_budget(
    silent_endpoint: str, budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore

    for key, value in {**FAKE_AWS, ENV_STORE_TIMEOUT_SECONDS: budget}.items():
        monkeypatch.setenv(key, value)
    uri = objstore.parse_uri("s3://bucket/runs", "spec.checkpoint.uri")
    store = objstore.open_store(uri, silent_endpoint, "spec.checkpoint.endpoint")
    said: list[tuple[float, str]] = []
    start = time.monotonic()
    with pytest.raises(objstore.StoreError) as err:
        objstore.call(
            "list the bucket",
            lambda: [m for batch in obstore.list(store) for m in batch],
            warn=lambda line: said.append((time.monotonic() - start, line)),
        )
    took = time.monotonic() - start
    assert said and said[0][0] < float(budget), said  # the first retry is said at once
    assert took < float(budget) * 2 + 2, took
    assert str(err.value).startswith("list the bucket: still failing after"), err.value


@pytest.mark.timeout(300)
def test_kubegan_run_on_a_silent_store_speaks_within_a_minute_and_ends_in_one_line(
    silent_endpoint: str, tmp_path: Path
) -> None:
    job = yaml.safe_load((REPO / "examples" / "digits-local.yaml").read_text())
    job["spec"]["resources"] = {"workers": 1, "gpusPerWorker": 0}
    job["spec"]["checkpoint"] = {"uri": "s3://bucket/runs", "endpoint": silent_endpoint}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    env = {"PYTHONPATH": str(REPO), ENV_STORE_TIMEOUT_SECONDS: "3", **FAKE_AWS}
    start = time.monotonic()
    proc = start_kubegan_run(path, tmp_path / "out", env)
    assert proc.stdout is not None
    lines: list[tuple[float, str]] = []
    for line in proc.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
    code = proc.wait(timeout=60)
    text = "\n".join(line for _, line in lines)
    # Past its own header, the run says what the store does (a retry) within a minute...
    store = [t for t, line in lines if "s3://bucket/runs" in line]
    assert store and store[0] < 60, text
    # ...and ends, non-zero, with one line saying why.
    assert code != 0 and "Traceback" not in text, text
    assert lines[-1][1].startswith("kubegan-trainer: error: "), text
    assert "still failing after" in lines[-1][1], text
    assert sum("kubegan-trainer: error" in line for _, line in lines) == 1, text


# ---- entries that vanish while a folder is walked ------------------------------------------


def test_walking_a_busy_proc_never_fails() -> None:
    """/proc's entries come and go with processes: a walk of it must not raise."""
    busy = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(50)]
    for t in busy:
        t.start()
    entries = sum(1 for _ in walk_entries(Path("/proc")))
    for t in busy:
        t.join()
    assert entries > 100


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ESRCH, errno.ENOENT])
def test_a_folder_whose_listing_fails_as_a_process_exits_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """What reading /proc/<pid>/net answers while <pid> exits (EINVAL), deterministically:
    the busy walk above meets it only when a process exits at that moment."""
    _tree(tmp_path, 2, 1)
    dying, scandir = tmp_path / "class-0", os.scandir

    def listing(path):  # type: ignore[no-untyped-def]
        if Path(path) == dying:
            raise OSError(code, os.strerror(code), str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", listing)
    names = sorted(str(p.relative_to(tmp_path)) for p in walk_entries(tmp_path))
    assert names == ["class-0", "class-1", "class-1/deep", "class-1/deep/img-0.png"]


def test_a_folder_that_fails_to_list_for_another_reason_fails_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk error is not a vanished entry: training on part of the data would hide it."""
    _tree(tmp_path, 1, 1)
    scandir = os.scandir

    def listing(path):  # type: ignore[no-untyped-def]
        if Path(path) != tmp_path:
            raise OSError(errno.EIO, "Input/output error", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", listing)
    with pytest.raises(OSError) as err:
        list(walk_entries(tmp_path))
    assert err.value.errno == errno.EIO


def test_an_image_folder_of_proc_is_one_line_not_a_crash() -> None:
    with pytest.raises(TrainerError) as err:
        load_image_folder(Path("/proc"), 8)
    assert str(err.value).startswith("spec.data.path: no images ("), err.value


def _tree(root: Path, folders: int, files: int) -> None:
    for i in range(folders):
        sub = root / f"class-{i}" / "deep"
        sub.mkdir(parents=True)
        for j in range(files):
            (sub / f"img-{j}.png").write_bytes(b"")


def test_a_folder_deleted_before_it_is_listed_is_simply_gone(tmp_path: Path) -> None:
    _tree(tmp_path, 3, 2)
    walk = walk_entries(tmp_path)
    first = next(walk)  # the root is listed; its sub-folders are not yet
    for sub in tmp_path.iterdir():
        if sub != first:
            shutil.rmtree(sub)
    rest = list(walk)  # the root's own entries were listed already; nothing below them is
    assert all(p.parent == tmp_path or first in p.parents for p in rest), rest


@pytest.mark.parametrize("round_", range(3))
def test_a_folder_another_process_deletes_from_is_walked_to_the_end(
    tmp_path: Path, round_: int
) -> None:
    _tree(tmp_path, 40, 25)
    stop = threading.Event()

    def delete() -> None:
        for sub in sorted(tmp_path.iterdir(), reverse=bool(round_ % 2)):
            if stop.is_set():
                return
            shutil.rmtree(sub, ignore_errors=True)

    deleter = threading.Thread(target=delete)
    deleter.start()
    try:
        seen = list(walk_entries(tmp_path))
    finally:
        stop.set()
        deleter.join()
    assert all(tmp_path in p.parents for p in seen)


def test_a_symlinked_folder_is_not_followed(tmp_path: Path) -> None:
    _tree(tmp_path, 1, 1)
    (tmp_path / "link").symlink_to(tmp_path)  # never followed: no loop
    names = {p.name for p in walk_entries(tmp_path)}
    assert names == {"class-0", "deep", "img-0.png", "link"}


# ---- library errors about in-memory data ---------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b"junk", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, b"GIF89a"])
@pytest.mark.parametrize("name", ["cat.png", "s3 object a/b.jpg"])
def test_an_unreadable_image_names_what_the_user_knows(raw: bytes, name: str) -> None:
    with pytest.raises(TrainerError) as err:
        decode_image(raw, name, "spec.data.uri")
    line = str(err.value)
    assert line.startswith(f"spec.data.uri: {name} is not a readable image ("), line
    assert " object at 0x" not in line and "<_io" not in line, line


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (
            "cannot identify image file <_io.BytesIO object at 0x7f2a1b3c4d50>",
            "cannot identify image file kept.h5",
        ),
        ("bad <h5py._hl.files.File object at 0xDEADBEEF> header", "bad kept.h5 header"),
        ("first line\nsecond <x.Y object at 0x1>", "first line"),
        ("", "OSError"),
    ],
)
def test_error_text_replaces_object_reprs(message: str, said: str) -> None:
    assert error_text(OSError(message), "kept.h5") == said
