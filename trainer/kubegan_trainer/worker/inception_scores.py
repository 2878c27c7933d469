"""Standard FID and KID from InceptionV3 pool features, by torch-fidelity (the maintained
implementation of the published TensorFlow protocol: its InceptionV3 port, bilinear resize to
299 as TF 1.x does, 2048-d features, its FID and KID formulas).

The extractor's weights never go through pickle:

- no `spec.quality.featureWeights`: torch-fidelity's own download (the same URL and the torch
  hub cache as `torch_fidelity.calculate_metrics`), loaded with `weights_only=True`;
- `featureWeights` ending in `.safetensors`: a state dict of torch-fidelity's
  FeatureExtractorInceptionV3, loaded as data; `.pth`/`.pt`: `torch.load(weights_only=True)`.

torch-fidelity's constructor insists on loading weights itself; `_Unloaded` lets it load an
empty state dict (our own bytes) and takes the real one afterwards, checked key by key and
shape by shape, so a file of another architecture is one line, never a half-loaded network.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from kubegan_trainer.base.errors import TrainerError, error_text
from kubegan_trainer.worker.feature_weights import FIELD

FEATURES = "2048"  # the pool3 features FID and KID are defined on
BATCH = 50  # images per forward pass
KID_SUBSET_SIZE = 1000  # torch-fidelity's default; smaller when fewer images are scored
KID_SUBSETS = 100  # torch-fidelity's default


def _extractor_class() -> Any:
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    class _Unloaded(FeatureExtractorInceptionV3):
        def load_state_dict(
            self, state_dict: Any, strict: bool = True, assign: bool = False
        ) -> Any:
            if not state_dict:  # the constructor's load of our empty placeholder
                return None
            return super().load_state_dict(state_dict, strict=strict, assign=assign)

    return _Unloaded


def inception_module() -> Any:
    """torch-fidelity's InceptionV3 (2048-d features) with its initial random weights."""
    import torch

    empty = io.BytesIO()
    torch.save({}, empty)
    empty.seek(0)
    return _extractor_class()(
        "inception-v3-compat", [FEATURES], feature_extractor_weights_path=empty
    )


def state_from_bytes(data: bytes, source: str) -> dict[str, Any]:
    """A state dict from a featureWeights file's bytes, by its name's suffix."""
    import torch

    try:
        if source.endswith(".safetensors"):
            from safetensors.torch import load

            return load(data)
        if source.endswith((".pth", ".pt")):
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise ValueError(f"holds a {type(state).__name__}, not a state dict")
            return state
    except Exception as err:  # safetensors' and torch's errors on a damaged file
        raise TrainerError(
            f"{FIELD}: {source} is not readable weights: {error_text(err)}"
        ) from None
    raise TrainerError(f"{FIELD}: {source}: name a .safetensors file (or a .pth/.pt state dict)")


def downloaded_state() -> dict[str, Any]:
    """torch-fidelity's published weights, fetched (or taken from the hub cache) as it does."""
    from torch.hub import load_state_dict_from_url
    from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

    try:
        return load_state_dict_from_url(URL_INCEPTION_V3, progress=False, weights_only=True)
    except Exception as err:  # no internet, a proxy, a damaged cache
        raise TrainerError(
            f"spec.quality: InceptionV3 weights not downloaded ({error_text(err)}); on a "
            f"cluster without internet, set {FIELD}"
        ) from None


class Inception:
    """The feature extractor, on `device`, in inference mode."""

    def __init__(self, state: dict[str, Any], source: str, device: Any = None) -> None:
        import torch

        model = inception_module()
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            why = lines[1] if len(lines) > 1 else error_text(err)
            raise TrainerError(
                f"{FIELD}: {source} is not torch-fidelity's InceptionV3: {why[:240]}"
            ) from None
        if device is None:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.device = device
        self.model = model.to(device).eval()

    def features(self, images: np.ndarray) -> Any:
        """(N, 2048) float64 features (on the CPU) of channels-first images in [-1, 1]."""
        import torch

        pixels = to_uint8_rgb(images)
        out = []
        with torch.inference_mode():
            for i in range(0, len(pixels), BATCH):
                batch = torch.from_numpy(pixels[i : i + BATCH]).to(self.device)
                (feats,) = self.model(batch)
                out.append(feats.double().cpu())
        return torch.cat(out)


def to_uint8_rgb(images: np.ndarray) -> np.ndarray:
    """(N, C, H, W) in [-1, 1] as the (N, 3, H, W) uint8 pixels InceptionV3 takes: one
    channel repeated three times; more than three: the first three."""
    x = np.asarray(images, dtype=np.float32)
    if x.shape[1] == 1:
        x = np.repeat(x, 3, axis=1)
    x = x[:, :3]
    return np.clip(np.rint((x + 1.0) * 127.5), 0, 255).astype(np.uint8)


def fid_kid(real: Any, fake: Any, seed: int) -> dict[str, float]:
    """FID (torch-fidelity's mean and covariance of each feature set) and KID (its unbiased
    polynomial-kernel MMD, the mean over KID_SUBSETS subsets) of two (N, 2048) feature sets."""
    from torch_fidelity.metric_fid import fid_features_to_statistics
    from torch_fidelity.metric_kid import KEY_METRIC_KID_MEAN, kid_features_to_metric

    a, b = fid_features_to_statistics(real), fid_features_to_statistics(fake)
    size = min(KID_SUBSET_SIZE, len(real), len(fake))
    kid = kid_features_to_metric(
        real, fake, kid_subsets=KID_SUBSETS, kid_subset_size=size, rng_seed=seed, verbose=False
    )
    fid = frechet_from_statistics(a["mu"], a["sigma"], b["mu"], b["sigma"])
    return {"fid": fid, "kid": float(kid[KEY_METRIC_KID_MEAN])}


def frechet_from_statistics(
    mu_a: np.ndarray, ca: np.ndarray, mu_b: np.ndarray, cb: np.ndarray
) -> float:
    """||mu_a - mu_b||^2 + Tr(Ca + Cb - 2 (Ca Cb)^1/2), FID's formula. Tr((Ca Cb)^1/2) is
    taken as the sum of the square roots of the eigenvalues of the symmetric
    Ca^1/2 Cb Ca^1/2 (the same value): two symmetric eigendecompositions instead of
    torch-fidelity's general `scipy.linalg.sqrtm`, which takes minutes at 2048 dimensions on a
    CPU and fails outright on the singular covariances of fewer than 2048 images."""
    ea, va = np.linalg.eigh(ca)
    root_a = (va * np.sqrt(np.clip(ea, 0.0, None))) @ va.T
    cross = np.sqrt(np.clip(np.linalg.eigvalsh(root_a @ cb @ root_a), 0.0, None)).sum()
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca) + np.trace(cb) - 2.0 * cross)
