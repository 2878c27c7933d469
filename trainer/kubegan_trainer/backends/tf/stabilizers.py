"""The training options beside the model (`spec.training`: ema, r1, augment) for the
TensorFlow GanTrainer: what its step asks of them, the objects its checkpoint holds for
them, and the host-side counters they keep. Schedules live in the optimizers (optim.py).
Each option's definition is its worker/ module. Build it inside the strategy's scope."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.backends.tf.augment import Augmented
from kubegan_trainer.backends.tf.ema import copy_weights, update_ema
from kubegan_trainer.backends.tf.models import GanTask, build_task
from kubegan_trainer.backends.tf.regularize import r1_penalty
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.arrays import Shaped
from kubegan_trainer.worker.augment import augment_seed, policy_ops, require_images
from kubegan_trainer.worker.ema import EmaClock
from kubegan_trainer.worker.regularize import LazyR1


class Stabilizers:
    def __init__(
        self,
        config: TrainerConfig,
        task: GanTask,
        source: Shaped,
        samples_per_step: int,
        data_keys: tuple[str, ...],
    ) -> None:
        t = config.training
        self.task, self.seed = task, t.seed
        self.generator = task.generator  # the trained one: the task's own may be replaced
        self.objects: dict[str, Any] = {}  # what the checkpoint holds for the options
        self.ema_task: GanTask | None = None
        self.clock = EmaClock(t.ema, samples_per_step) if t.ema else None
        if t.ema:
            # The same architecture, built after the trained networks so their initial
            # weights do not depend on it, and made equal to the generator.
            self.ema_task = build_task(config, source)
            copy_weights(self.ema_task.generator, task.generator)
            self._counter("ema_images")
            self.objects["generator_ema"] = self.ema_task.generator
        self.r1 = LazyR1(t.r1) if t.r1 else None
        if self.r1 is not None:
            if task.r1_key not in data_keys:
                raise TrainerError(
                    f"spec.training.r1: the model regularizes batch key {task.r1_key!r}, which "
                    f"its data does not have ({', '.join(data_keys)}); a custom GanTask sets "
                    "r1_key"
                )
            self._counter("r1_count")
        self.ops = policy_ops(t.augment) if t.augment else ()
        if self.ops:
            require_images(task.data_kind)
            # In the strategy's scope each replica draws its own stream from it.
            self.gen = tf.random.Generator.from_seed(augment_seed(self.seed, 0))
            self.objects["augment_rng"] = self.gen
            task.discriminator = Augmented(task.discriminator, self.ops, self.gen)

    def _counter(self, name: str) -> None:
        self.objects[name] = tf.Variable(0, dtype=tf.int64, trainable=False)

    # ---- in the step -----------------------------------------------------------------------
    def r1_due(self, updates: int) -> tuple[bool, ...]:
        """Host side, before the step: part of the step function's trace key."""
        return self.r1.due(updates) if self.r1 is not None else (False,) * updates

    def r1_term(self, batch: dict[str, tf.Tensor], scale: tf.Tensor | None) -> tf.Tensor:
        assert self.r1 is not None
        return self.r1.weight * r1_penalty(self.task, batch, scale)

    def ema_beta(self) -> tf.Tensor:
        """Host side, before the step: this step's beta (0 without an average)."""
        return tf.constant(self.clock.tick() if self.clock is not None else 0.0, tf.float32)

    def after_step(self, beta: tf.Tensor) -> None:
        """In the step function, in cross-replica context, after the updates."""
        if self.ema_task is not None:
            update_ema(self.ema_task.generator, self.generator, beta)

    def sampling_task(self) -> GanTask:
        """Whose generator samples and quality scores use: the average when there is one."""
        return self.ema_task if self.ema_task is not None else self.task

    # ---- checkpoints -------------------------------------------------------------------------
    def before_save(self) -> None:
        if self.clock is not None:
            self.objects["ema_images"].assign(self.clock.images)
        if self.r1 is not None:
            self.objects["r1_count"].assign(self.r1.count)

    def after_restore(self, same_replicas: bool, global_step: int) -> None:
        if self.clock is not None:
            self.clock.images = int(self.objects["ema_images"].numpy())
        if self.r1 is not None:
            self.r1.count = int(self.objects["r1_count"].numpy())
        if self.ops and not same_replicas:  # as the loop re-seeds its own stream
            self.gen.reset_from_seed(augment_seed(self.seed, 0) + 104729 * global_step)
