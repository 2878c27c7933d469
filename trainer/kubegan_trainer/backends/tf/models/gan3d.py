"""The CERN 3DGAN calorimeter GAN, as in the public TF2 code (recardoso/ISC_HPC_3DGAN
kubeflow/ganV2.py, svalleco/3Dgan AngleArch3dGAN), channels last.

Showers are (51, 51, 25, 1) images of ECAL ** 0.85. Latent 256 = [energy, angle, 254
Gaussian]. Generator: Dense(5184) -> (9, 9, 8, 8) -> UpSampling3D(6) -> Conv3D 8 (6,6,8)
-> three Conv3D 6 (4,4,6) with ZeroPadding3D(2,2,1) -> Conv3D 6 (3,3,5) -> Conv3D 6
(3,3,3) -> Conv3D 1 (2,2,2), ReLU, BatchNorm(eps 1e-6) after the first five. Discriminator:
Conv3D 16 (5,6,6) same, LeakyReLU, Dropout 0.2, three Conv3D 8 (5,6,6) blocks (the first
two after ZeroPadding3D(0,0,1)) with BatchNorm, AveragePooling3D(2), Flatten; heads
real/fake and energy, plus the ECAL sum and the measured angle computed from the image
(pixel power 1/0.85). Loss weights [BCE, MAPE(E), MAE(angle), MAPE(ECAL)] = [3, 0.1, 25,
0.1], labels 5 % flipped; per iteration the schedule `phases.GAN3D`, shared with the
PyTorch backend: one D step on real, one on fake (fakes made with the generator in
inference mode), then two G steps with fresh noise.

Deliberate differences: the real/fake head gives a logit and the loss applies the
sigmoid (the same function, numerically safe under mixed precision); `size: tiny` is a
small stand-in with the same inputs, outputs and heads for tests and CPU demos.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf
from keras import layers

from kubegan_trainer.backends.tf.models.task import (
    Batch,
    GanTask,
    RngDropout,
    RngRef,
    bce_logits,
)
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.phases import GAN3D

SHAPE = (51, 51, 25, 1)


def _bn() -> layers.Layer:
    return layers.BatchNormalization(epsilon=1e-6, momentum=0.99)


def full_generator(latent_dim: int) -> keras.Model:
    latent = keras.Input((latent_dim,))
    x = layers.Dense(5184)(latent)
    x = layers.Reshape((9, 9, 8, 8))(x)
    x = layers.UpSampling3D((6, 6, 6))(x)
    x = layers.Conv3D(8, (6, 6, 8), kernel_initializer="he_uniform")(x)
    x = _bn()(layers.ReLU()(x))
    for pad, k in (((2, 2, 1), (4, 4, 6)),) * 3 + (((1, 1, 0), (3, 3, 5)),):
        x = layers.ZeroPadding3D(pad)(x)
        x = layers.Conv3D(6, k, kernel_initializer="he_uniform")(x)
        x = _bn()(layers.ReLU()(x))
    x = layers.ZeroPadding3D((1, 1, 0))(x)
    x = layers.ReLU()(layers.Conv3D(6, (3, 3, 3), kernel_initializer="he_uniform")(x))
    x = layers.Conv3D(1, (2, 2, 2), kernel_initializer="glorot_normal")(x)
    return keras.Model(latent, layers.ReLU(dtype="float32")(x), name="generator")


def tiny_generator(latent_dim: int) -> keras.Model:
    # Every convolution runs at (13, 13, 7): TF's CPU Conv3D and its gradients cost ~100x
    # more per voxel at full resolution, and the last 1x1 conv commutes with nearest
    # upsampling, so the output is the same function as upsampling first.
    latent = keras.Input((latent_dim,))
    x = layers.Dense(13 * 13 * 7 * 8)(latent)
    x = layers.Reshape((13, 13, 7, 8))(x)
    for _ in range(2):
        x = layers.Conv3D(8, (3, 3, 3), padding="same", kernel_initializer="he_uniform")(x)
        x = _bn()(layers.ReLU()(x))
    x = layers.Conv3D(1, (1, 1, 1), kernel_initializer="glorot_normal")(x)
    x = layers.UpSampling3D((4, 4, 4))(layers.ReLU()(x))  # (52, 52, 28)
    x = layers.Cropping3D(((0, 1), (0, 1), (1, 2)))(x)  # (51, 51, 25)
    return keras.Model(latent, layers.Activation("linear", dtype="float32")(x), name="generator")


def _features_full(image: keras.KerasTensor, rng: RngRef) -> keras.KerasTensor:
    x = layers.Conv3D(16, (5, 6, 6), padding="same")(image)
    x = RngDropout(0.2, rng)(layers.LeakyReLU()(x))
    for pad in (True, True, False):
        if pad:
            x = layers.ZeroPadding3D((0, 0, 1))(x)
        x = layers.Conv3D(8, (5, 6, 6))(x)
        x = RngDropout(0.2, rng)(_bn()(layers.LeakyReLU()(x)))
    x = layers.AveragePooling3D((2, 2, 2))(x)
    return layers.Flatten()(x)  # 19 x 18 x 7 x 8 = 19152 features


def _features_tiny(image: keras.KerasTensor, rng: RngRef) -> keras.KerasTensor:
    # Pool before convolving: a strided Conv3D's filter gradient on TF's CPU kernels takes
    # seconds per batch at (51, 51, 25); the same conv after pooling takes milliseconds.
    x = layers.AveragePooling3D((3, 3, 2))(image)  # (17, 17, 12)
    x = layers.Conv3D(8, (3, 3, 3), padding="same")(x)
    x = RngDropout(0.2, rng)(layers.LeakyReLU()(x))
    x = layers.Conv3D(8, (3, 3, 3), padding="same")(x)
    x = RngDropout(0.2, rng)(_bn()(layers.LeakyReLU()(x)))
    x = layers.AveragePooling3D((2, 2, 2))(x)  # (8, 8, 6)
    return layers.Flatten()(x)  # 3072 features


def measured_angle(raw: tf.Tensor) -> tf.Tensor:
    """Incidence angle (radians) from (N, 51, 51, 25) raw energies, as 3DGAN's
    `ecal_angle`: per-layer barycentres relative to the overall barycentre, slope of y
    against the (x, z) distance, averaged over layers weighted by depth. 90 degrees is
    perpendicular incidence."""
    raw = tf.cast(raw, tf.float32)
    _, nx, ny, nz = raw.shape
    xs = tf.range(nx, dtype=tf.float32) + 0.5
    ys = tf.range(ny, dtype=tf.float32) + 0.5
    zs = tf.range(nz, dtype=tf.float32) + 0.5
    total = tf.maximum(tf.reduce_sum(raw, [1, 2, 3]), 1e-12)
    x_ref = tf.reduce_sum(tf.reduce_sum(raw, [2, 3]) * xs, 1) / total
    z_ref = tf.reduce_sum(tf.reduce_sum(raw, [1, 2]) * zs, 1) / total
    per_layer = tf.reduce_sum(raw, [1, 2])  # (N, Z)
    has = tf.cast(per_layer > 0, tf.float32)
    safe = tf.maximum(per_layer, 1e-12)
    x_mid = tf.reduce_sum(tf.reduce_sum(raw, 2) * xs[None, :, None], 1) / safe
    y_mid = tf.reduce_sum(tf.reduce_sum(raw, 1) * ys[None, :, None], 1) / safe
    dz = zs[None] - z_ref[:, None]
    proj = tf.sqrt(tf.maximum((x_mid - x_ref[:, None]) ** 2 + dz**2, 1e-6))
    y_ref = tf.reduce_sum(tf.reduce_sum(raw, [1, 3]) * ys, 1) / total
    slope = (y_mid - y_ref[:, None]) / proj * tf.sign(dz)
    ang = math.pi / 2 - tf.atan(slope)
    w = zs[None] * has
    return tf.reduce_sum(ang * w, 1) / tf.maximum(tf.reduce_sum(w, 1), 1e-12)


def discriminator(size: str, power: float, rng: RngRef) -> keras.Model:
    image = keras.Input(SHAPE)
    h = (_features_full if size == "full" else _features_tiny)(image, rng)
    logit = layers.Dense(1, dtype="float32", name="generation")(h)
    energy = layers.Dense(1, dtype="float32", name="auxiliary")(h)
    return keras.Model(image, [logit, energy], name="discriminator")


def _mape(true: tf.Tensor, pred: tf.Tensor) -> tf.Tensor:
    """Per-example mean absolute percentage error (Keras' definition)."""
    pred = tf.cast(tf.reshape(pred, [-1]), tf.float32)
    return 100.0 * tf.abs((true - pred) / tf.maximum(tf.abs(true), 1e-7))


class Gan3dTask(GanTask):
    data_kind = "showers"
    schedule = GAN3D

    def __init__(
        self,
        g: keras.Model,
        d: keras.Model,
        latent_dim: int,
        weights: list[float],
        label_flip: float,
        power: float,
        rng: RngRef,
    ) -> None:
        self.generator, self.discriminator = g, d
        self.latent_dim, self.weights, self.label_flip, self.power = (
            latent_dim,
            weights,
            label_flip,
            power,
        )
        self.rng = rng

    def generator_inputs(self, batch: Batch, gen: tf.random.Generator) -> Batch:
        e, a = batch["energy"], batch["angle"]
        noise = gen.normal([tf.shape(e)[0], self.latent_dim - 2])
        return {"latent": tf.concat([e[:, None], a[:, None], noise], 1)}

    def generate(self, inputs: Batch, training: bool) -> tf.Tensor:
        return self.generator(inputs["latent"], training=training)

    def _heads(self, image: tf.Tensor) -> tuple[tf.Tensor, ...]:
        logit, energy = self.discriminator(image, training=True)
        raw = tf.pow(tf.maximum(tf.cast(image, tf.float32), 0.0), 1.0 / self.power)[..., 0]
        return logit, energy, measured_angle(raw), tf.reduce_sum(raw, [1, 2, 3])

    def _loss(self, heads: tuple[tf.Tensor, ...], target: tf.Tensor, batch: Batch) -> tf.Tensor:
        logit, energy, angle, ecal = heads
        w = self.weights
        return (
            w[0] * bce_logits(logit, target)
            + w[1] * _mape(batch["energy"], energy)
            + w[2] * tf.abs(angle - batch["angle"])
            + w[3] * _mape(batch["ecal"], ecal)
        )

    def _flipped(self, label: float, n: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
        target = tf.fill([n], tf.constant(label, tf.float32))
        if self.label_flip <= 0:
            return target
        flip = gen.uniform([n]) < self.label_flip  # 3DGAN's BitFlip: 5 % of labels
        return tf.where(flip, 1.0 - target, target)

    def d_loss_real(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        n = tf.shape(batch["energy"])[0]
        return self._loss(self._heads(batch["image"]), self._flipped(1.0, n, gen), batch)

    def d_loss_fake(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        n = tf.shape(batch["energy"])[0]
        return self._loss(self._heads(fake), self._flipped(0.0, n, gen), batch)

    def d_loss(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        return self.d_loss_real(batch, fake, inputs, gen) + self.d_loss_fake(
            batch, fake, inputs, gen
        )

    def g_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch) -> tf.Tensor:
        n = tf.shape(batch["energy"])[0]
        return self._loss(self._heads(fake), tf.ones([n], tf.float32), batch)


def build_gan3d(options: dict[str, Any]) -> Gan3dTask:
    o = settings("gan3d", options)
    latent, size, power = o["latentDim"], o["size"], float(o["power"])
    rng = RngRef()
    g = (full_generator if size == "full" else tiny_generator)(latent)
    d = discriminator(size, power, rng)
    return Gan3dTask(
        g, d, latent, [float(w) for w in o["lossWeights"]], float(o["labelFlip"]), power, rng
    )
