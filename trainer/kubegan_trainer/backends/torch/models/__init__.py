"""Model registry: `build_task(config, data)` for every `spec.model.name` PyTorch trains."""

from __future__ import annotations

from kubegan_api.sections import Framework, ModelName, TrainerConfig

from kubegan_trainer.backends.torch.models.acgan import build_acgan
from kubegan_trainer.backends.torch.models.custom import build_custom
from kubegan_trainer.backends.torch.models.dcgan import build_dcgan
from kubegan_trainer.backends.torch.models.gan3d import build_gan3d
from kubegan_trainer.backends.torch.models.pix2pix import build_pix2pix
from kubegan_trainer.backends.torch.models.task import Batch, GanTask
from kubegan_trainer.data.arrays import DataShape, Shaped
from kubegan_trainer.worker.model_registry import Builder, build_from


def _custom(config: TrainerConfig, shape: DataShape) -> GanTask:
    return build_custom(config.model.entrypoint, config.model.options)


def _gan3d(config: TrainerConfig, shape: DataShape) -> GanTask:
    return build_gan3d(config.model.options)


def _dcgan(config: TrainerConfig, shape: DataShape) -> GanTask:
    return build_dcgan(config.model.options, shape.channels, shape.hw)


def _acgan(config: TrainerConfig, shape: DataShape) -> GanTask:
    return build_acgan(config.model.options, shape.channels, shape.hw, shape.num_classes)


def _pix2pix(config: TrainerConfig, shape: DataShape) -> GanTask:
    return build_pix2pix(config.model.options, shape.channels, shape.hw)


MODELS: dict[ModelName, Builder[GanTask]] = {
    ModelName.gan3d: _gan3d,
    ModelName.dcgan: _dcgan,
    ModelName.acgan: _acgan,
    ModelName.pix2pix: _pix2pix,
    ModelName.custom: _custom,
}


def build_task(config: TrainerConfig, data: Shaped) -> GanTask:
    """`data`: the Dataset (its first shard when streamed)."""
    return build_from(MODELS, Framework.pytorch, config, data)


__all__ = ["MODELS", "Batch", "GanTask", "build_task"]
