"""Rank 0's MLflow run (spec.tracking.mlflow): one run per job, fed from a background thread
so a step never waits for the tracking server, and a server that is down never ends training.

- The run's id is kept beside the checkpoints (`mlflow-run.json` in the artifacts' store:
  the bucket prefix or the run folder), so a restarted gang, on any pod, continues the same
  run. A stored id the server does not know (another server, a deleted run) starts a new one.
- The training spec goes in as params (the TensorBoard hparams' names), each epoch's
  scalars (TensorBoard's tags) as one log-batch with step = epoch, the sample grid as
  `samples/epoch-NNNN.png`, the exported generator under `generator/`.
- No epoch is logged twice: on resume the epochs the run already has (the steps of its
  `loss/generator` history) are not sent again, although they are trained again.
- The run's status follows the process: RUNNING while it trains, FINISHED at the end,
  KILLED when stopped (a preempted gang sets it back to RUNNING), FAILED on an error.
- Requests are sent in order; one the server may answer later (unreachable, 5xx) is retried
  with backoff, one warning line per outage; one it refuses is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_api.tracking import MlflowSpec

from kubegan_trainer.storage.artifacts import Sink
from kubegan_trainer.storage.mlflow_rest import MlflowClient, MlflowError, RunInfo, artifact_path

log = logging.getLogger(__name__)

RUN_FILE = "mlflow-run.json"
RUN_FILE_MAX_BYTES = 64 << 10
STEP_KEY = "loss/generator"  # in every epoch's batch: its history says which epochs are logged
PARAMS_PER_BATCH = 100  # MLflow's limit per log-batch
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
MAX_PENDING = 10_000  # requests held while the server is down (a few per epoch)
# At the end, a server that has not answered once and is down now gets this long, not the
# full budget: a job must not sit for minutes on a tracking server that is not there.
UNREACHED_FINISH_SECONDS = 10.0

FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"

Op = Callable[[], None]


def run_status(code: int | None) -> str:
    """The MLflow status of a run whose process ends with `code` (None: an exception)."""
    if code == 0:
        return FINISHED
    return KILLED if code == EXIT_INTERRUPTED else FAILED


def finish_budget(timeout: float, reached: bool) -> float:
    """How long the end of the run waits for the tracking server."""
    return timeout if reached else min(timeout, UNREACHED_FINISH_SECONDS)


def _now_ms() -> int:
    return int(time.time() * 1000)


class MlflowTracker:
    def __init__(
        self,
        spec: MlflowSpec,
        job_name: str,
        params: dict[str, Any],
        sink: Sink,
        client: MlflowClient | None = None,
    ) -> None:
        self.client = client or MlflowClient(spec.uri)
        self.experiment = spec.experiment or job_name
        self.job_name = job_name
        self.params = params
        self.sink = sink
        self.run: RunInfo | None = None
        self.root: str | None = None  # the run's artifact path on the proxy
        self.logged: set[int] = set()
        self._lock = threading.Condition()
        self._ops: deque[tuple[str, Op]] = deque()
        self._busy = False
        self._down = False  # an outage has been reported
        self._given_up = False
        self._thread: threading.Thread | None = None

    # ---- what rank 0 calls (never blocks on the server) ------------------------------------
    def start(self, epoch: int) -> None:
        """Training resumes with `epoch` epochs done: find or create the run."""
        self._enqueue("open the run", self._open)

    def epoch(self, epoch: int, scalars: dict[str, float], sample: Path | None) -> None:
        self._enqueue(f"epoch {epoch}", lambda: self._log_epoch(epoch, scalars, sample))

    def files(self, files: dict[str, Path], under: str) -> None:
        for rel, path in sorted(files.items()):
            self._enqueue(f"{under}/{rel}", lambda r=rel, p=path: self._put(f"{under}/{r}", p))

    def finish(self, status: str, timeout: float) -> bool:
        """Set the run's final status and wait for everything queued, at most `timeout` s."""
        self._enqueue(f"status {status}", lambda: self._end(status))
        timeout = finish_budget(timeout, reached=self.run is not None or not self._down)
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._ops or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "MLflow: %d updates not sent to %s within %.0f s",
                        len(self._ops) + self._busy,
                        self.client.shown,
                        timeout,
                    )
                    return False
                self._lock.wait(left)
        return True

    # ---- the thread ----------------------------------------------------------------------------
    def _enqueue(self, what: str, op: Op) -> None:
        with self._lock:
            if self._given_up:
                return
            if len(self._ops) >= MAX_PENDING:
                self._ops.popleft()
            self._ops.append((what, op))
            self._lock.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mlflow", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._ops:
                    self._lock.wait()
                what, op = self._ops[0]
                self._busy = True
            done = self._attempt(what, op)
            with self._lock:
                if done and self._ops and self._ops[0][1] is op:
                    self._ops.popleft()
                self._busy = False
                self._lock.notify_all()

    def _attempt(self, what: str, op: Op) -> bool:
        """Run `op` until it succeeds or is refused for good; False while still retrying."""
        delay = FIRST_BACKOFF
        while True:
            try:
                op()
            except MlflowError as err:
                if not err.retry:
                    self._refused(what, err)
                    return True
                if not self._down:
                    log.warning("MLflow: %s; training goes on, retrying", err)
                    self._down = True
                with self._lock:
                    self._lock.wait(delay)  # a notify (a new request, finish) tries again sooner
                delay = min(delay * 2, MAX_BACKOFF)
                continue
            except Exception as err:  # a malformed answer: never the run's end
                self._refused(what, MlflowError(f"{type(err).__name__}: {err}", retry=False))
                return True
            if self._down:
                log.info("MLflow: %s reachable again", self.client.shown)
                self._down = False
            return True

    def _refused(self, what: str, err: MlflowError) -> None:
        log.warning("MLflow: %s not logged: %s", what, err)
        if self.run is None:  # without a run nothing else can be logged
            with self._lock:
                self._given_up = True
                self._ops.clear()

    # ---- the requests ------------------------------------------------------------------------
    def _open(self) -> None:
        run = self._stored_run()
        if run is None:
            exp = self.client.experiment_id(self.experiment)
            run = self.client.create_run(
                exp, self.job_name, _now_ms(), {"kubegan.job": self.job_name}
            )
            record = {"uri": self.client.shown, "runId": run.run_id, "experimentId": exp}
            self.sink.put_bytes(RUN_FILE, json.dumps(record).encode())
            log.info(
                "MLflow: run %s in experiment %r at %s",
                run.run_id,
                self.experiment,
                self.client.shown,
            )
        else:
            self.logged = self.client.metric_steps(run.run_id, STEP_KEY)
            if run.status != RUNNING:
                self.client.set_status(run.run_id, RUNNING)
            log.info("MLflow: continuing run %s at %s", run.run_id, self.client.shown)
        self.run = run
        self.root = artifact_path(run.artifact_uri)
        if self.root is None:
            log.warning(
                "MLflow: the run's artifacts go to %s, which only the server's own store "
                "reaches; samples and the generator are not logged (use --serve-artifacts)",
                run.artifact_uri,
            )
        self._log_params()

    def _stored_run(self) -> RunInfo | None:
        """The run named beside the checkpoints, when this server still has it."""
        raw = self.sink.read(RUN_FILE, RUN_FILE_MAX_BYTES)
        try:
            record = json.loads(raw) if raw else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or record.get("uri") != self.client.shown:
            return None
        run_id = record.get("runId")
        if not isinstance(run_id, str) or not run_id.isalnum():
            return None
        run = self.client.get_run(run_id)
        return run if run is not None and run.run_id == run_id else None

    def _log_params(self) -> None:
        """The training spec; a resumed run whose spec changed keeps its first values."""
        items = [{"key": k, "value": str(v)} for k, v in sorted(self.params.items())]
        assert self.run is not None
        for i in range(0, len(items), PARAMS_PER_BATCH):
            try:
                self.client.log_batch(self.run.run_id, params=items[i : i + PARAMS_PER_BATCH])
            except MlflowError as err:
                if err.retry:
                    raise
                log.warning("MLflow: params not logged (changed since the run began?): %s", err)
                return

    def _log_epoch(self, epoch: int, scalars: dict[str, float], sample: Path | None) -> None:
        assert self.run is not None
        if epoch not in self.logged:
            stamp = _now_ms()
            metrics = [
                {"key": k, "value": v, "timestamp": stamp, "step": epoch}
                for k, v in scalars.items()
                if math.isfinite(v)
            ]
            self.client.log_batch(self.run.run_id, metrics=metrics)
            self.logged.add(epoch)
        if sample is not None and sample.is_file():
            self._put(f"samples/{sample.name}", sample)

    def _put(self, rel: str, path: Path) -> None:
        if self.root is not None and path.is_file():
            self.client.put_artifact(self.root, rel, path)

    def _end(self, status: str) -> None:
        assert self.run is not None
        self.client.set_status(self.run.run_id, status, _now_ms())
