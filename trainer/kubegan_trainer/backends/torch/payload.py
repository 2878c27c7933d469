"""Reading a checkpoint's `state.pt` as data, never as code (DESIGN §5).

`torch.load(weights_only=True)` unpickles only tensors, containers and plain scalars;
anything else in the file (a `__reduce__` that would run a command, a numpy array, a
custom class) makes the load fail before the object is built, and the checkpoint is
refused with one line naming the file.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from kubegan_trainer.base.errors import TrainerError


def load_payload(path: Path) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():
            # The restricted unpickler warns about protocols it may not support; the
            # outcome (loaded or refused) is what the user needs to see, once.
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        text = str(err)
        detail = next((ln.strip() for ln in text.splitlines() if "unsupported" in ln.lower()), "")
        if "GLOBAL" in detail:  # the file names a function or class to call while loading
            raise TrainerError(
                f"checkpoint {path} holds more than tensors and plain data ({detail[:160]}); "
                "refused, since loading it could run code"
            ) from None
        first = detail or (text.strip().splitlines() or [""])[0]
        raise TrainerError(
            f"checkpoint {path} is unreadable (not tensors and plain data: {first[:160]})"
        ) from None
    except Exception as err:  # zip, IO and format errors alike
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise TrainerError(
            f"checkpoint {path} is unreadable ({type(err).__name__}: {first})"
        ) from None
    if not isinstance(payload, dict):
        raise TrainerError(f"checkpoint {path} is unreadable (not a kubegan checkpoint)")
    return payload
