"""Custom model factories that break the model API, one way each (test_custom_model_api.py):
each must be refused with one line naming what is wrong, never a traceback."""

from __future__ import annotations

from typing import Any

from kubegan_examples.tiny_gan import TinyGan, build
from kubegan_trainer.worker.model_api import Schedule, TrainingPhase
from torch import nn


def raises_at_build(options: dict[str, Any]) -> TinyGan:
    raise ValueError("no such layer size: -3\nsecond line of the message")


def no_api_version(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.api_version = None  # type: ignore[assignment]
    return task


def future_api_version(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.api_version = 2
    return task


def no_phases(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.schedule = Schedule(())
    return task


def no_generator_phase(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.schedule = Schedule((TrainingPhase("discriminator", "d_loss"),))
    return task


def unknown_loss(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.schedule = Schedule(
        (TrainingPhase("discriminator", "d_loss"), TrainingPhase("generator", "g_loss_v2"))
    )
    return task


def schedule_is_a_list(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.schedule = ["d_loss", "g_loss"]  # type: ignore[assignment]
    return task


def generator_not_a_module(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.generator = lambda z: z  # type: ignore[assignment]
    return task


def pair_of_wrong_types(options: dict[str, Any]) -> tuple[nn.Module, str]:
    return nn.Linear(2, 2), "discriminator"


def quality_without_primary(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.quality_primary = "mean_image_gap"  # type: ignore[assignment]
    return task


def wrong_data_kind(options: dict[str, Any]) -> TinyGan:
    task = build(options)
    task.data_kind = "paired"
    return task
