"""The trainer's check for a TPU before libtpu starts: the device files of TPU VM hosts."""

from __future__ import annotations

from pathlib import Path

from kubegan_api.contract import ENV_CONFIG, ENV_TPU_WORKER_HOSTNAMES, ENV_TPU_WORKER_ID
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.tpu_devices import (
    ENV_TPU_NAME,
    missing_tpu,
    no_tpu_reason,
    tpu_devices,
)


def test_no_device_files_means_no_tpu(tmp_path: Path) -> None:
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the VFIO control file alone is no TPU
    (tmp_path / "accel").touch()  # not accel<N>
    (tmp_path / "null").touch()
    assert tpu_devices(tmp_path) == []
    reason = no_tpu_reason(tmp_path)
    assert reason is not None and reason.startswith("no TPU was found")
    assert "\n" not in reason and "google.com/tpu" in reason


def test_v4_accel_devices(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"accel{i}").touch()
    assert tpu_devices(tmp_path) == [str(tmp_path / f"accel{i}") for i in range(4)]
    assert no_tpu_reason(tmp_path) is None


def test_v5e_vfio_groups(tmp_path: Path) -> None:
    (tmp_path / "vfio").mkdir()
    for name in ("vfio", "0", "1"):
        (tmp_path / "vfio" / name).touch()
    assert tpu_devices(tmp_path) == [str(tmp_path / "vfio" / "0"), str(tmp_path / "vfio" / "1")]
    assert no_tpu_reason(tmp_path) is None


def _config(framework: str, strategy: str) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "jobName": "t",
            "framework": framework,
            "strategy": strategy,
            "model": {"name": "acgan"},
            "data": {"source": "digits"},
        }
    )


def _env(**extra: str) -> ClusterEnv:
    return ClusterEnv.from_environ({ENV_CONFIG: "/nonexistent/config.json", **extra})


def test_a_tpu_worker_without_a_tpu_gets_one_line(tmp_path: Path) -> None:
    hosts = "w-0.j.ns.svc,w-1.j.ns.svc"
    env = _env(**{ENV_TPU_WORKER_ID: "1", ENV_TPU_WORKER_HOSTNAMES: hosts})
    for strategy in ("auto", "tpu"):  # the slice's variables alone make it a TPU job
        line = missing_tpu(_config("tensorflow", strategy), env, environ={}, dev=tmp_path)
        assert line is not None and "\n" not in line
        assert line.startswith("spec.strategy: tpu, but no TPU is reachable from this worker (")
        assert f"{ENV_TPU_WORKER_ID}=1, {ENV_TPU_WORKER_HOSTNAMES}={hosts}" in line
        assert "no TPU was found" in line
    # strategy tpu without the slice's variables (a single host): the same stop.
    assert missing_tpu(_config("tensorflow", "tpu"), _env(), environ={}, dev=tmp_path)


def test_not_a_tpu_job_or_a_tpu_present_or_named(tmp_path: Path) -> None:
    assert missing_tpu(_config("tensorflow", "auto"), _env(), environ={}, dev=tmp_path) is None
    assert missing_tpu(_config("pytorch", "auto"), _env(), environ={}, dev=tmp_path) is None
    tpu_job = _config("tensorflow", "tpu")
    # A TPU reached by name (TPUClusterResolver(tpu=$TPU_NAME)) is not a local device.
    assert missing_tpu(tpu_job, _env(), environ={ENV_TPU_NAME: "my-tpu"}, dev=tmp_path) is None
    (tmp_path / "accel0").touch()
    assert missing_tpu(tpu_job, _env(), environ={}, dev=tmp_path) is None
