"""`spec.training.compile` in PyTorch: torch.compile of the generator and the discriminator,
in place (`nn.Module.compile`), so that the modules, their state_dict names (checkpoints, the
export) and their DDP wrappers stay what they are.

torch.compile builds native code when it first runs: on CPU, C++ that inductor compiles with
the system's compiler; on CUDA, Triton kernels whose launchers a C compiler builds. The
trainer images carry no compiler (docs/trainer.md, "Training options"), so a job asking for
compile without one is refused at start in one line, not by a traceback minutes later.
"""

from __future__ import annotations

import os
import shutil

import torch
from torch import nn

from kubegan_trainer.base.errors import TrainerError

# What inductor (C++, on CPU) and Triton (C, on CUDA) look for, besides $CXX and $CC.
CXX = ("g++", "c++", "clang++")
CC = ("gcc", "cc", "clang", *CXX)


def compiler_for(device: torch.device) -> str | None:
    """The compiler torch.compile would use on `device`, or None."""
    env = ("CXX",) if device.type == "cpu" else ("CC", "CXX")
    names = [os.environ[v] for v in env if os.environ.get(v)]
    names += CXX if device.type == "cpu" else CC
    return next((path for n in names if (path := shutil.which(n))), None)


def compile_networks(networks: tuple[nn.Module, ...], device: torch.device) -> None:
    if compiler_for(device) is None:
        language = "C++" if device.type == "cpu" else "C"
        raise TrainerError(
            f"spec.training.compile: torch.compile needs a {language} compiler on {device.type}, "
            "and this image has none (build an image FROM the trainer's with g++ installed, "
            "or set compile: false)"
        )
    for net in networks:
        net.compile()
