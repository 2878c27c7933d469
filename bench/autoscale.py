"""Autoscaled pools, measured: how long a gang on a pool at zero nodes takes from
`kubectl apply` to all workers bound and to the job Running, with a real Karpenter (its KWOK
provider: nodes appear as soon as Karpenter creates them, so the cloud's VM boot time is not
in these numbers) on a control plane of its own.

A benchmark, not a test. For gangs of 1, 2 and 4 nodes (8 A100s each, spot pool at zero),
`--runs` times each: apply, wait Running, record, delete, wait for the pool to be back at
zero. Karpenter's batching window (how long it waits for more pending pods before deciding)
is shown on its own row: it is part of apply -> bound, and a knob of the autoscaler.

    nice -n 10 .venv/bin/python bench/autoscale.py --runs 3

Ends with one line per gang size:
    autoscale: gang=N apply_to_bound_p50_s=... apply_to_running_p50_s=... scale_ups=...
        nodes_added=...   (one line)
where scale_ups counts Karpenter's provisioning decisions for the gang (goal: one per gang).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "api"), str(ROOT / "operator"), str(ROOT / "trainer")]

from tests.support.autoscale import Autoscaled, autoscaled_cluster, gpu_job  # noqa: E402
from tests.support.karpenter import nodepool  # noqa: E402
from tests.support.kube import wait_for  # noqa: E402

POOL = "a100-spot"


@dataclass
class Run:
    gang: int
    bound_s: float
    running_s: float
    scale_ups: int
    nodes_added: int


def _ts(text: str | None) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def one_run(w: Autoscaled, gang: int, i: int) -> Run:
    ns = w.namespace()
    name = f"gang{gang}-{i}"
    decisions_before = len(w.decisions(POOL))
    applied = time.time()
    w.cluster.apply(gpu_job(name, ns, "nvidia-tesla-a100", workers=gang))

    def all_bound() -> float | None:
        pods = w.workers(ns, name)
        if len(pods) < gang or not all(p["spec"].get("nodeName") for p in pods):
            return None
        # The scheduler's PodScheduled condition says when each was bound.
        return max(
            _ts(c["lastTransitionTime"])
            for p in pods
            for c in p["status"].get("conditions", [])
            if c["type"] == "PodScheduled" and c["status"] == "True"
        )

    bound_at = wait_for(f"{name} bound", all_bound, timeout=300, interval=0.2)
    wait_for(f"{name} Running", lambda: w.status(ns, name).get("phase") == "Running", 300, 0.2)
    running_at = time.time()
    decisions = w.decisions(POOL)[decisions_before:]
    run = Run(
        gang,
        bound_at - applied,
        running_at - applied,
        len(decisions),
        sum(int(d.get("nodeclaims", 0)) for d in decisions),
    )
    w.cluster.kubectl("delete", "namespace", ns, "--wait=false")
    wait_for("the pool back at zero", lambda: not w.karpenter.nodes(POOL), timeout=300)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per gang size (default 3)")
    parser.add_argument("--gangs", default="1,2,4", help="gang sizes in nodes (default 1,2,4)")
    parser.add_argument("--batch-idle", default="1s", help="Karpenter BATCH_IDLE_DURATION")
    parser.add_argument("--batch-max", default="10s", help="Karpenter BATCH_MAX_DURATION")
    args = parser.parse_args()
    gangs = [int(g) for g in args.gangs.split(",")]
    pools = [nodepool(POOL, "a2-highgpu", spot=True, consolidate_after="1s")]
    runs: list[Run] = []
    with (
        tempfile.TemporaryDirectory(prefix="kg-as-") as work,
        autoscaled_cluster(
            Path(work), pools, batch_idle=args.batch_idle, batch_max=args.batch_max
        ) as w,
    ):
        for gang in gangs:
            for i in range(args.runs):
                runs.append(one_run(w, gang, i))
                r = runs[-1]
                print(f"# gang={gang} run={i} bound={r.bound_s:.1f}s running={r.running_s:.1f}s "
                      f"scale_ups={r.scale_ups} nodes={r.nodes_added}", flush=True)  # fmt: skip
    print()
    print(f"Karpenter batching window: idle {args.batch_idle}, max {args.batch_max} "
          "(part of apply -> bound)")  # fmt: skip
    print()
    print("| gang (nodes) | runs | apply->bound p50 s | max s | apply->Running p50 s | max s "
          "| scale-ups per gang | nodes added per gang |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = []
    for gang in gangs:
        rs = [r for r in runs if r.gang == gang]
        bound = statistics.median(r.bound_s for r in rs)
        running = statistics.median(r.running_s for r in rs)
        ups = statistics.median(r.scale_ups for r in rs)
        added = statistics.median(r.nodes_added for r in rs)
        worst_bound, worst_running = max(r.bound_s for r in rs), max(r.running_s for r in rs)
        print(f"| {gang} | {len(rs)} | {bound:.1f} | {worst_bound:.1f} | {running:.1f} | "
              f"{worst_running:.1f} | {ups:g} | {added:g} |")  # fmt: skip
        lines.append(
            f"autoscale: gang={gang} apply_to_bound_p50_s={bound:.1f} "
            f"apply_to_running_p50_s={running:.1f} scale_ups={ups:g} nodes_added={added:g}"
        )
    print()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
