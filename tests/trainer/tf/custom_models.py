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
