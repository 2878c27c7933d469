"""`kubegan export DIR` for a run folder that holds no export yet (a run still training, or
stopped): the generator of its best checkpoint (the newest when none is scored), exported on
this machine with the trainer's own exporter, as the run does when it finishes.

The model is built from the folder's config.json and its data (the run trained here, so the
data is here); the framework the job names must be installed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubegan_api.contract import CHECKPOINT_SUBDIR, CONFIG_FILE
from kubegan_api.sections import Framework, TrainerConfig

from kubegan_trainer.base.bounded_read import read_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.folder import CheckpointStore

CONFIG_MAX_BYTES = 1 << 20  # a job's config


@dataclass
class _TorchRun:
    """What the PyTorch exporter reads of a trainer (backends/torch/export.py Trained)."""

    G: Any
    task: Any
    config: TrainerConfig
    dataset: Any

    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        return self.dataset.head(n)


@dataclass
class _TfRun:
    """What the TensorFlow exporter reads of a trainer (backends/tf/export.py Trained)."""

    config: TrainerConfig
    source: Any

    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        arrays = self.source.sample_arrays
        return {k: np.moveaxis(v[:n], -1, 1) if v.ndim >= 4 else v[:n] for k, v in arrays.items()}


def export_run_folder(folder: Path, out: Path) -> Path:
    """Export the generator of `folder`'s best checkpoint into `out` (a new folder);
    TrainerError (one line) when there is nothing to export or no framework to do it."""
    config = _config(folder / CONFIG_FILE)
    package = "torch" if config.framework == Framework.pytorch else "tensorflow"
    if importlib.util.find_spec(package) is None:
        raise TrainerError(f"exporting a {config.framework.value} run needs {package} installed")
    ref = CheckpointStore(folder / CHECKPOINT_SUBDIR, keep=1, writer=False).best_checkpoint()
    if ref is None:
        raise TrainerError(f"{folder}: no whole checkpoint to export a generator from")
    from kubegan_trainer.data import build_dataset

    dataset = build_dataset(config)
    staging = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if config.framework == Framework.pytorch:
        from kubegan_trainer.backends.torch.export import export_generator as torch_export
        from kubegan_trainer.backends.torch.loop import STATE_FILE
        from kubegan_trainer.backends.torch.models import build_task

        task = build_task(config, dataset)
        run = _TorchRun(task.generator, task, config, dataset)
        torch_export(run, ref, ref.path / STATE_FILE, staging)
    else:
        from kubegan_trainer.backends.tf.data import make_source
        from kubegan_trainer.backends.tf.export import export_generator as tf_export

        tf_export(_TfRun(config, make_source(dataset, config.training.seed, 1)), ref, staging)
    out.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):  # the new export's files replace same-named ones
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        entry.replace(target)
    staging.rmdir()
    return out


def _config(path: Path) -> TrainerConfig:
    """The run's config.json (bounded, a regular file), or TrainerError naming it."""
    try:
        return TrainerConfig.model_validate(json.loads(read_regular(path, CONFIG_MAX_BYTES)))
    except FileNotFoundError:
        raise TrainerError(f"{path}: missing; not a kubegan run folder") from None
    except (ValueError, RecursionError) as err:  # JSON syntax, a config of the wrong shape
        raise TrainerError(
            f"{path}: not a kubegan job config ({str(err).splitlines()[0]})"
        ) from None
