"""The quality scores are distances that mean what they say: zero for the data against
itself, small for a second sample of the same distribution, large for a wrong one."""

from __future__ import annotations

import numpy as np
import pytest
from kubegan_trainer.data.digits import load_digits_dataset
from kubegan_trainer.data.showers import ENERGY_SCALE, preprocess, shower, synthetic_showers
from kubegan_trainer.worker.driver import Generated
from kubegan_trainer.worker.quality import ClassifierScorer, PairedScorer, shower_distances


class Replay:
    """A 'generator' that returns prepared images for whatever it is asked."""

    def __init__(self, images: np.ndarray, labels: np.ndarray | None = None, real=None) -> None:
        self.images, self.labels, self.real = images, labels, real

    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        return self.real

    def generate(self, real: dict[str, np.ndarray], seed: int) -> Generated:
        n = len(next(iter(real.values())))
        inputs = {} if self.labels is None else {"label": self.labels[:n]}
        return Generated(self.images[:n], inputs)


def test_shower_distances_separate_physics_from_its_distortions() -> None:
    a = synthetic_showers(96, seed=1)
    e, theta = a.arrays["energy"] * ENERGY_SCALE, a.arrays["angle"]
    rng = np.random.default_rng(2)
    again = np.stack([shower(float(x), float(t), rng) for x, t in zip(e, theta, strict=True)])
    b = preprocess(again, e, theta)  # the same energies and angles, other fluctuations
    same = shower_distances(a.arrays["image"], a.arrays["image"], e)
    assert same == {
        "sampling_fraction_error": 0.0,
        "longitudinal_distance": 0.0,
        "transverse_distance": 0.0,
    }
    # Another sample of the same physics (other energies, angles, fluctuations): close.
    other = shower_distances(a.arrays["image"], b["image"], e)
    assert max(other.values()) < 0.05, other
    # 30 % too much energy: only the sampling fraction moves (profiles are normalised).
    hot = shower_distances(a.arrays["image"], a.arrays["image"] * 1.3**0.85, e)
    assert abs(hot["sampling_fraction_error"] - 0.3) < 1e-6
    assert hot["longitudinal_distance"] < 1e-9
    # A shower shifted 5 layers deeper: the longitudinal shape moves, the transverse not.
    deep = np.roll(a.arrays["image"], 5, axis=-1)
    deep[..., :5] = 0
    moved = shower_distances(a.arrays["image"], deep, e)
    assert moved["longitudinal_distance"] > 0.2 > moved["transverse_distance"]


def test_primaries_of_no_energy_leave_the_sampling_fraction_to_the_others() -> None:
    """A data set's zero (or NaN) energies have no sampling fraction: the score comes from
    the other events, and is NaN (dropped from the summary) without any, never a warning."""
    a = synthetic_showers(16, seed=1)
    e, image = a.arrays["energy"] * ENERGY_SCALE, a.arrays["image"]
    hot = image * 1.3**0.85
    spoilt = e.copy()
    spoilt[:4] = [0.0, -1.0, np.nan, np.inf]
    with np.errstate(all="raise"):  # any division by zero or NaN arithmetic fails here
        got = shower_distances(image, hot, spoilt)
        assert abs(got["sampling_fraction_error"] - 0.3) < 1e-6
        none = shower_distances(image, hot, np.zeros_like(e))
    assert np.isnan(none["sampling_fraction_error"])
    assert none["longitudinal_distance"] < 1e-9


def test_classifier_scores_real_digits_high_and_noise_low() -> None:
    real = load_digits_dataset(8)
    images, labels = real.arrays["image"], real.arrays["label"]
    scorer = ClassifierScorer(images, labels)
    as_asked = scorer.score(Replay(scorer.real["image"], scorer.real["label"]), seed=0)
    assert as_asked["class_accuracy"] > 0.9 and as_asked["feature_distance"] < 1.0
    shuffled = np.random.default_rng(0).permutation(scorer.real["label"])
    wrong = scorer.score(Replay(scorer.real["image"], shuffled), seed=0)
    assert wrong["class_accuracy"] < 0.3  # right digits, not the ones asked for
    noise = np.random.default_rng(1).uniform(-1, 1, scorer.real["image"].shape)
    bad = scorer.score(Replay(noise.astype(np.float32)), seed=0)
    assert "class_accuracy" not in bad  # unconditional: no class was asked for
    assert bad["feature_distance"] > 20 * max(as_asked["feature_distance"], 0.1)


def test_paired_scores_are_l1_and_psnr_of_generated_against_target() -> None:
    rng = np.random.default_rng(0)
    pairs = {"a": rng.uniform(-1, 1, (20, 3, 8, 8)), "b": rng.uniform(-1, 1, (20, 3, 8, 8))}
    exact = PairedScorer().score(Replay(pairs["b"][-16:], real=pairs), seed=0)
    assert exact["l1"] == 0.0 and exact["psnr_db"] > 100
    off = PairedScorer().score(Replay(pairs["b"][-16:] + 0.1, real=pairs), seed=0)
    assert abs(off["l1"] - 0.1) < 1e-9
    assert abs(off["psnr_db"] - 10 * np.log10(4 / 0.01)) < 1e-6


def test_pix2pix_is_scored_on_pairs_it_never_trains_on() -> None:
    from kubegan_api.sections import TrainerConfig
    from kubegan_trainer.data.build import HELD_OUT_PAIRS, build_dataset, held_out_pairs
    from pydantic import ValidationError

    def cfg(model: str, source: str = "synthetic", **options: object) -> TrainerConfig:
        # 16x16 pairs need a PatchGAN of at most 2 stride-2 layers.
        small = {"imageSize": 16, **({"nLayersD": 2} if model == "pix2pix" else {})}
        return TrainerConfig.model_validate(
            {
                "jobName": "t",
                "framework": "pytorch",
                "model": {"name": model, "options": {**small, **options}},
                "data": {"source": source, "path": "/nonexistent" if source == "files" else ""},
                "training": {"epochs": 1, "batchSizePerReplica": 4, "seed": 3},
            }
        )

    train = build_dataset(cfg("pix2pix")).arrays
    held = held_out_pairs(cfg("pix2pix"))
    assert held is not None and set(held) == set(train)
    assert held["a"].shape == (HELD_OUT_PAIRS, *train["a"].shape[1:])
    assert held["a"].dtype == train["a"].dtype
    # None of the held-out inputs is a training input.
    flat = {bytes(x.tobytes()) for x in train["a"]}
    assert not any(bytes(x.tobytes()) in flat for x in held["a"])
    assert held_out_pairs(cfg("dcgan")) is None
    assert held_out_pairs(cfg("pix2pix", "files")) is None  # no heldOutPath: training pairs
    with pytest.raises(ValidationError, match=r"spec\.model\.options\.heldOutPath: must be"):
        cfg("pix2pix", "files", heldOutPath=3)
