"""The exported generator's description, `export/generator.json`, the same for both
frameworks. Framework-free: the exporters (backends/*/export.py) fill it in.

It says what another program needs to rebuild and drive the generator without kubegan: the
model and its options with every default filled in (the architecture is a function of
them and of the data's shape: docs/trainer.md rebuilds DCGAN's in plain PyTorch), the data's
shape, each input's shape and dtype (batch dimension null) and how the trainer draws it,
the output's shape and value range, the file(s) holding the weights, and which checkpoint
(epoch, quality score) they came from. The generator is meant to run in inference mode:
BatchNorm with its running statistics, dropout off (the per-epoch sample grids use batch
statistics, as in training).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubegan_api.sections import TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.data.arrays import DataShape
from kubegan_trainer.storage.folder import read_manifest
from kubegan_trainer.storage.manifest import ManifestError
from kubegan_trainer.storage.retention import score_from
from kubegan_trainer.storage.store import CheckpointRef

SPEC_FILE = "generator.json"
FORMAT = "kubegan.io/generator-export/v1"
# How the trainer draws each generator input it makes itself (a data input is taken from the
# data set: pix2pix's "a", the showers' energy and angle inside gan3d's "latent").
INPUT_MEANINGS = {
    "z": "noise: standard normal",
    "label": "class to draw: integers 0 .. data.numClasses - 1",
    "latent": "gan3d: [energy / 100 GeV, angle, standard normal noise ...]",
    "a": "pix2pix: the input image, in [-1, 1]",
}


def resolved_options(config: TrainerConfig) -> dict[str, Any]:
    """The model's options with defaults filled in (the raw options where kubegan has no
    table for them)."""
    try:
        return settings(config.model.name.value, config.model.options)
    except TrainerError:
        return dict(config.model.options)


def tensor_spec(shape: Sequence[int], dtype: str) -> dict[str, Any]:
    """A tensor's description with its batch dimension left open."""
    return {"shape": [None, *(int(d) for d in shape[1:])], "dtype": dtype}


def generator_spec(
    *,
    framework: str,
    config: TrainerConfig,
    shape: DataShape,
    ref: CheckpointRef,
    inputs: Mapping[str, tuple[Sequence[int], str]],
    output: tuple[Sequence[int], str],
    layout: str,
    files: Mapping[str, str],
) -> dict[str, Any]:
    """`inputs`: name -> (an example's shape, dtype); `output`: (an example's shape,
    dtype); `layout`: channels_first or channels_last; `files`: what each file holds -> its
    name in the export folder."""
    try:
        score = score_from(read_manifest(ref.path).extra)
    except (OSError, ManifestError):
        score = None
    return {
        "format": FORMAT,
        "framework": framework,
        "job": config.job_name,
        "model": {"name": config.model.name.value, "options": resolved_options(config)},
        "data": {
            "kind": shape.kind,
            "channels": shape.channels,
            "size": shape.size,  # the height; "width" differs for spec.data.resize/crop
            "width": shape.hw[1],
            "numClasses": shape.num_classes,
        },
        "inputs": {
            name: {**tensor_spec(s, dtype), "meaning": INPUT_MEANINGS.get(name, "")}
            for name, (s, dtype) in sorted(inputs.items())
        },
        "output": {**tensor_spec(*output), "layout": layout, "range": [-1.0, 1.0]},
        "mode": "inference: BatchNorm running statistics, dropout off",
        "checkpoint": {
            "name": ref.name,
            "epoch": ref.position.epoch,
            "step": ref.position.step,
            "score": score.to_manifest() if score else None,
        },
        "files": dict(files),
    }
