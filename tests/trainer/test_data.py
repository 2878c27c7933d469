"""Data loading on small files made here, and the synthetic generators' physics."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import files
from kubegan_trainer.data.showers import ECAL_POWER, longitudinal_profile, shower, synthetic_showers
from PIL import Image


def _shower_file(path: Path, n: int = 6, energy_key: str = "energy") -> np.ndarray:
    rng = np.random.default_rng(0)
    energies = rng.uniform(20, 200, n).astype(np.float32)
    thetas = np.deg2rad(rng.uniform(60, 120, n)).astype(np.float32)
    ecal = np.stack(
        [shower(float(e), float(t), rng) for e, t in zip(energies, thetas, strict=True)]
    )
    with h5py.File(path, "w") as f:
        f["ECAL"] = ecal
        f[energy_key] = energies if energy_key == "energy" else np.stack([thetas, energies], 1)
        f["theta"] = thetas
    return energies


def test_hdf5_with_the_3dgan_keys(tmp_path: Path) -> None:
    energies = _shower_file(tmp_path / "a.h5")
    ds = files.load_showers(tmp_path / "a.h5")
    assert ds.kind == "showers" and len(ds) == 6
    assert ds.arrays["image"].shape == (6, 1, 51, 51, 25)
    np.testing.assert_allclose(ds.arrays["energy"], energies / 100, rtol=1e-6)
    raw_sum = np.power(ds.arrays["image"], 1 / ECAL_POWER).sum(axis=(1, 2, 3, 4))
    np.testing.assert_allclose(raw_sum, ds.arrays["ecal"], rtol=1e-3)


def test_hdf5_folder_and_legacy_target_key(tmp_path: Path) -> None:
    _shower_file(tmp_path / "a.h5")
    energies = _shower_file(tmp_path / "b.h5", energy_key="target")
    ds = files.load_showers(tmp_path)
    assert len(ds) == 12
    np.testing.assert_allclose(ds.arrays["energy"][6:], energies / 100, rtol=1e-6)


def test_hdf5_wrong_shape_and_not_hdf5(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["ECAL"] = np.zeros((2, 25, 25, 25), np.float32)
        f["energy"] = np.ones(2, np.float32)
        f["theta"] = np.ones(2, np.float32)
    with pytest.raises(TrainerError, match=r"shape \(25, 25, 25\), expected \(51, 51, 25\)"):
        files.load_showers(tmp_path / "s.h5")
    (tmp_path / "x.h5").write_text("hello")
    with pytest.raises(TrainerError, match="not a readable HDF5 file"):
        files.load_showers(tmp_path / "x.h5")


def test_image_folder_with_class_subfolders(tmp_path: Path) -> None:
    for cls, value in (("cats", 0), ("dogs", 255)):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (20, 20), (value, value, value)).save(tmp_path / cls / f"{i}.png")
    ds = files.load_image_folder(tmp_path, 16)
    assert ds.arrays["image"].shape == (6, 3, 16, 16)
    assert ds.num_classes == 2 and list(ds.arrays["label"]) == [0, 0, 0, 1, 1, 1]
    assert ds.arrays["image"].min() == -1.0 and ds.arrays["image"].max() == 1.0


def test_paired_side_by_side(tmp_path: Path) -> None:
    im = Image.new("RGB", (64, 32), (255, 0, 0))
    im.paste((0, 0, 255), (32, 0, 64, 32))
    im.save(tmp_path / "1.jpg", quality=100)
    ds = files.load_paired_folder(tmp_path, 16)
    a, b = ds.arrays["a"][0], ds.arrays["b"][0]
    assert a.shape == (3, 16, 16)
    assert a[0].mean() > 0.9 and b[2].mean() > 0.9  # red on the left, blue on the right
    Image.new("RGB", (33, 32)).save(tmp_path / "odd.png")
    with pytest.raises(TrainerError, match=r"A\|B side by side"):
        files.load_paired_folder(tmp_path, 16)


def test_synthetic_showers_depend_on_energy_and_angle() -> None:
    import torch
    from kubegan_trainer.backends.torch.models.gan3d import measured_angle

    low = synthetic_showers(16, 0, energy_range=(10, 12))
    high = synthetic_showers(16, 0, energy_range=(400, 450))
    # ECAL sum scales with energy; the shower maximum moves deeper (log E)
    assert high.arrays["ecal"].mean() > 20 * low.arrays["ecal"].mean()
    assert np.argmax(longitudinal_profile(high.arrays["image"])) > np.argmax(
        longitudinal_profile(low.arrays["image"])
    )
    ds = synthetic_showers(16, 1)
    raw = torch.from_numpy(ds.arrays["image"]).pow(1 / ECAL_POWER)[:, 0]
    np.testing.assert_allclose(measured_angle(raw).numpy(), ds.arrays["angle"], atol=0.05)


def test_missing_image_folder() -> None:
    with pytest.raises(TrainerError, match=r"spec\.data\.path: /nonexistent does not exist"):
        files.load_image_folder(Path("/nonexistent"), 16)
