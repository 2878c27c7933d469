"""The custom model API for `framework: tensorflow`: what a model module imports
(docs/custom-models.md)."""

from __future__ import annotations

from kubegan_trainer.backends.tf.models.task import Batch, GanTask, bce_logits
from kubegan_trainer.worker.model_api import API_VERSION, STANDARD, Schedule, TrainingPhase

__all__ = ["API_VERSION", "STANDARD", "Batch", "GanTask", "Schedule", "TrainingPhase", "bce_logits"]
