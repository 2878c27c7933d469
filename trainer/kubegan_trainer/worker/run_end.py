"""The end of a run, the same for both backends: the checkpoint store finishes its uploads
first (the one thing a job cannot lose), then a finished run exports its best generator,
then the artifacts' uploads get the time that is left (after a stop: the grace period's).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from kubegan_trainer.storage.store import CheckpointRef, Store
from kubegan_trainer.storage.sync import finish_uploads
from kubegan_trainer.worker.artifacts import EXPORT_DIR, RunArtifacts
from kubegan_trainer.worker.driver import Driver
from kubegan_trainer.worker.mlflow_run import run_status

log = logging.getLogger("kubegan_trainer")

# Writes the generator of a checkpoint into a folder; returns its files by relative path.
Exporter = Callable[[CheckpointRef, Path], dict[str, Path]]


def run_to_end(
    driver: Driver,
    store: Store | None,
    steps_per_epoch: int,
    stop_at: Callable[[], float | None],
    exporter: Exporter,
) -> int:
    """Train, then finish: `store` is the checkpoint store this process commits (None on a
    worker that writes none); `stop_at` says when a stop was asked for, if one was."""
    code: int | None = None  # None while running: an exception ends the run FAILED
    try:
        code = driver.fit()
        if store is not None:
            code = finish_uploads(store, code, steps_per_epoch, stop_at())
        if code == 0 and store is not None and _export_due(driver):
            assert driver.artifacts is not None
            export_best(store, exporter, driver.artifacts)
        return code
    finally:
        if driver.artifacts is not None:
            driver.artifacts.finish(stop_at(), run_status(code))


def _export_due(driver: Driver) -> bool:
    """Rank 0 of a run that trained its last epoch, or that finished earlier without an
    export in the store (a pod stopped while exporting)."""
    artifacts = driver.artifacts
    return artifacts is not None and (driver.completed or not artifacts.has_export())


def export_best(store: Store, exporter: Exporter, artifacts: RunArtifacts) -> Path | None:
    """Export the generator of the best checkpoint (the newest when none is scored) to
    `<output>/export/` and the artifacts' store. A failure is a warning: training is done and
    its checkpoints are safe; `kubegan export` can try again."""
    ref = store.best_checkpoint()
    if ref is None:
        log.warning("no whole checkpoint to export the generator from")
        return None
    final = artifacts.output / EXPORT_DIR
    staging = artifacts.output / f".tmp-{EXPORT_DIR}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        files = exporter(ref, staging)
    except Exception as err:  # a framework's export of any model, custom ones included
        shutil.rmtree(staging, ignore_errors=True)
        log.warning("generator of %s not exported: %s", ref.name, str(err).splitlines()[0][:300])
        return None
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    artifacts.put_export({rel: final / rel for rel in files})
    log.info("exported the generator of %s to %s/%s", ref.name, artifacts.sink.location, EXPORT_DIR)
    return final
