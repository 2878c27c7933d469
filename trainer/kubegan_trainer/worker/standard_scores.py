"""spec.quality on rank 0: FID and KID (inception_scores.py) every `everyEpochs` epochs and at
the last one, on `samples` generated images against as many real ones, added to the epoch's
quality scores (metrics.jsonl, TensorBoard, MLflow, the Prometheus gauge) as `fid` and `kid`.

The extractor is built when the driver starts, so a bad featureWeights fails the job at once
with one line rather than after an epoch; the real images' features are computed at the first
evaluation and kept. The other ranks wait for rank 0 at their next collective while it
scores: `everyEpochs` is what bounds that (docs/trainer.md gives the cost).

Framework-free apart from torch-fidelity itself: a TensorFlow worker whose image has no torch
(the trainer-tf images) says so in one line at start and keeps the model's own scores.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.worker.feature_weights import read_weights

log = logging.getLogger("kubegan_trainer")

GENERATE_CHUNK = 250  # generated images per generate() call, to bound its memory
FID_SEED_OFFSET = 777  # the noise of the scored images: its own stream, never training's


def due(epoch: int, every: int, epochs: int) -> bool:
    """Whether FID and KID are measured after `epoch` (1-based) of `epochs`."""
    return epoch % every == 0 or epoch == epochs


@dataclass
class StandardScores:
    inception: Any  # inception_scores.Inception
    samples: int
    every: int
    epochs: int
    seed: int
    _real: dict[str, np.ndarray] = field(default_factory=dict)
    _real_features: Any = None

    @classmethod
    def open(cls, config: TrainerConfig, data_kind: str) -> StandardScores | None:
        """Rank 0's scorer, or None (with a line saying why) where FID/KID do not apply."""
        q = config.quality
        if q is None:
            return None
        if data_kind != "images":
            log.info(
                "spec.quality: FID and KID are for image models; %s keep their own scores",
                data_kind,
            )
            return None
        try:
            import torch_fidelity  # noqa: F401 (only asked whether it is there)
        except ImportError:
            log.warning(
                "spec.quality: FID and KID need torch-fidelity, which this image lacks; "
                "the model's own scores only"
            )
            return None
        from kubegan_trainer.worker import inception_scores

        where = q.feature_weights
        if where:
            state = inception_scores.state_from_bytes(read_weights(where, config.checkpoint), where)
        else:
            state = inception_scores.downloaded_state()
        model = inception_scores.Inception(state, where or "the downloaded weights")
        t = config.training
        return cls(model, q.samples, q.every_epochs, t.epochs, t.seed + FID_SEED_OFFSET)

    def due(self, epoch: int) -> bool:
        return due(epoch, self.every, self.epochs)

    def measure(self, backend: Any) -> tuple[dict[str, float], float]:
        """({"fid", "kid"}, seconds it took) for the generator as it is now."""
        from kubegan_trainer.worker.inception_scores import fid_kid

        t0 = time.perf_counter()
        if self._real_features is None:
            self._real = backend.real_examples(self.samples)
            self._real_features = self.inception.features(self._real["image"])
        n = len(self._real["image"])
        fake = [
            backend.generate(
                {k: v[i : i + GENERATE_CHUNK] for k, v in self._real.items()}, self.seed + i
            ).images
            for i in range(0, n, GENERATE_CHUNK)
        ]
        scores = fid_kid(
            self._real_features, self.inception.features(np.concatenate(fake)), self.seed
        )
        return {k: round(v, 6) for k, v in scores.items()}, time.perf_counter() - t0
