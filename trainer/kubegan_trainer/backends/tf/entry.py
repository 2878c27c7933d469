"""Set up and run a TensorFlow training job in this worker process."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from kubegan_api.sections import DataSource, MixedPrecision, ModelName, TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.signals import StopFlag
from kubegan_trainer.worker.startup import mark

log = logging.getLogger("kubegan_trainer")


def build_trainer(config: TrainerConfig, env: ClusterEnv, stop: StopFlag, hooks=None):  # type: ignore[no-untyped-def]
    """Strategy first (it must configure devices before TF starts), then policy, data,
    models. Returns the GanTrainer."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TF's Python logger repeats every collective it builds at INFO, and its checkpoint saver
    # logs each save through absl's ("Sharding callback duration"): keep worker logs readable.
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from kubegan_trainer.backends.tf.lean_import import import_tensorflow

    import_tensorflow()
    from kubegan_trainer.backends.tf.threads import size_thread_pools

    size_thread_pools(os.environ)
    from kubegan_trainer.backends.tf.data import StreamSource, is_tfrecord_path, make_source
    from kubegan_trainer.backends.tf.loop import GanTrainer
    from kubegan_trainer.backends.tf.precision import set_policy
    from kubegan_trainer.backends.tf.strategy import make_strategy
    from kubegan_trainer.data.build import shard_plan

    mark("framework")
    info = make_strategy(config, env)  # the workers' cluster: TensorFlow's rendezvous
    mark("rendezvous")
    if threading.current_thread() is threading.main_thread():
        stop.install()  # again: multi-worker set-up may have replaced the SIGTERM handler
    mode = config.training.mixed_precision
    if mode == MixedPrecision.fp16 and info.device_type == "TPU":
        raise TrainerError("spec.training.mixedPrecision: TPUs compute in bf16; use bf16, not fp16")
    set_policy(mode)
    data = config.data
    # A folder of TFRecords: TensorFlow's own reader, FILE-sharded. Else streamed per worker
    # (a bucket, a folder of HDF5 shards) or loaded whole.
    if data.source == DataSource.files and not data.uri and is_tfrecord_path(data.path):
        if config.model.name not in (ModelName.gan3d, ModelName.custom):
            raise TrainerError("spec.data.path: TFRecord shards hold showers; use model gan3d")
        source = make_source(Path(data.path), config.training.seed, info.num_workers)
    elif (shards := shard_plan(config)) is not None:
        source = StreamSource(shards, info.num_workers)
    else:
        from kubegan_trainer.data import build_dataset

        source = make_source(build_dataset(config), config.training.seed, info.num_workers)
    mark("data")
    trainer = GanTrainer(config, env, info, source, stop, hooks)
    mark("trainer")
    return trainer


def run(env: ClusterEnv, config: TrainerConfig, stop: StopFlag | None = None, hooks=None) -> int:  # type: ignore[no-untyped-def]
    """The backend entry (`python -m kubegan_trainer` calls it): returns the process exit
    code, 0 or EXIT_INTERRUPTED after a stop with a checkpoint. `hooks`: driver.Hooks."""
    stop = stop or StopFlag().install()
    return build_trainer(config, env, stop, hooks).fit()
