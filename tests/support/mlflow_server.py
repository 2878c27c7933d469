"""A real MLflow tracking server for the tests (`mlflow`, the dev group's): a sqlite backend
and a local artifact root in the test's folder, artifacts served through the server's
mlflow-artifacts proxy (`--serve-artifacts`, MLflow's default), on a leased port, in its own
process group so that stopping it stops its workers too.

`runs(experiment)` and `metric_history` read back what a trainer logged, through the same
REST API any MLflow client uses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_trainer.launch.ports import reserve_port

from tests.support.local_server import LocalServer

MLFLOW = str(Path(sys.executable).with_name("mlflow"))
# The server imports much of MLflow before it answers: on a loaded CI machine, minutes.
START_SECONDS = 300.0


@dataclass
class MlflowServer(LocalServer):
    root: Path = Path()

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, root: Path) -> MlflowServer:
        server = cls(reserve_port(), root / "mlflow.log", root=root)
        argv = [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(server.port)]
        argv += ["--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"]
        argv += ["--artifacts-destination", str(root / "artifacts")]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        server._launch("mlflow", argv, START_SECONDS, env=env, start_new_session=True)
        return server

    def _probe(self) -> None:
        urllib.request.urlopen(f"{self.uri}/health", timeout=2).close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # its own group: the server's workers
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    # ---- reading back ----------------------------------------------------------------------
    def api(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        data = None
        if method == "GET":
            url += "?" + urllib.parse.urlencode(body)
        else:
            data = json.dumps(body).encode()
        req = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        exp = self.api("GET", "experiments/get-by-name", {"experiment_name": experiment})
        found = self.api(
            "POST", "runs/search", {"experiment_ids": [exp["experiment"]["experiment_id"]]}
        )
        return found.get("runs", [])

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        got = self.api("GET", "metrics/get-history", {"run_id": run_id, "metric_key": key})
        return sorted((int(m.get("step", 0)), float(m["value"])) for m in got.get("metrics", []))

    def artifact_files(self, experiment_id: str, run_id: str) -> list[str]:
        """Every artifact of the run, relative to its root, from the artifact store itself."""
        top = self.root / "artifacts" / experiment_id / run_id / "artifacts"
        return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())


def mlflow_server_fixture(tmp_path_factory) -> Iterator[MlflowServer]:  # type: ignore[no-untyped-def]
    """The body of a pytest fixture: one MLflow server for a module."""
    server = MlflowServer.start(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        server.stop()
