"""The trainer's termination message: where the latest checkpoint stands, for the operator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubegan_trainer import termination
from kubegan_trainer.checkpoint import Position


def test_names_the_checkpoint_in_the_file_kubernetes_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "termination-log"
    path.write_text("stale words from an earlier container\n" * 50)
    monkeypatch.setenv(termination.PATH_ENV, str(path))
    termination.write(Position(2, 3))
    message = json.loads(path.read_text())
    assert message["checkpoint"]["epoch"] == 2 and message["checkpoint"]["step"] == 3
    assert len(path.read_bytes()) < 4096  # what the kubelet keeps


def test_writes_nothing_without_the_file_or_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "termination-log"
    monkeypatch.setenv(termination.PATH_ENV, str(path))
    termination.write(Position(1, 0))
    assert not path.exists()  # never creates it (a laptop has no /dev/termination-log)
    path.write_text("")
    termination.write(None)
    assert path.read_text() == ""
