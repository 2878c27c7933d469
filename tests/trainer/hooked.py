"""`python -m tests.trainer.hooked [--sigterm-at R:S] [--trace DIR] [--weights DIR]`: the
trainer's own entry point (`kubegan_trainer.__main__.main`) with test hooks, for workers that
tests start as real processes. The hooks live here, in the tests, which the images do not
contain: the shipped trainer reads no test variables and injects no faults.

- `--sigterm-at R:S`: rank (PyTorch) or worker (TensorFlow) R sends itself SIGTERM during
  global step S, just before that step's stop flag is read, so a test stops a run through
  the real signal path and the checkpoint lands at step S.
- `--trace DIR`: each process appends one JSON line per step to DIR/worker-<R>.jsonl with the
  dataset indices it trained on (the resume tests prove no batch is repeated or skipped).
- `--weights DIR`: each process writes its final weights to DIR/worker-<R>.npz when training
  ends, so tests can compare workers and runs (TensorFlow: also the trainable ones alone).
- `--no-torch`: `import torch` fails in the worker, as in the TensorFlow image, which has no
  torch. The tests' venv has both frameworks, and tensorboardX imports torch when it can:
  seconds of every TensorFlow chief's first epoch end, for nothing the image does.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubegan_trainer.__main__ import main as trainer_main
from kubegan_trainer.worker.driver import Hooks


def command(
    *,
    sigterm_at: str | None = None,
    trace: Path | None = None,
    weights: Path | None = None,
    no_torch: bool = False,
) -> list[str]:
    """The command line that starts a worker with these hooks."""
    cmd = [sys.executable, "-m", "tests.trainer.hooked"]
    for flag, value in (("--sigterm-at", sigterm_at), ("--trace", trace), ("--weights", weights)):
        if value is not None:
            cmd += [flag, str(value)]
    return [*cmd, "--no-torch"] if no_torch else cmd


@dataclass
class WorkerHooks:
    """Picklable (a multi-GPU worker hands them to its ranks)."""

    sigterm_at: tuple[int, int] | None = None  # (rank, global step)
    trace: Path | None = None
    weights: Path | None = None

    def hooks(self) -> Hooks:
        return Hooks(
            on_step=self.on_step if self.trace else None,
            before_flags=self.before_flags if self.sigterm_at else None,
            on_finish=self.on_finish if self.weights else None,
        )

    def before_flags(self, backend: Any, global_step: int) -> None:
        if self.sigterm_at is None:
            return
        rank, step = self.sigterm_at
        if backend.rank == rank and global_step >= step:
            self.sigterm_at = None  # once
            os.kill(os.getpid(), signal.SIGTERM)

    def on_step(self, backend: Any, epoch0: int, steps_done: int, info: dict[str, Any]) -> None:
        if self.trace is None or info["index"] is None:
            return
        index = sorted(int(i) for i in info["index"])
        line = {"epoch": epoch0, "step": steps_done - 1, "index": index}
        path = self.trace / f"worker-{backend.rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def on_finish(self, backend: Any) -> None:
        if self.weights is not None:
            self.weights.mkdir(parents=True, exist_ok=True)
            arrays = {**backend.weights(), **trainable_weights(backend)}
            np.savez(self.weights / f"worker-{backend.rank}.npz", **arrays)


def trainable_weights(backend: Any) -> dict[str, np.ndarray]:
    """TensorFlow: the trainable weights alone, as "<net>_trainable" (its `weights()` also
    holds BatchNorm moving statistics, which training-mode outputs never read and which
    an elastic run updates once per micro-batch). PyTorch's `weights()` are parameters only."""
    nets = {"generator": getattr(backend, "G", None), "discriminator": getattr(backend, "D", None)}
    return {
        f"{name}_trainable": np.concatenate(
            [np.asarray(v.numpy(), np.float64).ravel() for v in net.trainable_variables]
        )
        for name, net in nets.items()
        if hasattr(net, "trainable_variables")
    }


class NoTorch(importlib.abc.MetaPathFinder):
    """Finds no torch, as if it were not installed (not a None in sys.modules, which
    libraries that look there for torch arrays would trip over)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def parse(argv: Sequence[str] | None = None) -> WorkerHooks:
    p = argparse.ArgumentParser(prog="tests.trainer.hooked")
    p.add_argument("--sigterm-at", metavar="R:S")
    p.add_argument("--trace", type=Path)
    p.add_argument("--weights", type=Path)
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    if args.no_torch:
        assert "torch" not in sys.modules, "torch was imported before --no-torch took effect"
        sys.meta_path.insert(0, NoTorch())
    sigterm = None
    if args.sigterm_at:
        rank, _, step = args.sigterm_at.partition(":")
        sigterm = (int(rank), int(step))
    return WorkerHooks(sigterm, args.trace, args.weights)


if __name__ == "__main__":
    sys.exit(trainer_main(hooks=parse().hooks()))
