"""`kubegan samples`, `metrics` and `export` on a run folder (what `kubegan run` writes), and
their refusals: one line, exit 2, never a traceback. The cluster and bucket paths:
tests/cluster/test_artifacts_cli.py and tests/trainer/test_artifacts_bucket.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubegan_operator.entry.cli import main


def _run_folder(root: Path) -> Path:
    (root / "samples").mkdir(parents=True)
    for epoch in (1, 2, 10):
        (root / "samples" / f"epoch-{epoch:04d}.png").write_bytes(f"grid {epoch}".encode())
    rows = [
        {"epoch": e, "epoch_seconds": 1.0, "samples_per_second": 9.0, "g_loss": 0.7,
         "d_loss": 1.4, "cost_dollars": 0.0, "quality": {"feature_distance": 5.0}}
        for e in (1, 2)
    ]  # fmt: skip
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"epoch": 3, "torn'
    (root / "metrics.jsonl").write_text(text)
    (root / "export" / "saved_model" / "variables").mkdir(parents=True)
    (root / "export" / "generator.json").write_text("{}")
    (root / "export" / "saved_model" / "variables" / "v.index").write_bytes(b"i")
    return root


def test_samples_takes_the_newest_grid_or_the_epoch_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path / "run")
    assert main(["samples", str(run), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "epoch-0010.png").read_bytes() == b"grid 10"
    assert main(["samples", str(run), "-o", str(tmp_path / "out"), "--epoch", "2"]) == 0
    assert (tmp_path / "out" / "epoch-0002.png").read_bytes() == b"grid 2"
    assert capsys.readouterr().out.splitlines() == [
        str(tmp_path / "out" / "epoch-0010.png"),
        str(tmp_path / "out" / "epoch-0002.png"),
    ]


def test_metrics_prints_the_epoch_table_and_notes_a_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["metrics", str(_run_folder(tmp_path / "run"))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "feature_distance" in lines[0]
    assert [ln.split()[0] for ln in lines[2:5]] == ["1", "2", "total"]
    assert lines[-1] == "metrics.jsonl: skipped 1 malformed row"


def test_export_copies_the_whole_export_tree(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run")
    assert main(["export", str(run), "-o", str(tmp_path / "gen")]) == 0
    assert (tmp_path / "gen" / "generator.json").read_text() == "{}"
    assert (tmp_path / "gen" / "saved_model" / "variables" / "v.index").read_bytes() == b"i"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["samples", "{run}", "--epoch", "7"], "no grid of epoch 7 (epochs 1-10)"),
        (["samples", "{empty}"], "no sample grid stored yet"),
        (["metrics", "{empty}"], "no metrics.jsonl stored yet"),
        (["export", "{empty}"], "config.json: missing; not a kubegan run folder"),
        (["metrics", "{run}/nothing/here"], "not a run directory"),
        (["samples", "{run}", "--epoch", "0"], "not an epoch number"),
        (["samples", "{run}", "--epoch", "x"], "not an epoch number"),
        (["metrics", ""], "the path is empty"),
    ],
)
def test_refusals_are_one_line(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    args = [a.format(run=run, empty=tmp_path / "empty") for a in argv]
    assert _exit_code(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def _exit_code(argv: list[str]) -> int:
    """main's code, or argparse's (a usage error exits from inside parse_args)."""
    try:
        return main(argv)
    except SystemExit as done:
        return int(done.code or 0)


def test_a_symlinked_grid_is_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (tmp_path / "secret").write_text("not a grid")
    (run / "samples" / "epoch-0001.png").symlink_to(tmp_path / "secret")
    assert main(["samples", str(run), "-o", str(tmp_path / "out")]) == 2
    assert "no sample grid stored yet" in capsys.readouterr().err
