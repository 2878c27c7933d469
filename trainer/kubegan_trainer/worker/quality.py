"""GAN quality as a live metric: one small measurement per epoch on the chief.

A GAN's losses say little about whether it is learning (they chase each other by design),
so each model family is scored against real data the way people judge it by hand:

- images with class labels (digits, synthetic bars): a small classifier (linear
  discriminant analysis on 8x8-pooled images) trained once on the real data.
  `class_accuracy` (AC-GAN: how often a generated image is classified as the class it was
  asked for) and `feature_distance`, the Fréchet distance between real and generated
  images in the classifier's discriminant space (FID's formula on a 9-d feature space
  that fits the data, not ImageNet's Inception features).
- showers (gan3d): the physics checks of the CERN 3DGAN work, generated against real showers
  with the same primary energies and angles: `sampling_fraction_error` (mean relative error
  of deposited / primary energy in energy bins), and `longitudinal_distance` /
  `transverse_distance`, the total-variation distance (0 = same, 1 = disjoint) between the
  normalised mean shower profiles along depth and across y.
- paired (pix2pix): `l1` and `psnr_db` of generated against target images on fixed pairs.

The scoring set and the noise are fixed (their own seeds), so epochs are comparable and the
training random stream is never touched. The cost is reported as `quality_seconds`.

Each scorer names its primary score and whether higher is better (`Primary`): the one
`spec.checkpoint.keepBest` ranks checkpoints by and the export picks the generator with
(storage/retention.py). Images: `feature_distance` (lower); showers:
`sampling_fraction_error` (lower: the energy response is what the 3DGAN work validates
first); pairs: `psnr_db` (higher).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.showers import ECAL_POWER

QUALITY_SEED_OFFSET = 54321
IMAGE_EVAL = 256  # generated images scored per epoch
SHOWER_EVAL = 96
SHOWER_ENERGY_BINS = 4
PAIRED_EVAL = 16


class Generator(Protocol):
    def real_examples(self, n: int) -> dict[str, np.ndarray]: ...
    def generate(self, real: dict[str, np.ndarray], seed: int) -> Any: ...


@dataclass(frozen=True)
class Primary:
    metric: str
    higher_is_better: bool

    def pick(self, scores: dict[str, float]) -> tuple[str, float, bool] | None:
        """(metric, value, higher is better) when this epoch's scores hold a finite value."""
        value = scores.get(self.metric)
        if value is None or not np.isfinite(value):
            return None
        return self.metric, float(value), self.higher_is_better


class Scorer(Protocol):
    primary: Primary

    def score(self, backend: Generator, seed: int) -> dict[str, float]: ...


@dataclass
class Quality:
    scorer: Scorer
    seed: int

    @property
    def primary(self) -> Primary:
        return self.scorer.primary

    def measure(self, backend: Generator) -> tuple[dict[str, float], float]:
        """({metric: value}, seconds it took)."""
        t0 = time.perf_counter()
        scores = self.scorer.score(backend, self.seed)
        return {k: round(float(v), 6) for k, v in scores.items()}, time.perf_counter() - t0


def quality_for(
    kind: str,
    backend: Generator,
    seed: int,
    held_out: dict[str, np.ndarray] | None = None,
    model: Any = None,
) -> Quality | None:
    """The scorer for this data kind, or None where there is nothing to score against
    (an image folder without classes). `held_out`: pairs the job never trains on
    (data/build.py held_out_pairs), for pix2pix. `model`: the task; its own `quality` (the
    custom model API) is measured beside the kind's scores and is the primary one."""
    base = _kind_scorer(kind, backend, held_out)
    if callable(getattr(model, "quality", None)):
        name, higher = model.quality_primary
        real = backend.real_examples(MODEL_EVAL)
        base = ModelScorer(model.quality, Primary(name, higher), real, base)
    return Quality(base, seed + QUALITY_SEED_OFFSET) if base is not None else None


def _kind_scorer(
    kind: str, backend: Generator, held_out: dict[str, np.ndarray] | None
) -> Scorer | None:
    if kind == "showers":
        return ShowerScorer(backend.real_examples(SHOWER_EVAL))
    if kind == "paired":
        return PairedScorer(held_out)
    real = backend.real_examples(1 << 30)
    labels = real.get("label")
    if labels is None or len(np.unique(labels)) < 2:
        return None
    return ClassifierScorer(real["image"], labels)


# ---- a custom model's own score ------------------------------------------------------------------
MODEL_EVAL = 256  # real examples (and as many generated) a model's quality() compares


class ModelScorer:
    """`task.quality(real, fake)` on fixed real examples and generated ones for them, beside
    the data kind's own scores (`base`), if any."""

    def __init__(
        self, score: Any, primary: Primary, real: dict[str, np.ndarray], base: Scorer | None
    ) -> None:
        self.primary, self._score, self.real, self.base = primary, score, real, base

    def score(self, backend: Generator, seed: int) -> dict[str, float]:
        kind_scores = self.base.score(backend, seed) if self.base is not None else {}
        scores = self._score(self.real, backend.generate(self.real, seed).images)
        if not isinstance(scores, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float | np.number) for k, v in scores.items()
        ):
            raise TrainerError(
                "spec.model.entrypoint: the model's quality() returned "
                f"{type(scores).__name__}; expected a dict of score name to number"
            )
        return {**kind_scores, **{k: float(v) for k, v in scores.items()}}


# ---- images ----------------------------------------------------------------------------------
def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + Tr(Ca + Cb - 2 (Ca Cb)^1/2), FID's formula on (N, F) features.
    Tr((Ca Cb)^1/2) is the sum of square roots of the eigenvalues of the symmetric
    Ca^1/2 Cb Ca^1/2, which avoids a general matrix square root."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    ea, va = np.linalg.eigh(ca)
    root_a = (va * np.sqrt(np.clip(ea, 0.0, None))) @ va.T
    cross = np.sqrt(np.clip(np.linalg.eigvalsh(root_a @ cb @ root_a), 0.0, None)).sum()
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca) + np.trace(cb) - 2.0 * cross)


def pooled(images: np.ndarray, side: int = 8) -> np.ndarray:
    """(N, C, H, W) averaged down to (N, C * side * side): the digits are 8x8 drawings
    upsampled, so nothing a classifier needs is lost, and fitting stays cheap at 32x32."""
    n, c, h, w = images.shape
    fh, fw = max(h // side, 1), max(w // side, 1)
    x = images[:, :, : fh * (h // fh), : fw * (w // fw)].astype(np.float64)
    return x.reshape(n, c, h // fh, fh, w // fw, fw).mean((3, 5)).reshape(n, -1)


class LinearDiscriminant:
    """Fisher's linear discriminant in numpy: Gaussian classes with one shared covariance.
    `predict` picks the most likely class; `transform` maps to the K-1 axes along which the
    class means differ most relative to the spread within classes."""

    def __init__(self, x: np.ndarray, labels: np.ndarray) -> None:
        self.classes = np.unique(labels)
        means = np.stack([x[labels == c].mean(0) for c in self.classes])
        centred = x - means[np.searchsorted(self.classes, labels)]
        cov = centred.T @ centred / max(len(x) - len(self.classes), 1)
        # A ridge: pixels that are always blank make the covariance singular.
        cov += np.eye(len(cov)) * (1e-3 * np.trace(cov) / len(cov) + 1e-12)
        evals, evecs = np.linalg.eigh(cov)
        whiten = evecs / np.sqrt(evals)
        wm = (means - means.mean(0)) @ whiten
        _, _, vt = np.linalg.svd(wm, full_matrices=False)
        self.axes = whiten @ vt[: len(self.classes) - 1].T
        self.centre = means.mean(0)
        self.class_points = (means - self.centre) @ self.axes
        self.log_prior = np.log(np.array([(labels == c).mean() for c in self.classes]))

    def transform(self, x: np.ndarray) -> np.ndarray:
        return (x - self.centre) @ self.axes

    def predict(self, x: np.ndarray) -> np.ndarray:
        # In whitened discriminant space the shared covariance is the identity.
        z = self.transform(x)
        d2 = ((z[:, None, :] - self.class_points[None]) ** 2).sum(-1)
        return self.classes[np.argmax(-0.5 * d2 + self.log_prior, axis=1)]


class ClassifierScorer:
    primary = Primary("feature_distance", higher_is_better=False)

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        x = pooled(images)
        # Linear discriminant analysis: closed form (~0.2 s once per run, numpy only), ~90 %
        # on held-out digits, and its axes are a feature space that separates real classes.
        self.clf = LinearDiscriminant(x, labels)
        rng = np.random.default_rng(0)
        pick = rng.choice(len(images), size=min(IMAGE_EVAL, len(images)), replace=False)
        self.real = {"image": images[pick], "label": labels[pick]}
        self.real_features = self.clf.transform(x[pick])

    def score(self, backend: Generator, seed: int) -> dict[str, float]:
        fake = backend.generate(self.real, seed)
        x = pooled(fake.images)
        out = {}
        asked = fake.inputs.get("label")
        if asked is not None:  # conditional models: did it draw the class it was asked for?
            out["class_accuracy"] = float((self.clf.predict(x) == asked).mean())
        out["feature_distance"] = frechet_distance(self.clf.transform(x), self.real_features)
        return out


# ---- showers ---------------------------------------------------------------------------------
def _raw(images: np.ndarray) -> np.ndarray:
    return np.power(np.clip(images[:, 0].astype(np.float64), 0.0, None), 1.0 / ECAL_POWER)


def _tv(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance of two non-negative profiles after normalising each."""
    p, q = p / max(p.sum(), 1e-12), q / max(q.sum(), 1e-12)
    return 0.5 * float(np.abs(p - q).sum())


def shower_distances(
    real: np.ndarray, fake: np.ndarray, energy_gev: np.ndarray, bins: int = SHOWER_ENERGY_BINS
) -> dict[str, float]:
    """The 3DGAN physics checks on (N, 1, 51, 51, 25) power-scaled showers."""
    r, f = _raw(real), _raw(fake)
    # A primary of no (or no finite) energy has no sampling fraction: a data set's zeros
    # must not turn the score into a division warning and NaN.
    has = np.isfinite(energy_gev) & (energy_gev > 0)
    energy = energy_gev[has]
    sf_r = r[has].sum((1, 2, 3)) / energy
    sf_f = f[has].sum((1, 2, 3)) / energy
    edges = np.quantile(energy, np.linspace(0, 1, bins + 1)) if energy.size else np.zeros(1)
    which = np.clip(np.searchsorted(edges, energy, side="right") - 1, 0, bins - 1)
    errors = [
        abs(sf_f[which == i].mean() - sf_r[which == i].mean()) / max(sf_r[which == i].mean(), 1e-12)
        for i in range(bins)
        if (which == i).any()
    ]
    return {
        "sampling_fraction_error": float(np.mean(errors)) if errors else float("nan"),
        "longitudinal_distance": _tv(r.sum((1, 2)).mean(0), f.sum((1, 2)).mean(0)),
        "transverse_distance": _tv(r.sum((1, 3)).mean(0), f.sum((1, 3)).mean(0)),
    }


class ShowerScorer:
    primary = Primary("sampling_fraction_error", higher_is_better=False)

    def __init__(self, real: dict[str, np.ndarray]) -> None:
        self.real = real

    def score(self, backend: Generator, seed: int) -> dict[str, float]:
        fake = backend.generate(self.real, seed)
        energy_gev = self.real["energy"].astype(np.float64) * 100.0  # stored as GeV / 100
        return shower_distances(self.real["image"], fake.images, energy_gev)


# ---- pairs -----------------------------------------------------------------------------------
class PairedScorer:
    """L1 and PSNR (images in [-1, 1]: peak-to-peak 2) of generated against target images on
    held-out pairs: fresh synthetic pairs, or the folder `spec.model.options.heldOutPath`.
    A folder job that names none is scored on its last training pairs (docs/trainer.md)."""

    primary = Primary("psnr_db", higher_is_better=True)

    def __init__(self, held_out: dict[str, np.ndarray] | None = None) -> None:
        self.real = held_out

    def score(self, backend: Generator, seed: int) -> dict[str, float]:
        if self.real is None:
            every = backend.real_examples(1 << 30)
            self.real = {k: v[-PAIRED_EVAL:] for k, v in every.items()}
        fake = backend.generate(self.real, seed).images.astype(np.float64)
        target = self.real["b"].astype(np.float64)
        mse = float(((fake - target) ** 2).mean())
        return {
            "l1": float(np.abs(fake - target).mean()),
            "psnr_db": 10.0 * float(np.log10(4.0 / max(mse, 1e-12))),
        }
