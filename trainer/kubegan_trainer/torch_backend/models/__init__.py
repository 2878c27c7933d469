"""Model registry: `build_task(config, dataset)` for every `spec.model.name`."""

from __future__ import annotations

from kubegan_api.sections import ModelName, TrainerConfig

from kubegan_trainer.data import Dataset
from kubegan_trainer.errors import TrainerError
from kubegan_trainer.torch_backend.models.base import Batch, GanTask


def build_task(config: TrainerConfig, dataset: Dataset) -> GanTask:
    name, opts = config.model.name, config.model.options
    if name == ModelName.custom:
        from kubegan_trainer.torch_backend.models.custom import build_custom

        task = build_custom(config.model.entrypoint, opts)
    elif name == ModelName.gan3d:
        from kubegan_trainer.torch_backend.models.gan3d import build_gan3d

        task = build_gan3d(opts)
    else:
        key = "a" if dataset.kind == "paired" else "image"
        _, channels, size, _ = dataset.arrays[key].shape
        if name == ModelName.pix2pix:
            from kubegan_trainer.torch_backend.models.pix2pix import build_pix2pix

            task = build_pix2pix(opts, channels, size)
        elif name == ModelName.acgan:
            from kubegan_trainer.torch_backend.models.acgan import build_acgan

            task = build_acgan(opts, channels, size, dataset.num_classes)
        else:
            from kubegan_trainer.torch_backend.models.dcgan import build_dcgan

            task = build_dcgan(opts, channels, size)
    if task.data_kind != dataset.kind:
        raise TrainerError(
            f"spec.model.name: {name.value} trains on {task.data_kind} data, but spec.data gives "
            f"{dataset.kind}"
        )
    return task


__all__ = ["Batch", "GanTask", "build_task"]
