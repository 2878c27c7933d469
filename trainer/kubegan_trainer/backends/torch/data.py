"""One rank's batches for the PyTorch loop: its part of each global batch of the in-memory
data set's epoch order (data/order.py, the same for every number of ranks), or the shards
this rank is dealt when the data set is streamed.

Each optimizer step is k = gradientAccumulationSteps micro-batches of batchSizePerReplica
examples, moved to the rank's device (`to_device`, which also applies the loop's memory
format); every step also yields the examples' dataset indices (tests prove nothing is
repeated or skipped with them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from kubegan_api.sections import TrainerConfig
from torch import Tensor
from torch.utils.data.distributed import DistributedSampler

from kubegan_trainer.backends.torch.models import Batch
from kubegan_trainer.data import Dataset
from kubegan_trainer.data.order import epoch_order, replica_part, step_indices
from kubegan_trainer.data.stream import ShardPlan
from kubegan_trainer.worker import driver

Step = tuple[list[Batch], Tensor]  # the micro-batches of one step, the examples' indices


class RankBatches:
    def __init__(
        self,
        config: TrainerConfig,
        dataset: Dataset,
        shards: ShardPlan | None,
        rank: int,
        world: int,
        device: torch.device,
        to_device: Callable[[Tensor], Tensor],
    ) -> None:
        """This rank's share of every epoch, the steps it makes, and the data set's arrays as
        tensors (pinned for a GPU). Streamed shards: the steps every rank can make whatever
        shards it is dealt (ShardPlan.events_per_rank)."""
        t = config.training
        self.config, self.shards, self.rank, self.world = config, shards, rank, world
        self.to_device = to_device
        self.k = t.gradient_accumulation_steps
        self.batch = t.batch_size_per_replica
        self.samples_per_step = self.batch * self.k * world
        self.seed = t.seed
        # An epoch resumed from a checkpoint of an older trainer, which dealt examples
        # with a DistributedSampler: finished in that order (set by the loop's resume).
        self.legacy_epoch: int | None = None
        if shards is not None:
            n = shards.events_per_rank(world) * world
            self.steps_per_epoch = driver.steps_per_epoch(config, n, world)
            return
        self.n = n = len(dataset)
        self.steps_per_epoch = driver.steps_per_epoch(config, n, world)
        pin = device.type == "cuda"
        self.arrays = {
            k: (torch.from_numpy(v).pin_memory() if pin else torch.from_numpy(v))
            for k, v in dataset.arrays.items()
        }

    def batch_at(self, idx: Tensor) -> Batch:
        """The in-memory examples at `idx`, on the device."""
        return {k: self.to_device(v[idx]) for k, v in self.arrays.items()}

    def epoch(self, epoch0: int, first_step: int) -> Iterator[Step]:
        """The steps of epoch `epoch0` (0-based) from `first_step` on."""
        if self.shards is not None:
            yield from self._streamed(epoch0, first_step)
            return
        b, legacy = self.batch, epoch0 == self.legacy_epoch
        order = self._legacy_order(epoch0) if legacy else epoch_order(self.n, self.seed, epoch0)
        for step in range(first_step, self.steps_per_epoch):
            if legacy:
                mine = order[step * b * self.k : (step + 1) * b * self.k]
            else:  # this rank's contiguous part of the step's global batch
                both = step_indices(order, step, self.samples_per_step)
                mine = replica_part(both, self.rank, self.world)
            chunk = torch.from_numpy(mine.astype(np.int64))
            yield [self.batch_at(chunk[i * b : (i + 1) * b]) for i in range(self.k)], chunk

    def _legacy_order(self, epoch0: int) -> np.ndarray:
        """This rank's examples of the epoch as an older trainer dealt them."""
        sampler = DistributedSampler(
            range(self.n),
            num_replicas=self.world,
            rank=self.rank,
            shuffle=True,
            seed=self.seed,
            drop_last=True,
        )
        sampler.set_epoch(epoch0)
        return np.asarray(list(iter(sampler)), dtype=np.int64)

    def _streamed(self, epoch0: int, first_step: int) -> Iterator[Step]:
        """This rank's batches from its own shards, read ahead a bounded number of them."""
        assert self.shards is not None
        b, per_step = self.batch, self.batch * self.k
        for arrays in self.shards.rank_batches(
            self.rank, self.world, epoch0, per_step, first_step, self.steps_per_epoch
        ):
            index = torch.from_numpy(arrays.pop("index"))
            t = {k: torch.from_numpy(v) for k, v in arrays.items()}
            micro = [
                {k: self.to_device(v[i * b : (i + 1) * b]) for k, v in t.items()}
                for i in range(self.k)
            ]
            yield micro, index
