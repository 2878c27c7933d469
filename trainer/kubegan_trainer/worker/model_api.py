"""The custom model API (`spec.model.name: custom`), version 1: what a factory named by
`model.entrypoint` returns, in either framework (docs/custom-models.md is the guide).

A factory `factory(options) -> GanTask` returns a task (the `GanTask` of
`kubegan_trainer.backends.torch.model_api` or `...backends.tf.model_api`, what a model
module imports; the built-in models' own base) that declares:

- `api_version = 1`: the version of this API it was written against (`API_VERSION`); a
  task that declares none, or another, is refused at start with one line.
- `generator`, `discriminator`: the networks (torch.nn.Module / keras.Model).
- `data_kind`: "images" (default), "paired" or "showers", as `options.dataKind` says.
- `schedule`: the phases of one optimizer step as data (`Schedule` of `TrainingPhase`s,
  `STANDARD` by default): which network each update trains and which task method scores it.
- `generator_inputs(batch, rng)`: how generator inputs (noise, conditioning) are drawn;
  `generate(...)`: run the generator; the loss methods the phases name.
- optional `quality(real, fake) -> {name: value}` with `quality_primary = (name,
  higher_is_better)`: the model's own quality score, measured each epoch on the EMA
  generator, replacing the data kind's built-in one (keepBest and the export rank by it).

A `(generator, discriminator)` pair instead of a task is the shortest form: kubegan
trains it as an unconditional GAN with the non-saturating loss (option `latentDim`).

Everything else is kubegan's (`KUBEGAN_OWNS`): a model never builds optimizers, scales
losses, wraps networks for DDP or tf.distribute, or saves state.
"""

from __future__ import annotations

from kubegan_trainer.worker.phases import STANDARD, Schedule, TrainingPhase

API_VERSION = 1

# What kubegan does for every model, from spec.training and spec.checkpoint; the task
# supplies only networks, inputs and losses.
KUBEGAN_OWNS = (
    "optimizers, learning-rate schedules and weight decay (spec.training.generator/discriminator)",
    "mixed precision and loss scaling (spec.training.mixedPrecision)",
    "gradient accumulation and gradient clipping",
    "distribution: DDP (PyTorch) or the tf.distribute strategy (TensorFlow)",
    "checkpoints, exact resume and the exported generator",
    "generator EMA (spec.training.ema) for samples, quality and export",
    "R1 regularization (spec.training.r1) on the batch key `r1_key`",
    "DiffAugment (spec.training.augment) of every image the discriminator sees",
    "samples, metrics, TensorBoard and quality measurement",
)

__all__ = ["API_VERSION", "KUBEGAN_OWNS", "STANDARD", "Schedule", "TrainingPhase"]
