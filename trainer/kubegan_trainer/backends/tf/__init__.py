"""TensorFlow backend: tf.distribute strategies, Keras models, a custom training loop;
besides the shared modules, `strategy` (choosing and building the tf.distribute strategy)
and `ckpt` (tf.train.Checkpoint files in the checkpoint store).
"""
