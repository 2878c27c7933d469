"""What one FID/KID evaluation (spec.quality) costs rank 0, by `quality.samples`.

    .venv/bin/python bench/fid_cost.py [--samples 50 200] [--threads 2] [--device cpu|cuda]

For each N: InceptionV3 features of N real and N generated 32x32 images (torch-fidelity's
extractor, random weights of the same architecture: the cost does not depend on the values),
FID from the two feature sets (2048-d statistics), KID (100 subsets of min(N, 1000)).
The real images' features are computed once per process: a later evaluation costs the
"features, per set" column once, not twice. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from kubegan_trainer.worker.inception_scores import Inception, fid_kid, inception_module


def _row(inception: Inception, n: int) -> str:
    rng = np.random.default_rng(n)
    real = rng.uniform(-1, 1, (n, 3, 32, 32)).astype(np.float32)
    fake = rng.uniform(-1, 1, (n, 3, 32, 32)).astype(np.float32)
    t0 = time.perf_counter()
    a = inception.features(real)
    features = time.perf_counter() - t0
    b = inception.features(fake)
    t1 = time.perf_counter()
    fid_kid(a, b, 0)
    scores = time.perf_counter() - t1
    per_image = features / n
    return f"| {n} | {features:.1f} | {per_image:.3f} | {scores:.1f} | {features + scores:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    inception = Inception(inception_module().state_dict(), "bench", torch.device(args.device))
    print(f"device {args.device}, {args.threads} threads")
    print("| samples | features, per set (s) | per image (s) | FID + KID (s) | evaluation (s) |")
    print("|---|---|---|---|---|")
    for n in args.samples:
        print(_row(inception, n), flush=True)


if __name__ == "__main__":
    main()
