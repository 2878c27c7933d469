"""Rank 0's TensorBoard event files, one writer for both frameworks (tensorboardX: no
TensorFlow or torch import, TensorBoard's own event format).

`<output>/tensorboard/` holds one event file per epoch, named by the epoch
(`events.out.tfevents.<epoch, 10 digits>.kubegan`), written aside and renamed into place
when complete:

- a finished file never changes, so a bucket gets each one with a single upload (a growing
  file would be uploaded whole after every epoch, quadratic in the run's length);
- TensorBoard reads a run's files in name order, which is epoch order whatever the clocks of
  the pods that wrote them (a timestamped name from a pod whose clock is behind would sort
  before its predecessor's files, and TensorBoard drops the steps it then sees "go back");
- after a resume from epoch E the files of epochs after E are removed (artifacts.py) and the
  re-trained epochs write theirs again under the same names: no step is listed twice.

Each file holds the epoch's scalars at step = epoch (losses, samples/s, epoch and quality
time, cost when the job has a price, every quality score) and its sample grid as an image;
the first file a process writes also holds the job's training spec as hparams.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from kubegan_api.sections import TrainerConfig
from PIL import Image

from kubegan_trainer.worker.worker_metrics import EpochRecord

TB_DIR = "tensorboard"
_NAME = re.compile(r"^events\.out\.tfevents\.(\d{10})\.kubegan$")
HPARAM_TEXT_LIMIT = 200  # a value TensorBoard shows in one table cell


def event_file_name(epoch: int) -> str:
    return f"events.out.tfevents.{epoch:010d}.kubegan"


def epoch_of_event_file(name: str) -> int | None:
    """The epoch a per-epoch event file holds, or None for any other name."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def scalars_for(rec: EpochRecord) -> dict[str, float]:
    """The epoch's scalars by TensorBoard tag."""
    out = {
        "loss/generator": rec.g_loss,
        "loss/discriminator": rec.d_loss,
        "throughput/samples_per_second": rec.samples_per_second,
        "time/epoch_seconds": rec.epoch_seconds,
        "time/quality_seconds": rec.quality_seconds,
    }
    if rec.cost_dollars > 0:  # known only when the job has a price
        out["cost/epoch_dollars"] = rec.cost_dollars
    out.update({f"quality/{name}": value for name, value in rec.quality.items()})
    return {tag: float(value) for tag, value in out.items()}


def hparams_for(config: TrainerConfig) -> dict[str, bool | int | float | str]:
    """The job's training spec as flat hparams (`training.batchSizePerReplica`, ...):
    framework, model, data source and every training field; lists and objects as JSON."""
    spec = config.to_api()
    flat: dict[str, bool | int | float | str] = {
        "framework": str(spec.get("framework")),
        "model.name": str((spec.get("model") or {}).get("name")),
        "data.source": str((spec.get("data") or {}).get("source")),
    }
    options = (spec.get("model") or {}).get("options") or {}
    _flatten("model.options", options, flat)
    _flatten("training", spec.get("training") or {}, flat)
    return flat


def _flatten(prefix: str, value: Any, out: dict[str, bool | int | float | str]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    elif value is None:
        return
    elif isinstance(value, (bool, int, float, str)):
        out[prefix] = value if not isinstance(value, str) else value[:HPARAM_TEXT_LIMIT]
    else:
        out[prefix] = json.dumps(value, sort_keys=True)[:HPARAM_TEXT_LIMIT]


class EpochEvents:
    """Writes `<directory>/<event_file_name(epoch)>` for each finished epoch."""

    def __init__(self, directory: Path, hparams: dict[str, bool | int | float | str]) -> None:
        self.directory = directory
        self.hparams = hparams
        self._hparams_written = False

    def write(self, epoch: int, scalars: dict[str, float], image: Path | None) -> Path:
        """The epoch's event file, complete and in place; returns its path."""
        from tensorboardX import SummaryWriter

        self.directory.mkdir(parents=True, exist_ok=True)
        staging = self.directory / f".tmp-{epoch:010d}-{time.time_ns()}"
        staging.mkdir()
        try:
            writer = SummaryWriter(logdir=str(staging), flush_secs=3600)
            try:
                if not self._hparams_written:
                    self._write_hparams(writer, scalars)
                for tag, value in scalars.items():
                    writer.add_scalar(tag, value, global_step=epoch)
                if image is not None and image.is_file():
                    writer.add_image("samples", _pixels(image), epoch, dataformats="HWC")
            finally:
                writer.close()
            (written,) = [p for p in staging.iterdir() if "tfevents" in p.name]
            final = self.directory / event_file_name(epoch)
            written.replace(final)
            self._hparams_written = True
            return final
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_hparams(self, writer: Any, scalars: dict[str, float]) -> None:
        """The training spec, with the scalar tags as its metrics (TensorBoard's HParams tab
        then shows them beside it). The summaries go through the writer's own file writer,
        as tensorboardX's add_hparams does, but into this run rather than a new one."""
        from tensorboardX.summary import hparams

        exp, ssi, _ = hparams(self.hparams, dict.fromkeys(scalars, 0.0))
        writer.file_writer.add_summary(exp)
        writer.file_writer.add_summary(ssi)


def _pixels(png: Path) -> np.ndarray:
    """The sample grid as (H, W, 3) uint8."""
    with Image.open(png) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)
