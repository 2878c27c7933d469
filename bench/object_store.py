"""Checkpoints in a bucket: what committing one costs, next to the local volume.

    .venv/bin/python bench/object_store.py            # `make bench-object-store`
    .venv/bin/python bench/object_store.py --runs 5

For the gan3d model at full size (PyTorch: both networks and both Adam optimizers' state,
the payload the trainer writes), on a local S3 server (moto, started here on 127.0.0.1 as
the tests start it) and on a local folder:

- commit: the local checkpoint (torch.save, sha256, fsync, rename) and the bucket upload
  of it (files under the upload's own prefix, then the create-only manifest), seconds and
  MB/s;
- resume: downloading the newest whole checkpoint into an empty folder, checked;
- SIGTERM -> committed: on a stop only the stop checkpoint is missing from the bucket (the
  earlier ones went up in the background), so the time is the local commit plus its
  upload; and, end to end, a real PyTorch worker's own log line (signal to manifest, the
  step in flight included);
- memory: one rank's peak memory growth for a shower set 4x the largest the tests stream,
  loaded whole (a single .h5 file still is) vs streamed by shard (data/stream.py, as the
  training loops read a folder or bucket of shards).

Prints one markdown table (bench/README.md shows the latest, bench/results/ every run).
moto keeps objects in memory and is pure Python: a cloud's S3 is faster per stream, so the
bucket rows are an upper bound.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubegan_api.contract import ENV_CHECKPOINT_URI, EXIT_INTERRUPTED  # noqa: E402
from kubegan_trainer.backends.torch.models.gan3d import build_gan3d  # noqa: E402
from kubegan_trainer.storage import objstore  # noqa: E402
from kubegan_trainer.storage.bucket import BucketCheckpoints  # noqa: E402
from kubegan_trainer.storage.folder import CheckpointStore  # noqa: E402
from kubegan_trainer.storage.store import Position  # noqa: E402

from tests.support.s3_server import S3Server  # noqa: E402
from tests.trainer.test_data_stream import peak, write_shards  # noqa: E402
from tests.trainer.util import config, run_workers  # noqa: E402

_STOP_LINE = re.compile(r"committed to s3://\S+ ([\d.]+) s after the stop request")
# 4x the largest set the tests stream (tests/trainer/test_data_stream.py: 32 shards of 8).
STREAM_SHARDS, STREAM_EVENTS = 128, 8


def gan3d_payload() -> dict:
    """The trainer's payload for gan3d at full size, Adam state filled (random values: the
    bytes of a real run's state, which do not compress either)."""
    task = build_gan3d({})
    payload: dict = {"format": 1, "position": {"epoch": 1, "step": 0}}
    for key, net in (("generator", task.generator), ("discriminator", task.discriminator)):
        payload[key] = net.state_dict()
        state = {
            i: {"step": torch.tensor(1.0), "exp_avg": torch.randn_like(p),
                "exp_avg_sq": torch.rand_like(p)}
            for i, p in enumerate(net.parameters())
        }  # fmt: skip
        payload["opt_" + key[0]] = {"state": state, "param_groups": []}
    return payload


def local_commit(store: CheckpointStore, payload: dict, pos: Position) -> float:
    started = time.perf_counter()
    staging = store.begin(pos)
    torch.save(payload, staging / "state.pt")
    store.commit(staging, pos, extra={"framework": "pytorch"})
    return time.perf_counter() - started


def measure(runs: int, work: Path, server: S3Server) -> dict[str, list[float]]:
    os.environ.update(server.env())
    uri = objstore.parse_uri(f"s3://{server.make_bucket()}/bench", "bench")
    bucket = BucketCheckpoints(objstore.open_store(uri), uri)
    payload = gan3d_payload()
    store = CheckpointStore(work / "local", keep=runs + 1)
    out: dict[str, list[float]] = {"local": [], "upload": [], "download": [], "bytes": []}
    for i in range(runs):
        pos = Position(i + 1, 0)
        out["local"].append(local_commit(store, payload, pos))
        folder = work / "local" / f"ckpt-{pos.epoch:06d}-{pos.step:08d}"
        out["bytes"].append(float(sum(f.stat().st_size for f in folder.iterdir())))
        started = time.perf_counter()
        assert bucket.upload(folder, pos)
        out["upload"].append(time.perf_counter() - started)
        remote = bucket.list()[-1]
        started = time.perf_counter()
        assert bucket.download(remote, work / f"fresh-{i}") is None
        out["download"].append(time.perf_counter() - started)
    return out


def sigterm_to_committed(runs: int, work: Path, server: S3Server) -> list[float]:
    """A real PyTorch worker, gan3d at full size, SIGTERM in global step 2: seconds from the
    signal to the stop checkpoint's manifest in the bucket (the trainer's own log line;
    the step in flight when the signal came is included)."""
    cfg = config("gan3d", options={"numSamples": 16}, data={"source": "synthetic"},
                 batchSizePerReplica=2, epochs=1, stepsPerEpoch=4)  # fmt: skip
    seconds = []
    for i in range(runs):
        env = {**server.env(), ENV_CHECKPOINT_URI: f"s3://{server.make_bucket()}/stop"}
        run = run_workers(cfg, work / f"stop-{i}", 1, extra_env=env, sigterm_at="0:2",
                          timeout=900)  # fmt: skip
        assert run.codes == [EXIT_INTERRUPTED], run.logs[0][-3000:]
        found = _STOP_LINE.search(run.logs[0])
        assert found, run.logs[0][-3000:]
        seconds.append(float(found.group(1)))
    return seconds


def memory_rows(work: Path) -> list[str]:
    """Peak memory growth of one rank: the whole set loaded vs streamed by shards."""
    write_shards(work / "showers", STREAM_SHARDS, STREAM_EVENTS)
    whole, streamed = peak("memory", work / "showers"), peak("stream", work / "showers")
    mb = sum(f.stat().st_size for f in (work / "showers").iterdir()) / 1e6
    what = f"{STREAM_SHARDS} HDF5 shards, {whole['events']} showers, {mb:.0f} MB"
    return [
        "",
        f"Per-rank peak memory growth, {what} (4x the largest set the tests stream):",
        "",
        "| data | peak growth MB |",
        "|---|---:|",
        "| loaded whole (a single .h5 file; every folder before streaming) "
        f"| {whole['grew_mb']:.0f} |",
        f"| streamed by shard, read-ahead 2 (data/stream.py) | {streamed['grew_mb']:.0f} |",
    ]


def table(m: dict) -> str:
    mb = statistics.median(m["bytes"]) / 1e6

    def row(what: str, seconds: list[float]) -> str:
        med = statistics.median(seconds)
        return f"| {what} | {med:.2f} | {min(seconds):.2f}-{max(seconds):.2f} | {mb / med:.0f} |"

    stop = [a + b for a, b in zip(m["local"], m["upload"], strict=True)]
    real = m["sigterm"]
    real_row = (
        f"| SIGTERM -> committed, a real gan3d worker (step in flight included) | "
        f"{statistics.median(real):.2f} | {min(real):.2f}-{max(real):.2f} | |"
    )
    return "\n".join(
        [
            f"gan3d full size, PyTorch payload {mb:.1f} MB, {len(m['local'])} runs, "
            f"{platform.machine()} {os.cpu_count()} cores",
            "",
            "| what | median s | range s | MB/s |",
            "|---|---:|---:|---:|",
            row("commit to the local folder (save, sha256, fsync, rename)", m["local"]),
            row("commit to S3 (moto): upload + create-only manifest", m["upload"]),
            row("resume from S3 (moto): download + checks", m["download"]),
            row("SIGTERM -> committed in the bucket (local commit + upload)", stop),
            real_row,
            *m["memory"],
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-objstore-") as tmp:
        server = S3Server.start(Path(tmp))
        try:
            m: dict = measure(args.runs, Path(tmp), server)
            m["sigterm"] = sigterm_to_committed(args.runs, Path(tmp), server)
            m["memory"] = memory_rows(Path(tmp))
            print(table(m))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
