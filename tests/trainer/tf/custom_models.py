"""A user model for `model.name: custom` tests: a (generator, discriminator) Keras pair."""

from __future__ import annotations

from typing import Any

import keras
from keras import layers


def tiny_pair(options: dict[str, Any]) -> tuple[keras.Model, keras.Model]:
    latent = int(options.get("latentDim", 8))
    z = keras.Input((latent,))
    x = layers.Dense(8 * 8, activation="tanh", dtype="float32")(z)
    g = keras.Model(z, layers.Reshape((8, 8, 1))(x))
    image = keras.Input((8, 8, 1))
    d = keras.Model(image, layers.Dense(1, dtype="float32")(layers.Flatten()(image)))
    return g, d


def no_api_version(options: dict[str, Any]) -> Any:
    """The guide's Keras model, without the API version it was written for."""
    from kubegan_examples.tiny_gan_keras import build

    task = build(options)
    task.api_version = None
    return task


def torch_networks(options: dict[str, Any]) -> Any:
    from kubegan_examples.tiny_gan_keras import build
    from torch import nn

    task = build(options)
    task.generator = nn.Linear(2, 2)
    return task


def raises_at_build(options: dict[str, Any]) -> Any:
    raise RuntimeError("out of ideas")
