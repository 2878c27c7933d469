"""Synthetic electromagnetic showers in the 3DGAN geometry (51 x 51 cells x 25 layers).

Not a detector simulation, but the features the 3DGAN losses and validation look at
depend on energy and angle the way real showers do:

- longitudinal profile: the gamma-function parametrisation
  dE/dt = E b (bt)^(a-1) e^(-bt) / Gamma(a), with t_max = (a-1)/b = ln(E/E_c) - 0.5
  (electrons), t measured along the shower axis, so inclined showers are stretched;
- transverse profile: an exponential core plus a wider exponential halo, widening with
  depth, centred on an axis that drifts across y with cot(theta);
- ECAL sum: a sampling fraction of the primary energy with stochastic resolution, and
  gamma-distributed cell fluctuations.
"""

from __future__ import annotations

import math

import numpy as np

from kubegan_trainer.data.arrays import Dataset

SHAPE = (51, 51, 25)  # x, y, z (depth)
ECAL_POWER = 0.85  # 3DGAN feeds ECAL ** 0.85 to the networks
CELL_THRESHOLD = 1e-4  # cells below this are zeroed, as in the 3DGAN preprocessing
ENERGY_SCALE = 100.0  # energies are given to the networks in units of 100 GeV
SAMPLING_FRACTION = 0.02
CRITICAL_ENERGY_GEV = 0.0081  # tungsten
B_PARAM = 0.5


def gamma_profile(t: np.ndarray, energy_gev: float, t_shift: float = 0.0) -> np.ndarray:
    """Longitudinal energy fraction at depths t (radiation lengths)."""
    t_max = max(0.5, math.log(energy_gev / CRITICAL_ENERGY_GEV) - 0.5 + t_shift)
    a = 1.0 + B_PARAM * t_max
    bt = B_PARAM * np.maximum(t, 1e-6)
    log_pdf = math.log(B_PARAM) + (a - 1.0) * np.log(bt) - bt - math.lgamma(a)
    return np.exp(log_pdf)


def shower(energy_gev: float, theta: float, rng: np.random.Generator) -> np.ndarray:
    """One raw ECAL image (51, 51, 25) for a primary of `energy_gev` at polar angle `theta`."""
    nx, ny, nz = SHAPE
    z = np.arange(nz) + 0.5
    sin_t = math.sin(theta)
    # Depth along the axis: inclined showers cross more material per layer.
    t = z / sin_t * 0.9
    profile = gamma_profile(t, energy_gev, t_shift=rng.normal(0.0, 0.4))
    profile = profile / max(profile.sum(), 1e-12)
    total = SAMPLING_FRACTION * energy_gev * (1.0 + rng.normal(0.0, 0.1 / math.sqrt(energy_gev)))
    # Shower axis: enters at the centre of the middle layer's plane, drifts along y.
    xc = (nx - 1) / 2.0 + rng.normal(0.0, 0.5)
    yc = (ny - 1) / 2.0 + (z - nz / 2.0) * (math.cos(theta) / sin_t) + rng.normal(0.0, 0.5)
    xs = np.arange(nx)[:, None, None]
    ys = np.arange(ny)[None, :, None]
    r = np.sqrt((xs - xc) ** 2 + (ys - yc[None, None, :]) ** 2)  # (nx, ny, nz)
    core_r = 0.7 + 0.05 * t  # widening with depth
    halo_r = 3.0 + 0.15 * t
    trans = 0.85 * np.exp(-r / core_r) / core_r**2 + 0.15 * np.exp(-r / halo_r) / halo_r**2
    trans = trans / trans.sum(axis=(0, 1), keepdims=True)
    image = total * trans * profile[None, None, :]
    image *= rng.gamma(shape=4.0, scale=0.25, size=image.shape)
    image[image < CELL_THRESHOLD] = 0.0
    return image.astype(np.float32)


def preprocess(raw: np.ndarray, energy_gev: np.ndarray, theta: np.ndarray) -> dict[str, np.ndarray]:
    """The 3DGAN preprocessing: threshold, ECAL sum, power 0.85, energy / 100."""
    raw = np.where(raw < CELL_THRESHOLD, 0.0, raw).astype(np.float32)
    ecal = raw.sum(axis=(1, 2, 3)).astype(np.float32)
    keep = ecal > 0  # empty events carry no information (3DGAN drops them too)
    return {
        "image": np.power(raw[keep], ECAL_POWER)[:, None].astype(np.float32),
        "energy": (energy_gev[keep] / ENERGY_SCALE).astype(np.float32),
        "angle": theta[keep].astype(np.float32),
        "ecal": ecal[keep],
    }


def synthetic_showers(
    n: int,
    seed: int,
    energy_range: tuple[float, float] = (10.0, 200.0),
    angle_range_deg: tuple[float, float] = (60.0, 120.0),
) -> Dataset:
    rng = np.random.default_rng(seed)
    energies = rng.uniform(*energy_range, size=n)
    thetas = np.deg2rad(rng.uniform(*angle_range_deg, size=n))
    raw = np.stack([shower(float(e), float(t), rng) for e, t in zip(energies, thetas, strict=True)])
    return Dataset(
        kind="showers",
        arrays=preprocess(raw, energies, thetas),
        info={"source": "synthetic showers", "seed": seed},
    )


def longitudinal_profile(images: np.ndarray) -> np.ndarray:
    """Mean energy per layer of (N, 1, 51, 51, 25) power-scaled images, in raw units."""
    raw = np.power(np.clip(images, 0.0, None), 1.0 / ECAL_POWER)
    return raw.reshape(len(raw), -1, raw.shape[-1]).sum(axis=1).mean(axis=0)


def transverse_profile(images: np.ndarray) -> np.ndarray:
    """Mean energy per y cell (summed over x and depth), in raw units."""
    raw = np.power(np.clip(images, 0.0, None), 1.0 / ECAL_POWER)
    return raw[:, 0].sum(axis=(1, 3)).mean(axis=0)
