"""TensorFlow backend: tf.distribute strategies, Keras models, a custom training loop.

Imported only when `framework: tensorflow` (DESIGN §1: framework code stays inside its
backend). `run(env, config)` is the entry the trainer's `__main__` dispatches to.
"""

from kubegan_trainer.tf_backend.entry import run

__all__ = ["run"]
