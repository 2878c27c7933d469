"""Capture and restore every random stream a step touches, for exact resume.

Captured as tensors and plain Python data only, so a checkpoint holding it loads with
`torch.load(weights_only=True)` (numpy's state tuple holds an ndarray, which would not).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "name": str(name),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _set_numpy_state(state: dict[str, Any]) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (state["name"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])
    )


def capture(device: torch.device) -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": _numpy_state(),
        "python": {"version": int(version), "state": list(internal), "gauss": gauss},
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    _set_numpy_state(state["numpy"])
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
