"""The TensorFlow generator, exported for programs without kubegan: a SavedModel
(`saved_model/`, signature `serving_default`: the generator inputs by name in, `images` out,
inference mode) and `generator.json` (worker/export_spec.py).

The generator is rebuilt outside the training strategy, in float32 whatever the job's mixed
precision, and only its variables are read from the checkpoint, so the export never touches
the trained state and loads on any machine (`tf.saved_model.load`, no kubegan, no custom
objects).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import keras
import numpy as np
import tensorflow as tf
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.backends.tf.ckpt import STATE_PREFIX
from kubegan_trainer.backends.tf.models import needs_autograph
from kubegan_trainer.storage.store import CheckpointRef
from kubegan_trainer.worker.export_spec import SPEC_FILE, generator_spec


class Trained(Protocol):
    """What the export reads of the trainer (backends/tf/loop.py GanTrainer)."""

    config: TrainerConfig
    source: Any  # the input source: its data_shape, what build_task reads

    def real_examples(self, n: int) -> dict[str, np.ndarray]: ...


SAVED_MODEL_DIR = "saved_model"
EXAMPLE_BATCH = 2


def _float32_task(trainer: Trained) -> Any:
    from kubegan_trainer.backends.tf.models import build_task

    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        return build_task(trainer.config, trainer.source)
    finally:
        keras.mixed_precision.set_global_policy(policy)


def export_generator(trainer: Trained, ref: CheckpointRef, out: Path) -> dict[str, Path]:
    """Write the generator of checkpoint `ref` into `out`; its files by relative path."""
    task = _float32_task(trainer)
    # With spec.training.ema, the generator's moving average is the one to use.
    name = "generator_ema" if trainer.config.training.ema else "generator"
    status = tf.train.Checkpoint(**{name: task.generator}).read(str(ref.path / STATE_PREFIX))
    status.assert_existing_objects_matched()  # every generator variable came from `ref`
    status.expect_partial()  # the rest of the checkpoint (D, optimizers) is not wanted
    real = trainer.real_examples(EXAMPLE_BATCH)
    batch = {k: tf.constant(_channels_last(v)) for k, v in real.items()}
    inputs = task.generator_inputs(batch, tf.random.Generator.from_seed(0))
    names = sorted(inputs)
    specs = [tf.TensorSpec([None, *inputs[k].shape[1:]], inputs[k].dtype, name=k) for k in names]

    @tf.function(input_signature=specs, autograph=needs_autograph(trainer.config))
    def serve(*args: tf.Tensor) -> dict[str, tf.Tensor]:
        images = task.generate(dict(zip(names, args, strict=True)), training=False)
        return {"images": tf.cast(images, tf.float32)}

    module = tf.Module()
    module.generator = task.generator
    module.serve = serve
    tf.saved_model.save(module, str(out / SAVED_MODEL_DIR), signatures={"serving_default": serve})
    images = serve(*[inputs[k] for k in names])["images"]
    spec = generator_spec(
        framework="tensorflow",
        config=trainer.config,
        shape=trainer.source.data_shape,
        ref=ref,
        inputs={k: (tuple(inputs[k].shape), inputs[k].dtype.name) for k in names},
        output=(tuple(images.shape), "float32"),
        layout="channels_last",
        files={"savedModel": SAVED_MODEL_DIR, "signature": "serving_default"},
    )
    (out / SPEC_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
    return {str(p.relative_to(out)): p for p in sorted(out.rglob("*")) if p.is_file()}


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if a.ndim >= 4 else a
