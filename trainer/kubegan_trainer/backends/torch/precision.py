"""Mixed precision: autocast contexts and the single GradScaler shared by G and D."""

from __future__ import annotations

import contextlib

import torch
from kubegan_api.sections import MixedPrecision

DTYPES = {MixedPrecision.fp16: torch.float16, MixedPrecision.bf16: torch.bfloat16}


def autocast(mode: MixedPrecision, device: torch.device) -> contextlib.AbstractContextManager:
    if mode == MixedPrecision.none:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[mode])


def make_scaler(mode: MixedPrecision, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling is for fp16 only (bf16 has fp32's range). One scaler serves both
    optimizers: `step` per optimizer, `update` once per iteration."""
    return torch.amp.GradScaler(device.type, enabled=mode == MixedPrecision.fp16)
