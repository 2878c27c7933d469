"""The same model for `framework: tensorflow` (docs/custom-models.md):
`model: {name: custom, entrypoint: "kubegan_examples.tiny_gan_keras:build"}`."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from kubegan_trainer.backends.tf.model_api import (
    Batch,
    GanTask,
    Schedule,
    TrainingPhase,
    bce_logits,
)


class TinyGan(GanTask):
    api_version = 1
    data_kind = "images"  # batches hold "image": (N, H, W, C) in [-1, 1]
    schedule = Schedule(
        (TrainingPhase("discriminator", "d_loss"), TrainingPhase("generator", "g_loss"))
    )
    quality_primary = ("mean_image_gap", False)

    def __init__(self, size: int, channels: int, latent: int) -> None:
        self.latent = latent
        z = keras.Input((latent,))
        x = layers.Dense(size * size * channels, activation="tanh", dtype="float32")(
            layers.Dense(256, activation="relu")(z)
        )
        self.generator = keras.Model(z, layers.Reshape((size, size, channels))(x))
        image = keras.Input((size, size, channels))
        h = layers.LeakyReLU(0.2)(layers.Dense(256)(layers.Flatten()(image)))
        self.discriminator = keras.Model(image, layers.Dense(1, dtype="float32")(h))

    def generator_inputs(self, batch: Batch, gen: tf.random.Generator) -> Batch:
        return {"z": gen.normal([tf.shape(batch["image"])[0], self.latent])}

    def generate(self, inputs: Batch, training: bool) -> tf.Tensor:
        return self.generator(inputs["z"], training=training)

    # Losses per example; self.discriminator is the augmented one when DiffAugment is on.
    def d_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: Any) -> tf.Tensor:
        real = self.discriminator(batch["image"], training=True)
        return bce_logits(real, 1.0) + bce_logits(self.discriminator(fake, training=True), 0.0)

    def g_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch) -> tf.Tensor:
        return bce_logits(self.discriminator(fake, training=True), 1.0)

    def quality(self, real: dict[str, np.ndarray], fake: np.ndarray) -> dict[str, float]:
        gap = np.abs(real["image"].mean(0) - fake.mean(0)).mean()  # channels first, as torch
        return {"mean_image_gap": float(gap)}


def build(options: dict[str, Any]) -> TinyGan:
    size, channels = int(options.get("imageSize", 32)), int(options.get("channels") or 1)
    return TinyGan(size, channels, latent=int(options.get("latentDim") or 64))
