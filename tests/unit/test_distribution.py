"""One strategy decision (kubegan_trainer.worker.distribution) for the operator's plan and the
TensorFlow backend; importing it needs no framework."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kubegan_api.sections import Framework, Strategy
from kubegan_trainer.worker.distribution import DDP, MIRRORED, MULTI_WORKER, TPU, decide_strategy

TF, TORCH = Framework.tensorflow, Framework.pytorch


@pytest.mark.parametrize(
    ("framework", "requested", "workers", "tpu", "decided"),
    [
        (TORCH, Strategy.auto, 4, False, DDP),
        (TORCH, Strategy.multi_worker, 1, False, DDP),
        (TF, Strategy.auto, 1, False, MIRRORED),
        (TF, Strategy.auto, 2, False, MULTI_WORKER),
        (TF, Strategy.auto, 0, False, MULTI_WORKER),  # no placement yet: as the planner said
        (TF, Strategy.multi_worker, 1, False, MULTI_WORKER),
        (TF, Strategy.mirrored, 1, False, MIRRORED),
        (TF, Strategy.mirrored, 3, False, MIRRORED),  # refused later, by the API or the trainer
        (TF, Strategy.tpu, 4, True, TPU),
        (TF, Strategy.tpu, 1, False, TPU),  # the trainer then says no TPU is reachable
        (TF, Strategy.auto, 4, True, TPU),  # a slice with strategy auto: the pods' TPU env
    ],
)
def test_the_decision(
    framework: Framework, requested: Strategy, workers: int, tpu: bool, decided: str
) -> None:
    assert decide_strategy(framework, requested, workers, tpu) == decided


def test_the_operator_imports_it_without_tensorflow() -> None:
    code = (
        "import sys, kubegan_trainer.worker.distribution, kubegan_operator.placement.planner; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'torch'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
