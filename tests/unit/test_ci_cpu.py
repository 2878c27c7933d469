"""bench/ci_cpu.py gives each accounted process to the step whose make it descends from, and
tells the training containers from the other daemons left to init."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ci_cpu", ROOT / "bench" / "ci_cpu.py")
assert _spec and _spec.loader
ci_cpu = importlib.util.module_from_spec(_spec)
sys.modules["ci_cpu"] = ci_cpu  # its dataclass looks its module up there
_spec.loader.exec_module(ci_cpu)

T0 = datetime(2026, 11, 27, 18, 0, 0).timestamp()


def proc(comm: str, pid: int, ppid: int, start: float = 0, elapsed: float = 100, cpu: float = 1):
    return ci_cpu.Proc(comm, cpu, pid, ppid, T0 + start, elapsed)


def test_a_log_says_when_each_step_started(tmp_path: Path) -> None:
    log = tmp_path / "ci.log"
    log.write_text("=== make test-unit (18:00:00)\n[unit] ...\n=== make images (18:00:05)\n")
    assert ci_cpu.tier_starts(log) == {"test-unit": "18:00:00", "images": "18:00:05"}


def test_processes_go_to_their_steps_and_daemons_apart() -> None:
    procs = [
        proc("make", 10, 1, start=1),  # the log's clock a second behind
        proc("bash", 11, 10, start=2, elapsed=50),
        proc("python", 12, 11, start=3, elapsed=40, cpu=30),
        proc("containerd-shim", 20, 1, start=10),
        proc("python", 21, 20, start=11, elapsed=20, cpu=9),
        proc("kube-apiserver", 22, 1, start=12, cpu=4),
        # pid 11 again, long after the first one ended: not part of the step
        proc("python", 30, 11, start=90, elapsed=5, cpu=2),
        proc("bash", 11, 1, start=80, elapsed=20),
    ]
    tiers = ci_cpu.classify(procs, {"test-unit": "18:00:00"})
    assert [tiers[i] for i in range(len(procs))] == [
        "test-unit",
        "test-unit",
        "test-unit",
        ci_cpu.DETACHED,
        ci_cpu.CONTAINERS,
        ci_cpu.DETACHED,
        ci_cpu.DETACHED,
        ci_cpu.DETACHED,
    ]
    table = ci_cpu.tables(procs, tiers, top=3)
    assert "| test-unit | 0.5 |" in table and "| detached: training containers | 0.1 |" in table


def test_a_path_that_is_not_a_file_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert ci_cpu.main([str(tmp_path), str(tmp_path / "none.log")]) == 2
    assert capsys.readouterr().err.strip() == f"ci_cpu: {tmp_path}: not a regular file"
