"""Which distribution strategy a job trains with, decided once for both sides: the operator's
planner (the plan's `strategy`, shown by `kubegan plan` and on every worker pod) and the
TensorFlow backend (the tf.distribute strategy it builds) call the same function.

Pure and framework-free: the operator imports it without tensorflow.
"""

from __future__ import annotations

from kubegan_api.sections import Framework, Strategy

DDP = "ddp"  # PyTorch DistributedDataParallel, whatever spec.strategy says
MIRRORED = "mirrored"  # one worker, its local devices
MULTI_WORKER = "multi-worker"  # MultiWorkerMirroredStrategy over TF_CONFIG's workers
TPU = "tpu"  # TPUStrategy on a slice


def decide_strategy(framework: Framework, requested: Strategy, workers: int, tpu: bool) -> str:
    """The strategy for a job of `framework` asking for `requested`, with `workers` workers
    (0 while no placement is found), on a TPU slice or not. `mirrored` is kept as asked even
    for several workers: the API refuses that shape, and the trainer says so if it meets it.
    """
    if framework == Framework.pytorch:
        return DDP
    if tpu or requested == Strategy.tpu:
        return TPU
    if requested != Strategy.auto:
        return requested.value
    return MIRRORED if workers == 1 else MULTI_WORKER
