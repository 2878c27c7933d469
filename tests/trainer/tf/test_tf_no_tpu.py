"""The trainer's command on a worker of a TPU slice without a TPU (what the trainer-tf-tpu
image does on any other machine): exit 2 and one line saying no TPU was found, before libtpu
starts, within seconds of TensorFlow's import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubegan_api.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG,
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
    EXIT_USER_ERROR,
)
from kubegan_trainer.worker.tpu_devices import ENV_TPU_NAME

from tests.trainer.tf.tfutil import REPO, tf_config


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["tpu", "auto"])  # auto: the slice's env alone says TPU
def test_no_tpu_exits_2_with_one_line(tmp_path: Path, strategy: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tf_config("acgan", strategy=strategy).to_api()))
    env = {
        **os.environ,
        ENV_CONFIG: str(cfg),
        ENV_OUTPUT_DIR: str(tmp_path),
        ENV_CHECKPOINT_DIR: str(tmp_path / "checkpoints"),
        ENV_METRICS_PORT: "0",
        ENV_TPU_WORKER_ID: "1",
        ENV_TPU_WORKER_HOSTNAMES: "w-0.j.ns.svc,w-1.j.ns.svc",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop(ENV_TPU_NAME, None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kubegan_trainer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_USER_ERROR, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if "no TPU was found" in line]
    assert len(lines) == 1, output
    assert lines[0].startswith("kubegan-trainer: error: spec.strategy: tpu, but no TPU")
    assert f"{ENV_TPU_WORKER_ID}=1" in lines[0]
    assert time.monotonic() - start < 120
