"""bench/gpu_check.py, the one command a lent GPU machine runs, run here on CPU at tiny sizes:
every row it plans is in its table and its JSON, and every one is measured ("ok"), so the
script cannot break unseen between the rare GPU runs. Also its bootstrap pieces: wheels
installed into a temporary folder, the stubs for packages a step never calls."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.trainer import test_quality_validity

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"
MODELS = ("dcgan", "acgan", "pix2pix", "gan3d")


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(660)
def test_gpu_check_on_cpu_writes_every_row_measured(tmp_path: Path) -> None:
    # ~40 s on 2 quiet cores, 3 min at a load average of 8; the deadline stays well clear.
    cmd = [sys.executable, str(SCRIPT), "--tiny", "--cpu", "--deadline", "540"]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    first = proc.stdout.splitlines()[0]
    for found in ("gpu-check: ", "driver ", "CUDA ", "torch ", "python ", "numpy "):
        assert found in first, first

    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = doc["rows"]
    failed = [r for r in rows if not r["result"].startswith("ok")]
    assert not failed, failed
    eager = [r for r in rows if r["check"] == "throughput" and r["compile"] == "no"]
    assert sorted((r["key_model"], r["precision"], r["layout"]) for r in eager) == sorted(
        (m, p, layout)
        for m in MODELS
        for p in ("fp32", "bf16", "fp16")
        for layout in ("contiguous", "channels_last")
    )
    assert all(r["samples_s"] > 0 for r in eager)
    plain = [r for r in eager if r.get("overhead") is not None]
    assert {(r["key_model"], r["precision"]) for r in plain} == {
        (m, p) for m in MODELS for p in ("fp32", "bf16")
    }
    compiled = [r for r in rows if r["check"] == "throughput" and r["compile"] == "yes"]
    assert len(compiled) == 1 and compiled[0]["samples_s"] > 0
    ddp = [r for r in rows if r["check"] == "ddp"]
    assert [r["layout"] for r in ddp] == ["DDP world 1", "DDP world 2"]
    assert all(r["samples_s"] > 0 for r in ddp)
    physics = {r["precision"]: r for r in rows if r["check"] == "physics"}
    assert set(physics) == {"fp32", "bf16", "agree"}
    for precision in ("fp32", "bf16"):
        assert set(physics[precision]["scores"][-1]) == {
            "sampling_fraction_error",
            *test_quality_validity.SHAPE_ABSOLUTE,
        }

    # The table: one line per row, in the file and at the end of stdout (a device run sends
    # back only the last 12,000 characters of its output).
    table = (tmp_path / "gpu_check.md").read_text()
    body = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert len(body) == len(rows)
    assert table.splitlines()[0] == first
    tail = proc.stdout[-12_000:]
    assert all(line in tail for line in body)


def test_tolerances_are_the_validity_tests() -> None:
    gpu_check = _gpu_check()
    assert gpu_check.SF_RELATIVE == test_quality_validity.SF_RELATIVE
    assert gpu_check.SHAPE_ABSOLUTE == test_quality_validity.SHAPE_ABSOLUTE
    job = gpu_check.PHYSICS_JOB
    assert job["batch"] == test_quality_validity.GLOBAL_BATCH
    assert job["epochs"] == test_quality_validity.EPOCHS


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure wheel of one module `name` that says hello."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "HELLO = 'from the wheelhouse'\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return path


def test_missing_package_installed_from_wheelhouse_into_a_temp_folder(tmp_path: Path) -> None:
    """pip --target where the interpreter has pip, the wheels unzipped where it has none;
    either way into a new folder, nothing into the interpreter's own site-packages."""
    gpu_check = _gpu_check()
    _wheel(tmp_path, "gpucheckdemo")
    log: list[str] = []
    target = gpu_check._install(["gpucheckdemo"], tmp_path, log)
    assert (target / "gpucheckdemo" / "__init__.py").is_file(), log
    code = (
        f"import sys; sys.path.insert(0, {str(target)!r}); import gpucheckdemo as m; print(m.HELLO)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "from the wheelhouse"
    assert importlib.util.find_spec("gpucheckdemo") is None


def test_wheel_tags_and_stubs() -> None:
    gpu_check = _gpu_check()
    me = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert gpu_check._wheel_fits("annotated_types-0.8.0-py3-none-any.whl")
    assert gpu_check._wheel_fits(f"pydantic_core-2.50.5-{me}-{me}-manylinux2014_x86_64.whl") == (
        sys.platform.startswith("linux") and gpu_check.platform.machine() == "x86_64"
    )
    assert not gpu_check._wheel_fits("pydantic_core-2.50.5-cp39-cp39-manylinux2014_x86_64.whl")
    # A stubbed package imports, its names work in `except` clauses, and using it says why.
    pil = gpu_check._stub("PIL")
    image = pil.Image
    try:
        raise ValueError("not a PIL error")
    except (image.DecompressionBombError, OSError):
        raise AssertionError("the stub caught an unrelated error") from None
    except ValueError:
        pass
    with pytest.raises(ImportError, match="PIL is not installed"):
        image.open("x.png")
