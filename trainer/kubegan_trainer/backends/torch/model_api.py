"""The custom model API for `framework: pytorch`: what a model module imports
(docs/custom-models.md)."""

from __future__ import annotations

from kubegan_trainer.backends.torch.models.task import Batch, GanTask, bce_logits, randn
from kubegan_trainer.worker.model_api import API_VERSION, STANDARD, Schedule, TrainingPhase

__all__ = [
    "API_VERSION",
    "STANDARD",
    "Batch",
    "GanTask",
    "Schedule",
    "TrainingPhase",
    "bce_logits",
    "randn",
]
