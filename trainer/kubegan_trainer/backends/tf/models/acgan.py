"""AC-GAN (Odena et al.): class-conditional generator, discriminator with an auxiliary
classifier head; both networks are also trained to get the class right."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import layers
from kubegan_api.image_frame import hw

from kubegan_trainer.backends.tf.models.dcgan import generator_body, trunk
from kubegan_trainer.backends.tf.models.task import (
    Batch,
    GanTask,
    RngRef,
    bce_logits,
    ce_logits,
    normal_init,
)
from kubegan_trainer.base.model_settings import require_labels, settings


class AcganTask(GanTask):
    data_kind = "images"

    def __init__(self, g: keras.Model, d: keras.Model, num_classes: int, latent_dim: int) -> None:
        self.generator, self.discriminator = g, d
        self.num_classes, self.latent_dim = num_classes, latent_dim
        self.rng = RngRef()

    def generator_inputs(self, batch: Batch, gen: tf.random.Generator) -> Batch:
        n = tf.shape(batch["image"])[0]
        return {
            "z": gen.normal([n, self.latent_dim]),
            "label": gen.uniform([n], 0, self.num_classes, dtype=tf.int64),
        }

    def generate(self, inputs: Batch, training: bool) -> tf.Tensor:
        return self.generator([inputs["z"], inputs["label"]], training=training)

    def d_loss(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        real_adv, real_cls = self.discriminator(batch["image"], training=True)
        fake_adv, fake_cls = self.discriminator(fake, training=True)
        return (
            bce_logits(real_adv, 1.0)
            + bce_logits(fake_adv, 0.0)
            + ce_logits(real_cls, batch["label"])
            + ce_logits(fake_cls, inputs["label"])
        )

    def g_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch) -> tf.Tensor:
        adv, cls = self.discriminator(fake, training=True)
        return bce_logits(adv, 1.0) + ce_logits(cls, inputs["label"])


def build_acgan(
    options: dict[str, Any], channels: int, image_size: tuple[int, int] | int, num_classes: int
) -> AcganTask:
    require_labels(num_classes)
    o = settings("acgan", options)
    z = keras.Input((o["latentDim"],))
    label = keras.Input((), dtype="int64")
    # Multiplicative conditioning: the class scales each latent direction.
    emb = layers.Embedding(num_classes, o["latentDim"])(label)
    g = keras.Model(
        [z, label],
        generator_body(layers.Multiply()([z, emb]), channels, image_size, o["ngf"]),
        name="generator",
    )
    image = keras.Input((*hw(image_size), channels))
    h = trunk(image, image_size, o["ndf"])
    adv = layers.Dense(1, dtype="float32", kernel_initializer=normal_init())(h)
    cls = layers.Dense(num_classes, dtype="float32", kernel_initializer=normal_init())(h)
    d = keras.Model(image, [adv, cls], name="discriminator")
    return AcganTask(g, d, num_classes, o["latentDim"])
