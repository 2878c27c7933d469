"""The training options beside the model (`spec.training`: ema, r1, augment and each
network's schedule) for one rank's GanTrainer: what the loop asks of them at each update and
step, and their part of the checkpoint. Each option's definition is its worker/ module."""

from __future__ import annotations

from typing import Any

import torch
from kubegan_api.sections import TrainerConfig
from kubegan_api.training_options import LrSchedule
from torch import Tensor, nn
from torch.amp import GradScaler

from kubegan_trainer.backends.torch.augment import Augmented
from kubegan_trainer.backends.torch.ema import GeneratorEma
from kubegan_trainer.backends.torch.models.task import Batch, GanTask
from kubegan_trainer.backends.torch.optim import ScheduledLr
from kubegan_trainer.backends.torch.regularize import r1_penalty
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.augment import augment_seed, policy_ops, require_images
from kubegan_trainer.worker.ema import EmaClock
from kubegan_trainer.worker.phases import Network
from kubegan_trainer.worker.regularize import LazyR1
from kubegan_trainer.worker.schedules import run_updates

STATE_KEY = "training_options"


class Stabilizers:
    def __init__(
        self,
        config: TrainerConfig,
        task: GanTask,
        optimizers: dict[Network, torch.optim.Optimizer],
        rank: int,
        samples_per_step: int,
        steps_per_epoch: int,
        data_keys: tuple[str, ...],
    ) -> None:
        t, sched = config.training, task.schedule
        self.task, self.seed, self.rank = task, t.seed, rank
        self.compiled = t.compile
        self.lr = {
            net: ScheduledLr(
                opt, getattr(t, net), run_updates(t.epochs, steps_per_epoch, sched.count(net))
            )
            for net, opt in optimizers.items()
        }
        self.ema = (
            GeneratorEma(task.generator, EmaClock(t.ema, samples_per_step)) if t.ema else None
        )
        self.r1 = LazyR1(t.r1) if t.r1 else None
        if self.r1 is not None and task.r1_key not in data_keys:
            raise TrainerError(
                f"spec.training.r1: the model regularizes batch key {task.r1_key!r}, which its "
                f"data does not have ({', '.join(data_keys)}); a custom GanTask sets r1_key"
            )
        self.ops = policy_ops(t.augment) if t.augment else ()
        if self.ops:
            require_images(task.data_kind)
        self.gen = torch.Generator().manual_seed(augment_seed(self.seed, rank))
        # Set: a checkpoint without this state cannot continue this job exactly.
        self.required = bool(
            self.ema or self.r1 or self.ops
            or any(s.spec.schedule != LrSchedule.constant for s in self.lr.values())
        )  # fmt: skip

    # ---- in the step -------------------------------------------------------------------------
    def seen_by_d(self, d: nn.Module) -> nn.Module:
        """The discriminator as the losses call it: augmented when DiffAugment is on."""
        return Augmented(d, self.ops, self.gen) if self.ops else d

    def r1_due(self, updates: int) -> tuple[bool, ...]:
        return self.r1.due(updates) if self.r1 is not None else (False,) * updates

    def r1_term(self, d: nn.Module, batch: Batch, scaler: GradScaler) -> Tensor:
        assert self.r1 is not None
        return self.r1.weight * r1_penalty(self.task, d, batch, scaler, self.compiled)

    def before_update(self, network: Network) -> None:
        self.lr[network].before_update()

    def after_step(self, generator: nn.Module) -> None:
        if self.ema is not None:
            self.ema.update(generator)

    def sampling_generator(self, generator: nn.Module) -> nn.Module:
        """What samples, quality scores and the export use: the average when there is one."""
        return self.ema.module if self.ema is not None else generator

    # ---- checkpoints ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The shared part (every rank holds the same): rank 0 writes it."""
        counters = {
            "lr_updates": {net: s.updates for net, s in self.lr.items()},
            "r1_count": self.r1.count if self.r1 is not None else 0,
        }
        extra = self.ema.state() if self.ema is not None else {}
        return {STATE_KEY: counters, **extra}

    def load(self, payload: dict[str, Any]) -> None:
        """KeyError when the checkpoint lacks what this job's options need."""
        counters = payload[STATE_KEY] if self.required else payload.get(STATE_KEY, {})
        for net, s in self.lr.items():
            s.updates = int(counters.get("lr_updates", {}).get(net, 0))
        if self.r1 is not None:
            self.r1.count = int(counters["r1_count"])
        if self.ema is not None:
            self.ema.load(payload)

    def rank_state(self) -> dict[str, Any]:
        """This rank's own: its augmentation stream."""
        return {"augment_rng": self.gen.get_state()} if self.ops else {}

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        if not self.ops:
            return
        if "augment_rng" not in mine:
            raise TrainerError(
                "spec.training.augment: the checkpoint was written without augmentation, so "
                "this job cannot continue it exactly; start it afresh in a new checkpoint place"
            )
        self.gen.set_state(mine["augment_rng"])

    def reseed(self, global_step: int) -> None:
        """After a change of world size, as the other streams are (loop._apply_payload)."""
        self.gen.manual_seed(augment_seed(self.seed, self.rank) + 104729 * global_step)
