"""Model registry: `build_task(config, data)` for every `spec.model.name` TensorFlow trains;
call it inside `strategy.scope()`."""

from __future__ import annotations

from kubegan_api.sections import Framework, ModelName, TrainerConfig

from kubegan_trainer.backends.tf.models.acgan import build_acgan
from kubegan_trainer.backends.tf.models.custom import build_custom
from kubegan_trainer.backends.tf.models.dcgan import build_dcgan
from kubegan_trainer.backends.tf.models.gan3d import build_gan3d
from kubegan_trainer.backends.tf.models.task import Batch, GanTask
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


MODELS: dict[ModelName, Builder[GanTask]] = {
    ModelName.gan3d: _gan3d,
    ModelName.dcgan: _dcgan,
    ModelName.acgan: _acgan,
    ModelName.custom: _custom,
}


def build_task(config: TrainerConfig, data: Shaped) -> GanTask:
    """`data`: the input source (backends/tf/data.py)."""
    return build_from(MODELS, Framework.tensorflow, config, data)


def needs_autograph(config: TrainerConfig) -> bool:
    """Whether the job's tf.functions (train step, exported serving function) are traced with
    autograph, which rewrites Python branches on tensors into graph ops. The built-in models'
    loops and branches are over values known at trace time, so for them it buys nothing and
    costs about 2 CPU s of every worker's start (and restart). A user's model
    (spec.model.entrypoint) may branch on tensors: it keeps autograph."""
    return config.model.name == ModelName.custom


__all__ = ["MODELS", "Batch", "GanTask", "build_task", "needs_autograph"]
