"""Hardening: the pure pieces that read what a user or a broken disk left behind
(checkpoint manifests, metrics rows, owner markers) and the CLI's messages. Each input
below raised, hung or said something misleading before the fix."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.manifest import ManifestError, manifest_from, parse_manifest
from kubegan_trainer.storage.store import Position

from tests.unit.hostile import json_values

# ---- checkpoint manifests: the wrong shape is damage, never an exception --------------------

GOOD = {
    "epoch": 2,
    "step": 0,
    "created": 1.7e9,
    "files": {"state.pt": {"bytes": 3, "sha256": "ab" * 32}},
    "world_size": 1,
    "framework": "pytorch",
}

# (change to a good manifest, words in the reason)
WRONG_SHAPES: dict[str, tuple[Any, str]] = {
    "a list": ([GOOD], "expected a JSON object, got a list"),
    "a string": ("manifest", "expected a JSON object, got a string"),
    "null": (None, "expected a JSON object, got null"),
    "no epoch": ({"epoch": ...}, "epoch: missing"),
    "epoch a string": ({"epoch": "2"}, "epoch: expected a non-negative integer, got a string"),
    "epoch a bool": ({"step": False}, "step: expected a non-negative integer, got a boolean"),
    "epoch a float": ({"epoch": 2.0}, "epoch: expected a non-negative integer"),
    "negative step": ({"step": -1}, "step: expected a non-negative integer, got a negative"),
    "created a list": ({"created": [1]}, "created: expected a time in seconds, got a list"),
    "created NaN": ({"created": math.nan}, "created: expected a time in seconds"),
    "files a list": ({"files": ["state.pt"]}, "files: expected an object of file entries"),
    "files missing": ({"files": ...}, "files: missing"),
    "files empty": ({"files": {}}, "files: lists no files"),
    "entry a number": ({"files": {"state.pt": 3}}, "files.state.pt: expected an object"),
    "negative size": (
        {"files": {"state.pt": {"bytes": -3, "sha256": "ab" * 32}}},
        "files.state.pt.bytes: expected a non-negative integer, got a negative one",
    ),
    "size a string": (
        {"files": {"state.pt": {"bytes": "3", "sha256": "ab" * 32}}},
        "files.state.pt.bytes: expected a non-negative integer, got a string",
    ),
    "huge size": (
        {"files": {"state.pt": {"bytes": 1e400, "sha256": "ab" * 32}}},
        "files.state.pt.bytes: expected a non-negative integer",
    ),
    "nested sha": (
        {"files": {"state.pt": {"bytes": 3, "sha256": {"hex": "ab" * 32}}}},
        "files.state.pt.sha256: expected 64 hex digits",
    ),
    "no sha": ({"files": {"state.pt": {"bytes": 3}}}, "files.state.pt.sha256"),
    "path outside": (
        {"files": {"../../etc/passwd": {"bytes": 3, "sha256": "ab" * 32}}},
        "is not the name of a file in the checkpoint",
    ),
    "parent": ({"files": {"..": {"bytes": 3, "sha256": "ab" * 32}}}, "is not the name"),
    "itself": ({"files": {"manifest.json": {"bytes": 3, "sha256": "ab" * 32}}}, "not the name"),
}


def _shaped(change: Any) -> Any:
    if not isinstance(change, dict):
        return change
    out = copy.deepcopy(GOOD)
    for key, value in change.items():
        if value is ...:
            del out[key]
        else:
            out[key] = value
    return out


def test_a_good_manifest() -> None:
    m = manifest_from(GOOD)
    assert (m.epoch, m.step, m.created) == (2, 0, 1.7e9)
    assert m.files["state.pt"].size == 3 and m.extra == {"world_size": 1, "framework": "pytorch"}


@pytest.mark.parametrize("case", sorted(WRONG_SHAPES))
def test_manifest_of_the_wrong_shape_is_one_reason(case: str) -> None:
    change, words = WRONG_SHAPES[case]
    with pytest.raises(ManifestError) as err:
        parse_manifest(json.dumps(_shaped(change)).encode())
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"[" * 100_000, b'{"a": 1} x'])
def test_manifest_that_is_not_json(raw: bytes) -> None:
    with pytest.raises(ManifestError, match=r"^not JSON"):
        parse_manifest(raw)


@settings(max_examples=300, deadline=None)
@given(json_values(), json_values())
def test_any_json_is_a_manifest_or_one_reason(whole: Any, part: Any) -> None:
    """Whatever the value, at the top or in place of one field: ManifestError or a
    Manifest, never another exception."""
    for value in (whole, {**GOOD, "files": part}, {**GOOD, "files": {"state.pt": part}}):
        with contextlib.suppress(ManifestError):
            manifest_from(value)


def _committed(store: CheckpointStore, pos: Position, data: bytes = b"abc") -> Path:
    staging = store.begin(pos)
    (staging / "state.pt").write_bytes(data)
    return store.commit(staging, pos).path


@pytest.mark.parametrize("case", sorted(WRONG_SHAPES))
def test_a_checkpoint_with_a_manifest_of_the_wrong_shape_is_moved_aside(
    tmp_path: Path, case: str
) -> None:
    warnings: list[str] = []
    store = CheckpointStore(tmp_path, keep=3, warn=warnings.append)
    _committed(store, Position(1, 0))
    bad = _committed(store, Position(2, 0))
    (bad / "manifest.json").write_text(json.dumps(_shaped(WRONG_SHAPES[case][0])))
    assert store.latest_valid().position == Position(1, 0)
    assert warnings[0].startswith("checkpoint ckpt-000002-00000000 is unreadable (manifest.json")
    assert warnings[0].endswith("; falling back to ckpt-000001-00000000")
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert (tmp_path / "corrupt" / "ckpt-000002-00000000" / "manifest.json").is_file()
    assert not bad.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink-to-fifo", "huge"])
def test_a_manifest_or_listed_file_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """A FIFO would block the read (manifest) or the checksum (listed file)."""
    store = CheckpointStore(tmp_path, keep=3, warn=lambda _m: None)
    _committed(store, Position(1, 0))
    for target in ("manifest.json", "state.pt"):
        bad = _committed(store, Position(2, 0))
        path = bad / target
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "symlink-to-fifo":
            os.mkfifo(tmp_path / f"fifo-{target}")
            path.symlink_to(tmp_path / f"fifo-{target}")
        else:
            path.touch()
            os.truncate(path, 64 << 20)
        why = store.validate(store.list()[-1])
        assert why is not None and why.startswith(target), why
        assert store.latest_valid().position == Position(1, 0)


def test_only_checkpoint_malformed_is_refused_and_left_alone(tmp_path: Path) -> None:
    """As for any damaged checkpoint with no intact one before it (docs/trainer.md): one
    line naming it, nothing moved; the user decides whether to start from scratch."""
    store = CheckpointStore(tmp_path, keep=3, warn=lambda _m: None)
    bad = _committed(store, Position(1, 0))
    (bad / "manifest.json").write_text("[]")
    with pytest.raises(TrainerError, match=r"manifest.json is malformed \(expected a JSON object"):
        store.latest_valid()
    assert bad.is_dir() and not (tmp_path / "corrupt").exists()


# ---- metrics.jsonl rows of any shape: the summary leaves them out and says so once ----------

ROW = {
    "epoch": 1,
    "epoch_seconds": 2.5,
    "samples_per_second": 100.0,
    "g_loss": 0.7,
    "d_loss": 1.3,
    "cost_dollars": 0.001,
    "steps": 4,
    "samples": 256,
    "world_size": 1,
    "quality": {"class_accuracy": 0.5},
}

MALFORMED_ROWS: dict[str, object] = {
    "no epoch_seconds": {k: v for k, v in ROW.items() if k != "epoch_seconds"},
    "only epoch": {"epoch": 3},
    "epoch a string": {**ROW, "epoch": "3"},
    "epoch a bool": {**ROW, "epoch": True},
    "epoch zero": {**ROW, "epoch": 0},
    "seconds NaN": {**ROW, "epoch_seconds": math.nan},
    "seconds negative": {**ROW, "epoch_seconds": -1.0},
    "cost infinite": {**ROW, "cost_dollars": math.inf},
    "huge integer": {**ROW, "samples_per_second": 10**400},
    "huge loss": {**ROW, "g_loss": 1e300},
    "loss a list": {**ROW, "d_loss": [1.0]},
    "a list": [ROW],
    "a string": "epoch 1",
    "null": None,
}


def test_a_good_row_and_extra_keys_pass_unchanged() -> None:
    from kubegan_trainer.worker.worker_metrics import usable_row

    row = {**ROW, "from_a_newer_kubegan": {"x": [1]}}
    assert usable_row(row) == (row, False)
    nan_loss = {**ROW, "g_loss": math.nan}  # a diverged GAN's loss is data, not damage
    assert usable_row(nan_loss)[0] is not None


@pytest.mark.parametrize("case", sorted(MALFORMED_ROWS))
def test_malformed_rows_are_skipped_with_one_note(case: str) -> None:
    from kubegan_trainer.launch.summary import summary_table

    rows = [ROW, MALFORMED_ROWS[case], MALFORMED_ROWS[case], {**ROW, "epoch": 2}]
    text = summary_table(rows, unreadable_lines=1)
    lines = text.splitlines()
    assert lines[-1] == "metrics.jsonl: skipped 3 malformed rows"
    assert [ln.split()[0] for ln in lines[2:-1]] == ["1", "2", "total"]
    assert sum("metrics.jsonl" in ln for ln in lines) == 1


def test_unusable_quality_values_are_dropped_and_counted() -> None:
    from kubegan_trainer.launch.summary import summary_table

    rows = [
        {**ROW, "quality": {"class_accuracy": "high", "feature_distance": 2.0}},
        {**ROW, "epoch": 2, "quality": [0.5]},
        {**ROW, "epoch": 3, "quality": {"x" * 500: 1.0}},
    ]
    text = summary_table(rows)
    assert text.splitlines()[-1] == ("metrics.jsonl: dropped unusable quality values from 3 rows")
    assert "feature_distance" in text.splitlines()[0] and "x" * 65 not in text


def test_a_table_without_notes_for_good_rows() -> None:
    from kubegan_trainer.launch.summary import summary_table

    assert "metrics.jsonl" not in summary_table([ROW, {**ROW, "epoch": 2}])
    assert summary_table([]).splitlines()[0].split()[0] == "epoch"


@settings(max_examples=300, deadline=None)
@given(json_values(), json_values())
def test_summary_of_any_rows_never_raises(value: Any, field: Any) -> None:
    from kubegan_trainer.launch.summary import summary_table

    rows = [value, {**ROW, "epoch_seconds": field}, {**ROW, "quality": field}, ROW]
    text = summary_table(rows if isinstance(value, list) else [*rows, value])
    assert text.splitlines()[0].startswith("epoch")


def test_metrics_file_lines_of_every_kind_are_read_or_counted(tmp_path: Path) -> None:
    from kubegan_trainer.worker.worker_metrics import MetricsLog

    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.path.write_text(
        "\n".join(
            [
                json.dumps(ROW),
                "[" * 100_000,  # nested too deeply: RecursionError in json
                '{"epoch": 2, "epoch_sec',  # torn
                "[1, 2]",
                json.dumps({"epoch": 1e400}),  # inf epoch: int() raised OverflowError
                "",
                json.dumps({**ROW, "epoch": 2}),
            ]
        )
        + "\n"
    )
    rows, other = log.read_rows()
    assert len(rows) == 3 and other == 3
    usable = log.usable()
    assert [r["epoch"] for r in usable.rows] == [1, 2] and usable.skipped == 4


def test_resume_keeps_malformed_rows_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kubegan_trainer.worker.worker_metrics import MetricsLog

    log = MetricsLog(tmp_path / "metrics.jsonl")
    odd = [{"epoch": 1e400}, {"epoch": 1}, {k: v for k, v in ROW.items() if k != "d_loss"}]
    lines = [json.dumps(ROW), *map(json.dumps, odd), json.dumps({**ROW, "epoch": 5})]
    log.path.write_text("\n".join(lines) + "\n")
    with caplog.at_level("WARNING"):
        log.truncate_after(1)
    kept = [json.loads(x) for x in log.path.read_text().splitlines()]
    assert kept == [ROW, {"epoch": math.inf}, *odd[1:]]  # epoch 5 is re-trained
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning == "metrics.jsonl: 3 malformed rows left as written (summaries skip them)"


@pytest.mark.timeout(10)
def test_a_metrics_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    from kubegan_trainer.worker.worker_metrics import MetricsLog

    os.mkfifo(tmp_path / "metrics.jsonl")
    with pytest.raises(TrainerError, match="is a FIFO, not a regular file"):
        MetricsLog(tmp_path / "metrics.jsonl").read_rows()


@pytest.mark.parametrize(
    "progress",
    [
        {"state": "running"},
        {"state": "running", "epoch": "1", "epochs": 2, "steps": 3},
        {"state": "running", "epoch": 1, "epochs": 2, "steps": 0},
        {"state": "running", "epoch": 1, "epochs": 2, "step": -1, "steps": 3},
        {"state": "running", "epoch": 1, "epochs": 10**400, "steps": 3},
        {"state": ["running"]},
    ],
)
def test_a_progress_file_of_the_wrong_shape_shows_no_bar(progress: dict[str, Any]) -> None:
    from kubegan_trainer.launch.summary import progress_bar_for

    assert progress_bar_for(progress) is None
    good = {"state": "running", "epoch": 1, "epochs": 2, "step": 1, "steps": 4}
    assert progress_bar_for(good) == "epoch 1/2 [" + "#" * 8 + "." * 22 + "] 1/4 steps"


@pytest.mark.parametrize("text", ["[]", '"x"', "[" * 100_000, "{"])
def test_read_progress_of_a_foreign_file_is_empty(tmp_path: Path, text: str) -> None:
    from kubegan_trainer.worker.progress_file import read_progress

    (tmp_path / "progress.json").write_text(text)
    assert read_progress(tmp_path) == {}


# ---- messages the user can act on ------------------------------------------------------------

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "digits-local.yaml")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["validate", ""], "kubegan validate: argument JOB.yaml: the path is empty"),
        (["plan", "--nodes", "", EXAMPLE], "kubegan plan: argument --nodes: the path is empty"),
        (["plan", "--nodes", EXAMPLE, ""], "kubegan plan: argument JOB.yaml: the path is empty"),
        (["render", EXAMPLE, "--pods", ""], "kubegan render: argument --pods: the path is empty"),
        (
            ["render", EXAMPLE, "--prices", ""],
            "kubegan render: argument --prices: the path is empty",
        ),
        (["run", ""], "kubegan run: argument JOB.yaml: the path is empty"),
        (["run", EXAMPLE, "--output", ""], "kubegan run: argument --output: the path is empty"),
        (["operator", "--prices", ""], "kubegan operator: argument --prices: the path is empty"),
        (
            ["operator", "--namespace", ""],
            "kubegan operator: argument --namespace: the name is empty",
        ),
    ],
)
def test_an_empty_argument_is_named(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kubegan validate ""` said `.: is a directory`: Path("") is the current directory."""
    from kubegan_operator.entry.cli import main

    with pytest.raises(SystemExit) as code:
        main(args)
    assert code.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


def _operator(tmp_path: Path, kubeconfig: str | None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    return subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "operator"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _kubeconfig(tmp_path: Path, kind: str) -> str | None:
    path = tmp_path / "kubeconfig"
    if kind in ("unset", "empty"):
        return None if kind == "unset" else ""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind != "missing":
        path.write_text(
            {"garbage": "clusters: [\n", "a list": "- 1\n", "no context": "a: 1\n"}[kind]
        )
    return str(path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("unset", "no kubeconfig: {home}/.kube/config: no such file, and not running in a cluster"),
        ("empty", "no kubeconfig: {home}/.kube/config: no such file"),
        ("missing", "no kubeconfig: KUBECONFIG names {path}: no such file, and not running in"),
        ("garbage", "kubeconfig {path}: invalid YAML at line 2"),
        ("a list", "kubeconfig {path}: not a kubeconfig (expected a mapping"),
        ("no context", "kubeconfig {path}: Invalid kube-config file. Expected key current-context"),
        ("fifo", "kubeconfig {path}: not a regular file"),
        ("directory", "kubeconfig {path}: not a regular file"),
    ],
)
def test_operator_without_a_usable_kubeconfig_is_one_line(
    tmp_path: Path, kind: str, words: str
) -> None:
    """It printed the client's "... Using inCluster Config. This might not work." on
    stdout, then `kubeconfig: Service host/port is not set.`"""
    result = _operator(tmp_path, _kubeconfig(tmp_path, kind))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    expected = words.format(home=tmp_path, path=tmp_path / "kubeconfig")
    assert line.startswith(f"kubegan operator: {expected}"), line
    assert "might not work" not in line and "Traceback" not in line
