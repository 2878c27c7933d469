"""Starting real `python -m kubegan_trainer` workers for tests, framework-free: the same §4
environment `kubegan run` gives them (built by worker_environments), plus test settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kubegan_api.sections import TrainerConfig
from kubegan_trainer.launch.local_run import worker_environments


def launch_workers(
    cfg: TrainerConfig,
    output: Path,
    *,
    workers: int,
    env: dict[str, str],
    python_path: Path,
    timeout: float,
    command: list[str] | None = None,
) -> tuple[list[int], list[str]]:
    """Run `workers` CPU workers to the end; exit codes and combined output per worker.
    `env` is laid over each worker's environment; stragglers are killed on a timeout."""
    output.mkdir(parents=True, exist_ok=True)
    cfg_path = output / "config.json"
    cfg_path.write_text(json.dumps(cfg.to_api()))
    envs = worker_environments(
        cfg,
        workers=workers,
        gpus_per_worker=0,
        output_dir=output,
        cost_rate_per_hour=3.6,
        namespace="test",
        config_path=cfg_path,
    )
    procs = [
        subprocess.Popen(
            command or [sys.executable, "-m", "kubegan_trainer"],
            env={
                **base,
                **env,
                "PYTHONPATH": os.pathsep.join([str(python_path), base.get("PYTHONPATH", "")]),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for base in envs
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], logs


def start_kubegan_run(job: Path, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`kubegan run JOB --output OUT` as its own process, so that a test can signal it or
    kill it; its stdout and stderr together in one text pipe. `env` is laid over this
    process's environment."""
    return subprocess.Popen(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(job), "--output", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
