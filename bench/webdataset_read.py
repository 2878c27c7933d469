"""Image data from a bucket: WebDataset tar shards vs one object per example.

    .venv/bin/python bench/webdataset_read.py                 # 2048 images, 3 runs
    .venv/bin/python bench/webdataset_read.py --images 4096 --runs 5

The scikit-learn digits (cycled to `--images`), upsampled to 32x32 RGB PNGs in one folder
per class, put on a local S3 server (moto, started here on 127.0.0.1 as the tests start it)
twice: one object per image (what `spec.data.uri` read before shards), and packed by
`kubegan data pack` (kubegan_trainer.data.pack) into tar shards of 256 images. Each layout is
read as a training rank reads it (data/build.py's plan, one rank, one epoch through
`ShardPlan.rank_batches`, images decoded and scaled), timed from the plan's opening (listing,
counting) to the last batch; the shards also from a local folder. "objects read": one GET
each (the shard set's index is one more).

moto is pure Python on the same machine: a request costs about a millisecond here but tens
of milliseconds on GCS or S3, so the gap per request is a lower bound of a cloud's.
Prints one markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubegan_trainer.data.digits import _raw_digits  # noqa: E402
from kubegan_trainer.data.pack import pack  # noqa: E402
from kubegan_trainer.data.stream import ShardPlan, image_plan  # noqa: E402
from kubegan_trainer.data.tar_plan import tar_plan, tar_source  # noqa: E402

from tests.support.s3_server import S3Server  # noqa: E402
from tests.trainer.test_stream_images import upload  # noqa: E402

OPTIONS = {"imageSize": 32, "channels": 3}
PER_SHARD = 256
BATCH = 64


def write_digits(folder: Path, count: int) -> None:
    images, labels = _raw_digits()
    for i in range(count):
        j = i % len(images)
        grey = Image.fromarray((images[j] * 255 / 16).astype(np.uint8)).resize((32, 32))
        target = folder / str(labels[j]) / f"{i:05d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        grey.convert("RGB").save(target)


def read_epoch(open_plan: Callable[[], ShardPlan], count: int) -> tuple[float, int]:
    """Seconds to open the plan and read one epoch as one rank; the plan's shards."""
    start = time.perf_counter()
    plan = open_plan()
    steps = count // BATCH
    seen = sum(len(b["index"]) for b in plan.rank_batches(0, 1, 0, BATCH, 0, steps))
    assert seen == steps * BATCH, seen
    return time.perf_counter() - start, len(plan.names)


def measure(args: argparse.Namespace, tmp: Path, server: S3Server) -> list[tuple]:
    write_digits(tmp / "digits", args.images)
    os.environ.update(server.env())
    objects = upload(server, tmp / "digits")
    shards = f"s3://{server.make_bucket()}/shards"
    pack(tmp / "digits", shards, max_count=PER_SHARD)
    pack(tmp / "digits", str(tmp / "shards"), max_count=PER_SHARD)
    layouts = {
        "one object per image (S3, moto)": lambda: image_plan(objects, 7, "images", OPTIONS),
        f"tar shards of {PER_SHARD} (S3, moto)": lambda: tar_plan(
            tar_source(shards), 7, "images", OPTIONS, 32
        ),
        f"tar shards of {PER_SHARD} (local folder)": lambda: tar_plan(
            tar_source(str(tmp / "shards")), 7, "images", OPTIONS, 32
        ),
    }
    rows = []
    for name, open_plan in layouts.items():
        runs = [read_epoch(open_plan, args.images) for _ in range(args.runs)]
        times = [t for t, _ in runs]
        best = statistics.median(times)
        rows.append((name, runs[0][1], best, min(times), max(times), args.images / best))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        server = S3Server.start(tmp)
        try:
            rows = measure(args, tmp, server)
        finally:
            server.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.images} digits as 32x32 RGB PNGs, one rank, one epoch, batches of {BATCH}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}, {args.runs} runs\n"
    )
    print("| layout | objects read | median s | range s | images/s |")
    print("|---|---:|---:|---:|---:|")
    for name, gets, med, lo, hi, rate in rows:
        print(f"| {name} | {gets} | {med:.2f} | {lo:.2f}-{hi:.2f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
