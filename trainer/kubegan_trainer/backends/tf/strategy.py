"""Build the tf.distribute strategy that `distribution.decide_strategy` chose for
`spec.strategy` and the worker's environment (the same decision the operator's plan shows):

- auto, one worker          -> MirroredStrategy over the local GPUs (or the CPU)
- auto/multi-worker, >1     -> MultiWorkerMirroredStrategy from TF_CONFIG (NCCL on GPU, RING on CPU)
- mirrored                  -> MirroredStrategy (one worker only)
- tpu, or a TPU slice's env -> TPUStrategy via TPUClusterResolver; one clear line without a TPU

`KUBEGAN_TF_LOGICAL_CPUS=N` splits the CPU into N logical devices so MirroredStrategy
has N replicas without GPUs (tests, demos). Device set-up must run before TensorFlow
creates its context, so `make_strategy` is the first TF call of a run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass

import tensorflow as tf
from kubegan_api.contract import (
    ENV_TF_CONFIG,
    ENV_TF_LOGICAL_CPUS,
)
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.distribution import MIRRORED, MULTI_WORKER, TPU, decide_strategy
from kubegan_trainer.worker.tpu_devices import ENV_TPU_NAME, no_tpu_reason, unreachable_prefix

log = logging.getLogger("kubegan_trainer")


@dataclass(frozen=True)
class StrategyInfo:
    strategy: tf.distribute.Strategy
    kind: str  # "mirrored" | "multi-worker" | "tpu"
    worker_index: int
    num_workers: int
    device_type: str  # "CPU" | "GPU" | "TPU"

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def chief(self) -> bool:
        return self.worker_index == 0


def _logical_cpu_devices() -> list[str] | None:
    raw = os.environ.get(ENV_TF_LOGICAL_CPUS, "")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise TrainerError(f"{ENV_TF_LOGICAL_CPUS}: expected an integer, got {raw!r}") from None
    if n < 1:
        raise TrainerError(f"{ENV_TF_LOGICAL_CPUS}: must be >= 1, got {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    # RuntimeError: already initialised (a second run in one process): keep what exists.
    with contextlib.suppress(RuntimeError):
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    return [d.name for d in tf.config.list_logical_devices("CPU")][:n]


def _gpus() -> list:
    gpus = tf.config.list_physical_devices("GPU")
    for g in gpus:
        # Share the GPU politely with other processes (no up-front grab of all memory).
        with contextlib.suppress(RuntimeError):
            tf.config.experimental.set_memory_growth(g, True)
    return gpus


def _tf_config_workers(env: ClusterEnv) -> int:
    if not env.tf_config:
        return 1
    workers = env.tf_config.get("cluster", {}).get("worker", [])
    return max(1, len(workers))


def make_strategy(config: TrainerConfig, env: ClusterEnv) -> StrategyInfo:
    workers = _tf_config_workers(env)
    on_tpu = env.tpu_worker_id is not None  # the operator sets it on a TPU slice's workers
    kind = decide_strategy(config.framework, config.strategy, workers, on_tpu)
    if kind == TPU:
        return _tpu_strategy(env)
    if kind == MIRRORED and workers > 1:
        raise TrainerError(
            f"spec.strategy: mirrored runs on one worker, but {ENV_TF_CONFIG} lists {workers}; "
            "use auto or multi-worker"
        )
    cpus = _logical_cpu_devices()
    gpus = _gpus()
    device_type = "GPU" if gpus else "CPU"
    if kind == MULTI_WORKER:
        # NCCL on GPUs, RING (gRPC) between CPU workers; TF_CONFIG names the peers.
        impl = (
            tf.distribute.experimental.CommunicationImplementation.NCCL
            if gpus
            else tf.distribute.experimental.CommunicationImplementation.RING
        )
        options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        index = int((env.tf_config or {}).get("task", {}).get("index", 0))
        log.info(
            "strategy: MultiWorkerMirroredStrategy, %d workers, %d replicas in sync (%s), "
            "this is worker %d",
            workers,
            strategy.num_replicas_in_sync,
            impl.name,
            index,
        )
        return StrategyInfo(strategy, MULTI_WORKER, index, workers, device_type)
    if gpus:
        devices = None  # every local GPU
    elif cpus:
        devices = cpus
    else:
        devices = ["/cpu:0"]
    # Several CPU devices: reduce through one device. The default for them would be
    # collective ops, whose instance keys restart with each strategy, so a second run in
    # the same process (tests, notebooks) trips over the first one's cached shapes.
    cross = None if gpus else tf.distribute.ReductionToOneDevice()
    strategy = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross)
    log.info(
        "strategy: MirroredStrategy over %d %s replica(s)",
        strategy.num_replicas_in_sync,
        device_type,
    )
    return StrategyInfo(strategy, MIRRORED, 0, 1, device_type)


def tpu_resolver_args(env: ClusterEnv) -> str:
    """What to hand TPUClusterResolver: `TPU_NAME` when set (a TPU node), else "local"
    (a TPU VM host, as on GKE, where `TPU_WORKER_ID`/`TPU_WORKER_HOSTNAMES` describe the
    slice and the TPU runtime finds its peers from them)."""
    return os.environ.get(ENV_TPU_NAME, "local")


def _tpu_strategy(env: ClusterEnv) -> StrategyInfo:
    hosts = env.tpu_worker_hostnames
    unreachable = unreachable_prefix(env)
    tpu = tpu_resolver_args(env)
    # A local TPU (GKE, TPU VMs) is a device file; libtpu is not started without one.
    reason = no_tpu_reason() if tpu == "local" else None
    if reason:
        raise TrainerError(f"{unreachable}: {reason}")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except (tf.errors.OpError, ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TrainerError(f"{unreachable}: {first[:160]}") from None
    index = env.tpu_worker_id or 0
    log.info(
        "strategy: TPUStrategy, %d cores, worker %d of %d hosts",
        strategy.num_replicas_in_sync,
        index,
        max(1, len(hosts)),
    )
    return StrategyInfo(strategy, TPU, index, max(1, len(hosts)), "TPU")


def describe(info: StrategyInfo) -> str:
    return json.dumps(
        {
            "strategy": info.kind,
            "replicas": info.replicas,
            "workers": info.num_workers,
            "device": info.device_type,
        }
    )
