"""The PyTorch generator, exported for programs without kubegan: `generator.safetensors`
(the generator's state dict under its own parameter names: data only, loadable without
running any code) and `generator.json` (worker/export_spec.py: model options, data shape,
inputs, output), from which the architecture is rebuilt; docs/trainer.md does that for
DCGAN in a page of plain PyTorch.

Why not a program (TorchScript, torch.export) instead: loading one runs code from the
artifact, exporting one costs seconds of tracing at the end of every run, and the weights
plus their options are what a researcher carries into their own code anyway.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from kubegan_api.sections import TrainerConfig
from torch import nn

from kubegan_trainer.backends.torch.models import GanTask
from kubegan_trainer.backends.torch.payload import load_payload
from kubegan_trainer.storage.store import CheckpointRef
from kubegan_trainer.worker.export_spec import SPEC_FILE, generator_spec

WEIGHTS_FILE = "generator.safetensors"
EXAMPLE_BATCH = 2


class Trained(Protocol):
    """What the export reads of the trainer (backends/torch/loop.py GanTrainer)."""

    G: nn.Module
    task: GanTask
    config: TrainerConfig
    dataset: Any  # its data_shape

    def real_examples(self, n: int) -> dict[str, np.ndarray]: ...


def export_generator(
    trainer: Trained, ref: CheckpointRef, state: Path, out: Path
) -> dict[str, Path]:
    """Write the generator of checkpoint `ref` (its payload file `state`) into `out`; its
    files by name."""
    from safetensors.torch import save_file

    payload = load_payload(state)
    g = copy.deepcopy(trainer.G).to("cpu", memory_format=torch.contiguous_format)
    # With spec.training.ema, the generator's moving average is the one to use.
    g.load_state_dict(payload["generator_ema" if trainer.config.training.ema else "generator"])
    g.eval()
    state = {k: v.detach().cpu().contiguous() for k, v in g.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"checkpoint": ref.name})
    real = trainer.real_examples(EXAMPLE_BATCH)
    batch = {k: torch.from_numpy(v) for k, v in real.items()}
    inputs = trainer.task.generator_inputs(batch, rng=torch.Generator().manual_seed(0))
    with torch.no_grad():
        images = trainer.task.generate(g, inputs)
    spec = generator_spec(
        framework="pytorch",
        config=trainer.config,
        shape=trainer.dataset.data_shape,
        ref=ref,
        inputs={
            k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in inputs.items()
        },
        output=(tuple(images.shape), "float32"),
        layout="channels_first",
        files={"weights": WEIGHTS_FILE},
    )
    (out / SPEC_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
    return {WEIGHTS_FILE: out / WEIGHTS_FILE, SPEC_FILE: out / SPEC_FILE}
