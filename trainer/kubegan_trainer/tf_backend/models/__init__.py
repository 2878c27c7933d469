"""Model registry: `build_task(config, dataset)`; call it inside `strategy.scope()`."""

from __future__ import annotations

from kubegan_api.sections import ModelName, TrainerConfig

from kubegan_trainer.data import Dataset
from kubegan_trainer.errors import TrainerError
from kubegan_trainer.tf_backend.models.base import Batch, TfGanTask


def build_task(
    config: TrainerConfig, dataset_kind: str, image_shape: tuple[int, ...], num_classes: int
) -> TfGanTask:
    """`image_shape` is channels last: (H, W, C) for images, (51, 51, 25, 1) for showers."""
    name, opts = config.model.name, config.model.options
    if name == ModelName.custom:
        from kubegan_trainer.tf_backend.models.custom import build_custom

        task = build_custom(config.model.entrypoint, opts)
    elif name == ModelName.gan3d:
        from kubegan_trainer.tf_backend.models.gan3d import build_gan3d

        task = build_gan3d(opts)
    elif name in (ModelName.dcgan, ModelName.acgan):
        size, _, channels = image_shape
        if name == ModelName.acgan:
            from kubegan_trainer.tf_backend.models.acgan import build_acgan

            task = build_acgan(opts, channels, size, num_classes)
        else:
            from kubegan_trainer.tf_backend.models.dcgan import build_dcgan

            task = build_dcgan(opts, channels, size)
    else:
        raise TrainerError(
            f"spec.model.name: {name.value} is not available with framework tensorflow "
            "(use gan3d, dcgan, acgan or custom)"
        )
    if task.data_kind != dataset_kind:
        raise TrainerError(
            f"spec.model.name: {name.value} trains on {task.data_kind} data, but spec.data gives "
            f"{dataset_kind}"
        )
    return task


__all__ = ["Batch", "Dataset", "TfGanTask", "build_task"]
