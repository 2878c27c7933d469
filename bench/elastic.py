"""Elastic training through a spot stockout on real nodes, measured. A benchmark, not a test.

It brings up a control plane of its own with three real nodes (tests/e2e's `real_cluster_up`:
free ports, real-node site `e2e`, removed afterwards; so it runs beside a `make cluster-up`
cluster, not beside the e2e tier), loads the images `make images` built, installs the chart with
the local preset, and then, `--runs` times, for an elastic job (minWorkers 2) and the same job
not elastic:

1. applies a 3-worker PyTorch DDP digits job (one worker per node, no node free; batch 32 per
   replica x 3 workers x accumulation 2, so 2 workers keep the global batch at accumulation 3),
2. waits until epoch 2 is under way, then reclaims the node under one worker the way GKE
   reclaims a spot VM (hack/real-node-reclaim.sh: SIGTERM, `--grace` seconds, node gone) and
   adds no replacement,
3. measures from the reclaim notice to the first step a new gang trains past the checkpoint it
   resumed from (progress.json); the job that is not elastic waits for a node, and is given up
   on after `--wait-cap` seconds ("waiting after N s"),
4. brings the node back: the elastic job grows to 3 at its next checkpoint, the other resumes;
   both train to the end, and metrics.jsonl gives the share of each epoch's samples trained.

`kubectl get ganjob <job> -w` and the job's events go to bench/out/elastic/ (the transcript
README.md shows).

    make bench-elastic                          # = the line below
    nice -n 10 .venv/bin/python bench/elastic.py --runs 1

Needs root and `make install images` (as the e2e tier does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubegan_trainer.worker.progress_file import read_progress  # noqa: E402

from tests.e2e.elastic import (  # noqa: E402
    STEPS_PER_EPOCH,
    elastic_digits,
    running_at,
    sample_shares,
)
from tests.e2e.jobs import Job, Nodes, index_of, victim_node  # noqa: E402
from tests.support.real_nodes import (  # noqa: E402
    HACK,
    JOBS_NS,
    RealCluster,
    install_operator,
    real_cluster_up,
    run,
)

OUT = ROOT / "bench" / "out" / "elastic"
WORKERS = 3
EPOCHS = 12  # enough for the node to come back while the shrunk gang trains (~4 s an epoch)


@dataclass
class Measured:
    elastic: bool
    first_step_s: float | None  # None: no new step within the wait cap
    waited_s: float
    workers_after: int  # the size that trained next (before the node came back)
    resizes: int
    shares: dict[int, float]


def global_step(prog: dict[str, Any]) -> int:
    return (prog.get("epoch", 1) - 1) * STEPS_PER_EPOCH + prog.get("step", 0)


class FirstNewStep:
    """When a gang that resumed first trained a step past its resume position (its first
    progress record says where that is)."""

    def __init__(self) -> None:
        self.resumed_global: int | None = None
        self.at: float | None = None
        self.world_size = 0

    def poll(self, job: Job) -> None:
        prog = read_progress(job.output)
        if self.at is not None or prog.get("resumed_from") is None:
            return
        if prog.get("state") != "running":
            return
        done = global_step(prog)
        if self.resumed_global is None:
            self.resumed_global = done
        elif done > self.resumed_global:
            self.at, self.world_size = time.time(), int(prog.get("world_size", 0))


def reclaim_until_training(
    cluster: RealCluster, nodes: Nodes, job: Job, index: int, grace: int, cap: float
) -> tuple[float, FirstNewStep]:
    """Reclaim node `index` (nothing replaces it) and watch rank 0's progress until a new gang
    trains a step or `cap` seconds after the notice. Returns the notice's unix time."""
    first = FirstNewStep()
    started = time.time()
    proc = subprocess.Popen(
        ["bash", str(HACK / "real-node-reclaim.sh"), str(index), "--grace", str(grace)],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    while proc.poll() is None or (first.at is None and time.time() < started + cap):
        first.poll(job)
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"real-node-reclaim.sh {index} failed ({proc.returncode})")
    nodes.up_indices.discard(index)
    times = {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}
    return times["notice"], first


def watch(cluster: RealCluster, name: str) -> subprocess.Popen[bytes]:
    """`kubectl get ganjob NAME -w` into bench/out/elastic/NAME-get-ganjob-w.txt."""
    return subprocess.Popen(
        [str(cluster.dir / "bin" / "kubectl"), "get", "ganjob", name, "-n", JOBS_NS, "-w"],
        env=cluster.env,
        stdout=(OUT / f"{name}-get-ganjob-w.txt").open("wb"),
        stderr=subprocess.STDOUT,
    )


def one_run(cluster: RealCluster, nodes: Nodes, name: str, elastic: bool, args: Any) -> Measured:
    spec = elastic_digits(
        name, EPOCHS, workers=WORKERS, min_workers=WORKERS - 1 if elastic else None,
        shrink_after=args.shrink_after, per_replica=32, accumulation=2,
    )  # fmt: skip
    job = Job(cluster, spec).apply()
    watcher = watch(cluster, name)  # after the apply: `-w` on a name that is not there exits
    job.wait("the gang of 3 running", lambda st: running_at(job, st, WORKERS), 300)
    job.wait_training(epoch=2)
    victim = victim_node(cluster, job)
    notice, first = reclaim_until_training(
        cluster, nodes, job, index_of(victim), args.grace, args.wait_cap
    )
    waited = time.time() - notice
    nodes.up(index_of(victim))  # ~20 s: the elastic job trains at its smaller size meanwhile
    final = job.finish(timeout=900)
    events = cluster.kubectl(
        "get", "events", "-n", JOBS_NS, "--sort-by=.lastTimestamp",
        f"--field-selector=involvedObject.name={name}",
    )  # fmt: skip
    (OUT / f"{name}-events.txt").write_text(events)
    watcher.terminate()
    watcher.wait(timeout=30)
    m = Measured(
        elastic=elastic,
        first_step_s=None if first.at is None else first.at - notice,
        waited_s=waited,
        workers_after=first.world_size,
        resizes=final.get("resizes", 0),
        shares=sample_shares(job),
    )
    cluster.kubectl("delete", "ganjob", "-n", JOBS_NS, name, "--wait=false")
    return m


def share_cell(shares: dict[int, float]) -> str:
    if len(shares) != EPOCHS:
        return f"{len(shares)} of {EPOCHS} epochs written"
    low, high = min(shares.values()), max(shares.values())
    span = f"{low:.0%}" if low == high else f"{low:.0%}..{high:.0%}"
    return f"{span} (each of {EPOCHS} epochs)"


def table(results: list[Measured]) -> str:
    lines = [
        "| job | reclaim -> first new step (s) | workers then | resizes "
        "| samples trained per epoch |",
        "|---|---:|---:|---:|---|",
    ]
    for m in results:
        label = "elastic (minWorkers 2)" if m.elastic else "not elastic"
        first = (
            f"{m.first_step_s:.1f}"
            if m.first_step_s is not None
            else f"none: waiting after {m.waited_s:.0f} s"
        )
        workers = f"{m.workers_after}/{WORKERS}" if m.workers_after else "0 (Unschedulable)"
        lines.append(f"| {label} | {first} | {workers} | {m.resizes} | {share_cell(m.shares)} |")
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="runs of each job (default 1)")
    ap.add_argument("--grace", type=int, default=15, help="graceful shutdown seconds")
    ap.add_argument("--shrink-after", type=int, default=10, help="shrinkAfterSeconds")
    ap.add_argument("--wait-cap", type=int, default=90, help="seconds to wait for a new step")
    args = ap.parse_args()
    if not 1 <= args.runs <= 10 or not 0 <= args.grace <= 120:
        ap.error("--runs 1..10, --grace 0..120")
    if not 5 <= args.shrink_after <= 300 or not args.shrink_after < args.wait_cap <= 900:
        ap.error("--shrink-after 5..300, --wait-cap above it and at most 900")
    return args


def main() -> None:
    args = parse()
    load = os.getloadavg()
    results: list[Measured] = []
    OUT.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="kubegan-bench-elastic-") as tmp,
        real_cluster_up(Path(tmp), nodes=WORKERS) as cluster,
    ):
        run(["bash", str(HACK / "load-images.sh")], cluster.env, timeout=1200)
        install_operator(cluster)
        nodes = Nodes(cluster, set(range(1, WORKERS + 1)))
        for i in range(args.runs):
            for elastic in (True, False):
                name = f"bench-{'elastic' if elastic else 'fixed'}-{i}"
                m = one_run(cluster, nodes, name, elastic, args)
                results.append(m)
                print(f"{name}: {table([m]).splitlines()[-1]}", flush=True)
    print(f"transcripts (kubectl get ganjob -w, events) in {OUT}")
    print(f"load average before: {load[0]:.1f} {load[1]:.1f}; after: {os.getloadavg()[0]:.1f}")
    print(table(results))


if __name__ == "__main__":
    main()
