"""MLflow's REST API, spoken directly (the trainer images hold no `mlflow` package): the few
calls a training run needs, each one HTTP request with a bounded answer.

- Tracking: `/api/2.0/mlflow/...` (experiments, runs, log-batch, metric history).
- Artifacts: `PUT /api/2.0/mlflow-artifacts/artifacts/<path>`, the proxy of
  `mlflow server --serve-artifacts` (its default since MLflow 2.0), for runs whose
  artifact URI is `mlflow-artifacts:`; a server that stores artifacts elsewhere (s3://...)
  would need that store's credentials in the trainer, which kubegan does not ask for.

Credentials: MLflow's own variables (`MLFLOW_TRACKING_TOKEN` as a bearer token, else
`MLFLOW_TRACKING_USERNAME`/`MLFLOW_TRACKING_PASSWORD` as basic auth), from the Secret that
spec.tracking.mlflow.credentialsSecret names. They go in a header only: every message here
names the server by its redacted URI and never repeats a header.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_api.contract import MLFLOW_CREDENTIAL_KEYS
from kubegan_api.urls import redact_urls

from kubegan_trainer.base.bounded_read import regular_file_problem

REQUEST_SECONDS = 30.0
ANSWER_MAX_BYTES = 16 << 20  # a run's metric history at thousands of epochs fits
ERROR_TEXT_LIMIT = 300
ARTIFACT_MAX_BYTES = 8 << 30  # the exported generator is the largest file sent
_TOKEN, _USER, _PASSWORD = MLFLOW_CREDENTIAL_KEYS


class MlflowError(Exception):
    """A request that failed. `retry`: the server may answer later (unreachable, 5xx, 429)."""

    def __init__(self, message: str, *, retry: bool, code: str = "") -> None:
        super().__init__(message)
        self.retry = retry
        self.code = code  # MLflow's error_code (RESOURCE_DOES_NOT_EXIST, ...) when it gave one


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    experiment_id: str
    artifact_uri: str
    status: str


def auth_header(environ: Mapping[str, str]) -> dict[str, str]:
    """The Authorization header MLflow's clients send for these variables, or none."""
    token = environ.get(_TOKEN, "")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = environ.get(_USER, ""), environ.get(_PASSWORD, "")
    if user or password:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


def artifact_path(artifact_uri: str) -> str | None:
    """The proxy path of a run's artifact root (`mlflow-artifacts:/1/<run>/artifacts` or
    `mlflow-artifacts://host:port/1/<run>/artifacts`), or None when the server keeps the
    run's artifacts somewhere the proxy does not serve."""
    parsed = urllib.parse.urlparse(artifact_uri)
    if parsed.scheme != "mlflow-artifacts":
        return None
    return parsed.path.strip("/")


class MlflowClient:
    def __init__(self, uri: str, environ: Mapping[str, str] | None = None) -> None:
        self.base = uri.rstrip("/")
        self.shown = redact_urls(self.base)  # for messages
        self._headers = auth_header(os.environ if environ is None else environ)

    # ---- the calls ---------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str:
        """The experiment's id, created when it does not exist yet (by a peer too)."""
        try:
            got = self._call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(got["experiment"]["experiment_id"])
        except MlflowError as err:
            if err.code != "RESOURCE_DOES_NOT_EXIST":
                raise
        try:
            return str(self._call("POST", "experiments/create", {"name": name})["experiment_id"])
        except MlflowError as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":
                raise
        got = self._call("GET", "experiments/get-by-name", {"experiment_name": name})
        return str(got["experiment"]["experiment_id"])

    def create_run(self, experiment_id: str, name: str, start_ms: int, tags: dict) -> RunInfo:
        body = {
            "experiment_id": experiment_id,
            "run_name": name,
            "start_time": start_ms,
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        return _run_info(self._call("POST", "runs/create", body))

    def get_run(self, run_id: str) -> RunInfo | None:
        """The run, or None when the server has no such run (deleted, another server)."""
        try:
            return _run_info(self._call("GET", "runs/get", {"run_id": run_id}))
        except MlflowError as err:
            if err.code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise

    def log_batch(self, run_id: str, metrics: list[dict] = (), params: list[dict] = ()) -> None:  # type: ignore[assignment]
        body = {"run_id": run_id, "metrics": list(metrics), "params": list(params)}
        self._call("POST", "runs/log-batch", body)

    def metric_steps(self, run_id: str, key: str) -> set[int]:
        """The steps at which the run has a value of `key`."""
        got = self._call("GET", "metrics/get-history", {"run_id": run_id, "metric_key": key})
        return {int(m.get("step", 0)) for m in got.get("metrics", [])}

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if end_ms is not None:
            body["end_time"] = end_ms
        self._call("POST", "runs/update", body)

    def put_artifact(self, root: str, rel: str, path: Path) -> None:
        """Upload a local file as `<run's artifact root>/<rel>` through the proxy."""
        problem = regular_file_problem(path)
        if problem is not None:
            raise MlflowError(f"artifact {path} {problem}", retry=False)
        size = path.stat().st_size
        if size > ARTIFACT_MAX_BYTES:
            raise MlflowError(
                f"artifact {path} is larger than {ARTIFACT_MAX_BYTES} bytes", retry=False
            )
        url = (
            f"{self.base}/api/2.0/mlflow-artifacts/artifacts/{urllib.parse.quote(f'{root}/{rel}')}"
        )
        with path.open("rb") as body:
            headers = {**self._headers, "Content-Length": str(size)}
            self._send(urllib.request.Request(url, data=body, method="PUT", headers=headers))

    # ---- HTTP --------------------------------------------------------------------------------
    def _call(self, method: str, api: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base}/api/2.0/mlflow/{api}"
        headers = dict(self._headers)
        data = None
        if method == "GET":
            url += "?" + urllib.parse.urlencode(body)
        else:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        raw = self._send(urllib.request.Request(url, data=data, method=method, headers=headers))
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise MlflowError(f"{self.shown} answered {api} with no JSON", retry=True) from None
        if not isinstance(answer, dict):
            raise MlflowError(f"{self.shown} answered {api} with no JSON object", retry=True)
        return answer

    def _send(self, request: urllib.request.Request) -> bytes:
        api = request.full_url[len(self.base) :].split("?")[0]
        try:  # http(s) only: the URI passed kubegan_api.urls' rules
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as response:
                return response.read(ANSWER_MAX_BYTES + 1)[:ANSWER_MAX_BYTES]
        except urllib.error.HTTPError as err:
            raise _http_error(self.shown, api, err) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise MlflowError(
                redact_urls(f"{self.shown} unreachable ({api}): {reason}")[:ERROR_TEXT_LIMIT],
                retry=True,
            ) from None


def _http_error(shown: str, api: str, err: urllib.error.HTTPError) -> MlflowError:
    """The server's refusal in one line: its error_code and message when it sent them."""
    try:
        detail = json.loads(err.read(64 << 10) or b"{}")
    except (ValueError, OSError):
        detail = {}
    detail = detail if isinstance(detail, dict) else {}
    code = str(detail.get("error_code", ""))
    said = str(detail.get("message", "")).splitlines()[0] if detail.get("message") else ""
    retry = err.code >= 500 or err.code == 429
    text = f"{shown} refused {api}: HTTP {err.code}" + (f" {code}" if code else "")
    text += f": {said}" if said else ""
    return MlflowError(redact_urls(text)[:ERROR_TEXT_LIMIT], retry=retry, code=code)


def _run_info(answer: dict[str, Any]) -> RunInfo:
    info = (answer.get("run") or {}).get("info") or {}
    return RunInfo(
        run_id=str(info.get("run_id") or info.get("run_uuid") or ""),
        experiment_id=str(info.get("experiment_id", "")),
        artifact_uri=str(info.get("artifact_uri", "")),
        status=str(info.get("status", "")),
    )
