"""DCGAN (Radford et al.) in Keras, channels last, and the unconditional task."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import layers
from kubegan_api.image_frame import dcgan_stages, dcgan_start, hw

from kubegan_trainer.backends.tf.models.task import (
    Batch,
    GanTask,
    RngRef,
    bce_logits,
    normal_init,
)
from kubegan_trainer.base.model_settings import settings

HW = tuple[int, int]  # (height, width): kubegan_api.image_frame


def generator_body(
    latent: keras.KerasTensor, channels: int, image_size: HW | int, ngf: int
) -> keras.KerasTensor:
    n = dcgan_stages(*hw(image_size))
    width = ngf * 2 ** (n - 1)
    h0, w0 = dcgan_start(*hw(image_size))
    x = layers.Dense(h0 * w0 * width, use_bias=False, kernel_initializer=normal_init())(latent)
    x = layers.Reshape((h0, w0, width))(x)
    x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
    x = layers.ReLU()(x)
    for _ in range(n - 1):
        width //= 2
        x = layers.Conv2DTranspose(
            width, 4, 2, padding="same", use_bias=False, kernel_initializer=normal_init()
        )(x)
        x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        x = layers.ReLU()(x)
    x = layers.Conv2DTranspose(
        channels, 4, 2, padding="same", use_bias=False, kernel_initializer=normal_init()
    )(x)
    # float32 output: images and losses stay in full precision under mixed policies.
    return layers.Activation("tanh", dtype="float32")(x)


def trunk(image: keras.KerasTensor, image_size: HW | int, ndf: int) -> keras.KerasTensor:
    x = layers.Conv2D(ndf, 4, 2, padding="same", use_bias=False, kernel_initializer=normal_init())(
        image
    )
    x = layers.LeakyReLU(0.2)(x)
    width = ndf
    for _ in range(dcgan_stages(*hw(image_size)) - 1):
        width *= 2
        x = layers.Conv2D(
            width, 4, 2, padding="same", use_bias=False, kernel_initializer=normal_init()
        )(x)
        x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        x = layers.LeakyReLU(0.2)(x)
    return layers.Flatten()(x)


class UnconditionalTask(GanTask):
    """Non-saturating GAN loss on an unconditional generator of (N, latent) noise."""

    data_kind = "images"

    def __init__(self, generator: keras.Model, discriminator: keras.Model, latent_dim: int) -> None:
        self.generator, self.discriminator, self.latent_dim = generator, discriminator, latent_dim
        self.rng = RngRef()

    def generator_inputs(self, batch: Batch, gen: tf.random.Generator) -> Batch:
        n = tf.shape(batch["image"])[0]
        return {"z": gen.normal([n, self.latent_dim])}

    def generate(self, inputs: Batch, training: bool) -> tf.Tensor:
        return self.generator(inputs["z"], training=training)

    def d_loss(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        real = self.discriminator(batch["image"], training=True)
        fake_logit = self.discriminator(fake, training=True)
        return bce_logits(real, 1.0) + bce_logits(fake_logit, 0.0)

    def g_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch) -> tf.Tensor:
        return bce_logits(self.discriminator(fake, training=True), 1.0)


def build_dcgan(options: dict[str, Any], channels: int, image_size: HW | int) -> UnconditionalTask:
    o = settings("dcgan", options)
    z = keras.Input((o["latentDim"],))
    g = keras.Model(z, generator_body(z, channels, image_size, o["ngf"]), name="generator")
    image = keras.Input((*hw(image_size), channels))
    logit = layers.Dense(1, dtype="float32", kernel_initializer=normal_init())(
        trunk(image, image_size, o["ndf"])
    )
    d = keras.Model(image, logit, name="discriminator")
    return UnconditionalTask(g, d, o["latentDim"])
