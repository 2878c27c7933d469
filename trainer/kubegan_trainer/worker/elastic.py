"""The same training at another size: what changes when an elastic job resumes with a
different number of replicas, decided without a framework.

- The global batch (batchSizePerReplica x replicas x gradientAccumulationSteps) is the
  job's at its spec size and never changes: a new size gets the accumulation that keeps it
  (kubegan_api.elastic), and a size that cannot is never started.
- The launcher (the operator, or `kubegan run --workers N`) hands the effective
  accumulation to every worker in ENV_ACCUMULATION_STEPS; the trainer trains with it
  (`with_accumulation`) instead of the spec's value.
- A checkpoint records its data position as a global sample offset (samples of the epoch
  already trained) and the global batch it was trained with (`data_position`); a resume
  maps the offset back to an optimizer step of the current global batch and refuses one
  that does not fall on a step boundary (`resume_step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubegan_api.contract import ENV_ACCUMULATION_STEPS
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.base.errors import TrainerError

GLOBAL_BATCH_KEY = "global_batch"  # checkpoint: samples per optimizer step
SAMPLE_OFFSET_KEY = "sample_offset"  # checkpoint: samples of the epoch already trained


def with_accumulation(config: TrainerConfig, environ: Mapping[str, str]) -> TrainerConfig:
    """`config` training with the launcher's effective accumulation (ENV_ACCUMULATION_STEPS),
    or as it is when the variable is unset."""
    raw = environ.get(ENV_ACCUMULATION_STEPS, "").strip()
    if not raw:
        return config
    if not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
        raise TrainerError(f"{ENV_ACCUMULATION_STEPS}: {raw!r} is not a positive integer")
    training = config.training.model_copy(update={"gradient_accumulation_steps": int(raw)})
    return config.model_copy(update={"training": training})


@dataclass(frozen=True)
class SavedPosition:
    """What a checkpoint says about its data position; None: written before elastic
    resume existed (its step counts optimizer steps of its own, unrecorded, global batch)."""

    global_batch: int | None
    sample_offset: int | None


def data_position(step: int, total: int) -> dict[str, int]:
    """The checkpoint's record of where the epoch stands, `step` steps of `total` samples in."""
    return {GLOBAL_BATCH_KEY: total, SAMPLE_OFFSET_KEY: step * total}


def saved_position(record: Mapping[str, Any]) -> SavedPosition:
    def count(key: str) -> int | None:
        value = record.get(key)
        return value if type(value) is int and value >= 0 else None

    return SavedPosition(count(GLOBAL_BATCH_KEY), count(SAMPLE_OFFSET_KEY))


def resume_step(where: str, step: int, saved: SavedPosition, total: int, resized: bool) -> int:
    """The optimizer step of the current global batch `total` to resume the epoch at.

    A checkpoint without a recorded position resumes only at its own size; one trained
    with another global batch is refused (the same training needs the same batch)."""
    if saved.global_batch is None or saved.sample_offset is None:
        if resized:
            raise TrainerError(
                f"checkpoint {where} predates elastic resume (no global sample offset); "
                "resume it once at the size that wrote it"
            )
        return step
    if saved.global_batch != total:
        raise TrainerError(
            f"checkpoint {where} was trained with a global batch of {saved.global_batch}, "
            f"this run's is {total}: resume with the gradient accumulation that keeps it"
        )
    if saved.sample_offset % total:
        raise TrainerError(
            f"checkpoint {where}: sample offset {saved.sample_offset} is not a whole number "
            f"of global batches of {total}"
        )
    return saved.sample_offset // total
