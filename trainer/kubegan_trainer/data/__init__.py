"""Framework-free data: numpy arrays in memory, built from the job's `spec.data`.

Every dataset is a `Dataset` of same-length numpy arrays; backends only index them.
Layouts (channels first, like PyTorch; a TF backend transposes):

- images:  "image" (N, C, H, W) float32 in [-1, 1], optional "label" (N,) int64
- paired:  "a", "b" (N, C, H, W) float32 in [-1, 1]  (pix2pix: translate a -> b)
- showers: "image" (N, 1, 51, 51, 25) float32 (ECAL ** 0.85), "energy" (N,) GeV/100,
           "angle" (N,) radians, "ecal" (N,) sum of the raw ECAL image
"""

from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.build import build_dataset, dataset_kind_for

__all__ = ["Dataset", "build_dataset", "dataset_kind_for"]
