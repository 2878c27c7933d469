"""The trainer's termination message: where the latest checkpoint stands, for the operator."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubegan_api.contract import (
    CONTAINER_NAME,
    ENV_TERMINATION_LOG,
    TERMINATION_MESSAGE_MAX,
    parse_termination_message,
)
from kubegan_operator.foundation.podstate import exit_checkpoint
from kubegan_trainer.storage import termination
from kubegan_trainer.storage.store import Position


def test_names_the_checkpoint_in_the_file_kubernetes_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "termination-log"
    path.write_text("stale words from an earlier container\n" * 50)
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(path))
    termination.write(Position(2, 3))
    assert parse_termination_message(path.read_text()) == (2, 3)
    assert len(path.read_bytes()) < TERMINATION_MESSAGE_MAX  # what the kubelet keeps
    # What the operator reads back once the kubelet has copied the file into the pod.
    terminated = {"exitCode": 0, "message": path.read_text(), "finishedAt": "t"}
    status = {"containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}]}
    pod = {"status": status}
    assert exit_checkpoint(pod) == (2, 3, "t")


def test_writes_nothing_without_the_file_or_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "termination-log"
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(path))
    termination.write(Position(1, 0))
    assert not path.exists()  # never creates it (a laptop has no /dev/termination-log)
    path.write_text("")
    termination.write(None)
    assert path.read_text() == ""
