"""The PyTorch backend's entry: process launching, rendezvous, one GanTrainer per rank.

`run(env, config)` is what `python -m kubegan_trainer` calls for `framework: pytorch`.
One process per GPU of the worker (NPROC_PER_NODE), or one CPU process; global rank =
NODE_RANK x NPROC_PER_NODE + local rank, world size = NNODES x NPROC_PER_NODE, the same
arithmetic torchrun does, rendezvous over TCP at MASTER_ADDR:MASTER_PORT.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
from datetime import timedelta
from types import FrameType

from kubegan_api.contract import (
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NNODES,
    ENV_NPROC_PER_NODE,
    EXIT_USER_ERROR,
)
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.backends.torch.rendezvous import (
    all_local,
    join_host,
    local_collectives,
    local_store,
    url_host,
    wait_for_store,
)
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.signals import StopFlag
from kubegan_trainer.worker.startup import mark

log = logging.getLogger("kubegan_trainer")


def run(env: ClusterEnv, config: TrainerConfig, hooks=None) -> int:  # type: ignore[no-untyped-def]
    """Train this worker's ranks; `hooks` (driver.Hooks) reach every rank (pickled for the
    ranks of a multi-GPU worker)."""
    nproc = env.nproc_per_node
    if nproc == 1:
        return worker(env, config, local_rank=0, stop=StopFlag().install(), hooks=hooks)
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < nproc:
        raise TrainerError(
            f"{ENV_NPROC_PER_NODE}: {nproc} processes need {nproc} visible GPUs, found "
            f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}"
        )
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_child, args=(env, config, i, hooks), name=f"rank-local-{i}")
        for i in range(nproc)
    ]
    for p in procs:
        p.start()

    def forward(signum: int, _frame: FrameType | None) -> None:
        for p in procs:  # each child checkpoints at its next step boundary
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    for p in procs:
        p.join()
        if p.exitcode and not code:
            code = p.exitcode
            for other in procs:  # a dead peer leaves the rest stuck in collectives
                if other.is_alive():
                    other.terminate()
    return code if code >= 0 else 128 - code


def _rendezvous(env: ClusterEnv, backend: str, rank: int, world: int, timeout: timedelta) -> None:
    """Join the job's process group: on loopback when every rank is on this machine
    (rendezvous.py), else at MASTER_ADDR:MASTER_PORT, which the other workers reach."""
    import torch.distributed as dist

    assert env.master_addr and env.master_port is not None
    local = all_local(env)
    host = join_host(env, rank)
    if rank != 0:  # at the address that answered: a new worker 0's name may be stale
        host = wait_for_store(host, env.master_port, timeout.total_seconds()) or host
    if local:
        local_collectives()
        store = local_store(env, rank, world, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        return
    dist.init_process_group(
        backend,
        init_method=f"tcp://{url_host(host)}:{env.master_port}",
        rank=rank,
        world_size=world,
        timeout=timeout,
    )


def _child(env: ClusterEnv, config: TrainerConfig, local_rank: int, hooks=None) -> None:  # type: ignore[no-untyped-def]
    from kubegan_trainer.worker.lifeline import die_with_parent, leave
    from kubegan_trainer.worker.logs import configure_logging

    die_with_parent()  # a rank must not outlive its worker process
    configure_logging()
    try:
        code = worker(env, config, local_rank, StopFlag().install(), hooks)
    except TrainerError as err:
        print(f"kubegan-trainer: error: {err}", file=sys.stderr, flush=True)
        code = EXIT_USER_ERROR
    leave(code)


def worker(
    env: ClusterEnv, config: TrainerConfig, local_rank: int, stop: StopFlag, hooks=None
) -> int:
    """Train as one rank. Data and models are built before the rendezvous, so input
    errors surface at once instead of after peers time out."""
    import torch
    import torch.distributed as dist

    from kubegan_trainer.backends.torch import rng
    from kubegan_trainer.backends.torch.loop import DistInfo, GanTrainer
    from kubegan_trainer.backends.torch.models import build_task
    from kubegan_trainer.data import build_dataset
    from kubegan_trainer.data.build import shard_plan

    mark("framework")
    nproc = env.nproc_per_node
    rank = env.node_rank * nproc + local_rank
    world = env.world_size
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    shards = shard_plan(config)  # streamed per rank; else the data set is loaded whole
    dataset = shards.head() if shards is not None else build_dataset(config)
    rng.seed_all(config.training.seed)  # identical initial weights on every rank
    task = build_task(config, dataset)
    # Different noise per rank (ranks see different data too); restored from checkpoints.
    rng.seed_all(config.training.seed + 1_000_003 * (rank + 1))
    mark("data")

    backend = "nccl" if cuda else "gloo"
    if world > 1:
        if not env.master_addr or env.master_port is None:
            raise TrainerError(
                f"{ENV_MASTER_ADDR}/{ENV_MASTER_PORT}: required when "
                f"{ENV_NNODES} x {ENV_NPROC_PER_NODE} > 1"
            )
        _rendezvous(env, backend, rank, world, timedelta(minutes=10))
    else:  # a one-rank group keeps ZeRO and the collectives uniform
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mark("rendezvous")
    ctrl = dist.new_group(backend="gloo") if backend == "nccl" and world > 1 else None
    try:
        info = DistInfo(rank, world, local_rank, device, ctrl)
        trainer = GanTrainer(config, env, info, task, dataset, stop, hooks, shards)
        mark("trainer")
        return trainer.fit()
    finally:
        dist.destroy_process_group()
