"""A GAN's training algorithm as data: which network each optimizer update trains, with
which part of the loss, how often, and whether it draws fresh generator inputs.

Each model declares its `Schedule` once here; the PyTorch and TensorFlow backends both
execute it, so a model trains the same algorithm whichever framework runs it. Per
optimizer step (k micro-batches of one global batch):

    inputs = generator inputs for the batch
    fakes  = G(inputs), made once for all D phases (in inference mode if the schedule says)
    for phase in schedule.phases:
        repeat phase.repeats times:
            if phase.fresh_inputs: draw new generator inputs
            one optimizer update of phase.network on task.<phase.loss>(...)

A phase's `loss` names the task method that scores it, so a model splits its loss into
parts (3DGAN's D sees a real batch and a fake batch as two updates) without the loops
knowing any model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Network = Literal["discriminator", "generator"]


@dataclass(frozen=True)
class TrainingPhase:
    network: Network
    loss: str  # the task method: d_loss, d_loss_real, d_loss_fake, g_loss
    repeats: int = 1  # optimizer updates in a row
    fresh_inputs: bool = False  # new generator inputs (noise) for every update
    sees_real: bool = True  # D phases: the loss scores real data (R1 regularizes it there)


@dataclass(frozen=True)
class Schedule:
    phases: tuple[TrainingPhase, ...]
    d_fakes_training: bool = True  # generator in training mode when it makes D's fakes

    def updates(self) -> list[str]:
        """Every optimizer update of one step, in order ("discriminator:d_loss_real", ...)."""
        return [f"{p.network}:{p.loss}" for p in self.phases for _ in range(p.repeats)]

    def count(self, network: Network) -> int:
        return sum(p.repeats for p in self.phases if p.network == network)

    def real_d_updates(self) -> int:
        """Discriminator updates of one step that score real data (where R1 applies)."""
        return sum(p.repeats for p in self.phases if p.network == "discriminator" and p.sees_real)


# DCGAN, AC-GAN, pix2pix, custom models: one D update on real + fake, one G update.
STANDARD = Schedule(
    (TrainingPhase("discriminator", "d_loss"), TrainingPhase("generator", "g_loss"))
)

# The CERN 3DGAN (svalleco/3Dgan, recardoso/ISC_HPC_3DGAN ganV2.py): D on a real batch,
# D on a fake batch made by the generator in inference mode, then two G updates, each
# with fresh noise.
GAN3D = Schedule(
    (
        TrainingPhase("discriminator", "d_loss_real"),
        TrainingPhase("discriminator", "d_loss_fake", sees_real=False),
        TrainingPhase("generator", "g_loss", repeats=2, fresh_inputs=True),
    ),
    d_fakes_training=False,
)
