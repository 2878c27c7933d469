"""Environment hooks for multi-process tests, the same in every backend (no effect unless
the variables are set; the driver calls them).

- KUBEGAN_TEST_SIGTERM_AT=R:S: rank (PyTorch) or worker (TensorFlow) R sends itself
  SIGTERM during global step S, just before that step's stop flag is read, so a test
  stops a run through the real signal path and the checkpoint lands at step S.
- KUBEGAN_TEST_BATCH_TRACE=DIR: each process appends one JSON line per step to
  DIR/worker-<R>.jsonl with the dataset indices it trained on, which is how the resume
  tests prove that no batch is repeated or skipped.
- KUBEGAN_TEST_DUMP_WEIGHTS=DIR: each process writes its final weights to
  DIR/worker-<R>.npz when training ends, so tests can compare workers and runs.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SIGTERM_ENV = "KUBEGAN_TEST_SIGTERM_AT"
TRACE_ENV = "KUBEGAN_TEST_BATCH_TRACE"
WEIGHTS_ENV = "KUBEGAN_TEST_DUMP_WEIGHTS"


@dataclass
class EnvHooks:
    rank: int
    sigterm_at: int | None = None
    trace: Path | None = None
    weights: Path | None = None

    @classmethod
    def from_env(cls, rank: int) -> EnvHooks:
        hooks = cls(rank)
        who, _, step = os.environ.get(SIGTERM_ENV, "").partition(":")
        if step and int(who) == rank:
            hooks.sigterm_at = int(step)
        if root := os.environ.get(TRACE_ENV):
            hooks.trace = Path(root) / f"worker-{rank}.jsonl"
            hooks.trace.parent.mkdir(parents=True, exist_ok=True)
        if root := os.environ.get(WEIGHTS_ENV):
            hooks.weights = Path(root) / f"worker-{rank}.npz"
        return hooks

    def before_flags(self, global_step: int) -> None:
        if self.sigterm_at is not None and global_step >= self.sigterm_at:
            self.sigterm_at = None
            os.kill(os.getpid(), signal.SIGTERM)

    def after_step(self, epoch0: int, step: int, index: np.ndarray | None) -> None:
        if self.trace is None or index is None:
            return
        line = {"epoch": epoch0, "step": step, "index": sorted(int(i) for i in index)}
        with self.trace.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def finished(self, backend: Any) -> None:
        if self.weights is not None:
            self.weights.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.weights, **backend.weights())
