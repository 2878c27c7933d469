"""Environment-driven hooks for multi-process tests (no effect unless the variables are set).

- KUBEGAN_TF_BATCH_TRACE=DIR: each worker appends one JSON line per step to
  DIR/worker-<i>.jsonl with the dataset indices its replicas trained on, which is how
  the resume tests prove that no batch is repeated or skipped.
- KUBEGAN_TF_SIGTERM_AT=W:S: worker W sends itself SIGTERM after global step S, so a
  test stops a run mid-epoch through the real signal path at a deterministic point.
- KUBEGAN_TF_DUMP_WEIGHTS=DIR: each worker writes its final weights to DIR/worker-<i>.npz.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np

TRACE_ENV = "KUBEGAN_TF_BATCH_TRACE"
SIGTERM_ENV = "KUBEGAN_TF_SIGTERM_AT"


class BatchTrace:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_env(cls, worker: int) -> BatchTrace | None:
        root = os.environ.get(TRACE_ENV)
        return cls(Path(root) / f"worker-{worker}.jsonl") if root else None

    def record(self, epoch0: int, step: int, index: np.ndarray) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(
                json.dumps({"epoch": epoch0, "step": step, "index": sorted(int(i) for i in index)})
                + "\n"
            )


class SelfStop:
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step
        self.fired = False

    @classmethod
    def from_env(cls, worker: int) -> SelfStop | None:
        raw = os.environ.get(SIGTERM_ENV, "")
        if not raw:
            return None
        who, _, step = raw.partition(":")
        return cls(int(step)) if int(who) == worker else None

    def maybe_fire(self, global_step: int) -> None:
        if not self.fired and global_step >= self.at_step:
            self.fired = True
            os.kill(os.getpid(), signal.SIGTERM)


WEIGHTS_ENV = "KUBEGAN_TF_DUMP_WEIGHTS"


def dump_weights_if_asked(worker: int, generator: object, discriminator: object) -> None:
    """KUBEGAN_TF_DUMP_WEIGHTS=DIR: write DIR/worker-<i>.npz with every weight of both
    networks when the run ends, so tests can compare workers and runs."""
    root = os.environ.get(WEIGHTS_ENV)
    if not root:
        return
    Path(root).mkdir(parents=True, exist_ok=True)

    def flat(model: object) -> np.ndarray:
        return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in model.weights])  # type: ignore[attr-defined]

    np.savez(
        Path(root) / f"worker-{worker}.npz",
        generator=flat(generator),
        discriminator=flat(discriminator),
    )
