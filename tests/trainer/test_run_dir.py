"""Lost or damaged work in `kubegan run`: a run directory has one owner, a
foreign directory is never written, a changed job is not resumed silently, a silent
worker crash is explained, and no worker outlives its launcher."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubegan_api.contract import ENV_CPU_THREADS, ENV_OUTPUT_DIR
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.launch.local_run import run_local
from kubegan_trainer.launch.resume_config import HISTORY_FILE, record_config
from kubegan_trainer.launch.rundir import claim_run_dir
from kubegan_trainer.worker.progress_file import read_progress

from tests.trainer.util import REPO, config, tiny_digits
from tests.trainer.workers import start_kubegan_run

METRICS_PORT = 19671
JOB = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "owner-test"},
    "spec": {
        "framework": "pytorch",
        "model": {
            "name": "acgan",
            "options": {"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16},
        },
        "data": {"source": "digits"},
        "training": {"epochs": 1000, "batchSizePerReplica": 16, "stepsPerEpoch": 20},
        "resources": {"workers": 1, "gpusPerWorker": 0},
        "monitoring": {"metricsPort": METRICS_PORT},
    },
}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_foreign_non_empty_directory_is_refused_and_untouched(tmp_path: Path) -> None:
    mine = tmp_path / "thesis"
    (mine / "logs").mkdir(parents=True)
    (mine / "chapter1.tex").write_text("precious")
    (mine / "logs" / "notes.txt").write_text("also precious")
    before = _files(mine)
    with pytest.raises(TrainerError, match="not empty and not a kubegan run directory"):
        run_local(tiny_digits(), output_dir=mine, out=io.StringIO())
    assert _files(mine) == before and sorted(p.name for p in mine.iterdir()) == [
        "chapter1.tex",
        "logs",
    ]


def test_a_held_run_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    lock = claim_run_dir(tmp_path / "run")
    try:
        with pytest.raises(
            TrainerError, match=rf"in use by another kubegan run \(pid {os.getpid()} "
        ):
            run_local(tiny_digits(), output_dir=tmp_path / "run", out=io.StringIO())
    finally:
        lock.release()


def _seed_run(out: Path, seed: int = 7) -> None:
    """A run directory whose checkpoints were trained with `seed`."""
    (out / "checkpoints" / "ckpt-000001-00000000").mkdir(parents=True)
    (out / ".kubegan-run").write_text("")
    (out / "config.json").write_text(json.dumps(tiny_digits(seed=seed).to_api()))


def test_resume_with_a_changed_job_is_refused_naming_the_fields(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _seed_run(out)
    before = (out / "config.json").read_text()
    changed = tiny_digits(seed=8, batchSizePerReplica=4, epochs=5)  # epochs may change
    with pytest.raises(TrainerError) as err:
        run_local(changed, output_dir=out, out=io.StringIO())
    msg = str(err.value)
    assert (
        "spec.training.seed (7 -> 8)" in msg and "spec.training.batchSizePerReplica (8 -> 4)" in msg
    )
    assert "epochs" not in msg and "--allow-config-change" in msg
    assert (out / "config.json").read_text() == before  # config.json never lies


def test_fields_added_since_the_checkpoints_were_trained_are_no_change(tmp_path: Path) -> None:
    """A config.json written before spec.data.uri, endpoint and credentialsSecret existed:
    resuming after the upgrade was refused for "unset -> ''"."""
    out = tmp_path / "run"
    _seed_run(out)
    older = json.loads((out / "config.json").read_text())
    for key in ("uri", "endpoint", "credentialsSecret"):
        older["data"].pop(key)
    (out / "config.json").write_text(json.dumps(older))
    assert record_config(out, tiny_digits().to_api(), allow_change=False) == []
    assert record_config(out, tiny_digits(seed=8).to_api(), allow_change=True) == [
        "spec.training.seed (7 -> 8)"
    ]


def test_allowed_config_change_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _seed_run(out)
    changed = tiny_digits(seed=8).to_api()
    assert record_config(out, changed, allow_change=True) == ["spec.training.seed (7 -> 8)"]
    assert json.loads((out / "config.json").read_text()) == changed
    (entry,) = [json.loads(ln) for ln in (out / HISTORY_FILE).read_text().splitlines()]
    assert entry["changed"] == ["spec.training.seed (7 -> 8)"]
    assert entry["previous"]["training"]["seed"] == 7


def test_kubegan_run_refuses_a_changed_job_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kubegan_operator.entry.cli import main

    out = tmp_path / "run"
    _seed_run(out, seed=1)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB))
    assert main(["run", str(job), "--output", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kubegan run: ") and "spec.training.seed (1 -> " in line


@pytest.mark.timeout(120)
def test_silent_worker_crash_prints_the_last_lines_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies with no `kubegan-trainer: error:` line (here: os._exit in the
    model factory) used to leave `kubegan run` exiting 1 with nothing printed."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    buf = io.StringIO()
    cfg = config("custom", entrypoint="tests.trainer.hostile_entrypoints:crash_silently")
    code = run_local(cfg, output_dir=tmp_path / "run", out=buf)
    text = buf.getvalue()
    assert code == 3, text
    assert "worker 0 exited with code 3" in text and "kaboom: the factory's last words" in text


def _workers_of(out: Path) -> list[int]:
    """Our processes that are workers of the run in `out` (by their environment)."""
    needle = f"{ENV_OUTPUT_DIR}={out}\0".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _listening_addresses(port: int) -> set[str]:
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, _, state = line.split()[1:4]
        addr, hexport = local.split(":")
        if int(hexport, 16) == port and state == "0A":  # LISTEN
            found.add(".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def _launch(job: Path, out: Path) -> subprocess.Popen[str]:
    return start_kubegan_run(job, out, {"PYTHONPATH": str(REPO), ENV_CPU_THREADS: "1"})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGHUP"])
def test_no_worker_outlives_its_launcher(how: str, tmp_path: Path) -> None:
    """While training: metrics listen on loopback only, a second run on the directory is
    refused naming the holder. Then the launcher is killed (or its terminal hangs up):
    no worker keeps training."""
    job, out = tmp_path / "job.yaml", tmp_path / "out"
    job.write_text(yaml.safe_dump(JOB))
    launcher = _launch(job, out)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and read_progress(out).get("step", 0) < 1:
            assert launcher.poll() is None, launcher.communicate()[0]
            time.sleep(0.1)
        assert read_progress(out).get("state") == "running"
        (worker,) = _workers_of(out)
        assert _listening_addresses(METRICS_PORT) == {"127.0.0.1"}

        second = _launch(job, out)
        text, _ = second.communicate(timeout=60)
        assert second.returncode == 2, text
        (line,) = text.strip().splitlines()
        assert f"in use by another kubegan run (pid {launcher.pid} " in line, line

        launcher.send_signal(getattr(signal, how))
        launcher.wait(timeout=60)
        deadline = time.monotonic() + 30
        while _workers_of(out) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _workers_of(out), f"worker {worker} outlived its launcher ({how})"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in _workers_of(out):
            os.kill(pid, signal.SIGKILL)
