"""Spot preemption on real nodes, measured. A benchmark, not a test.

It brings up a control plane of its own with three real nodes (tests/e2e's `real_cluster_up`:
free ports, real-node site `e2e`, removed afterwards; so it runs beside a `make cluster-up`
cluster, not beside the e2e tier), loads the images `make images` built, installs the chart with
the local preset, and then `--runs` times:

1. applies a 2-worker PyTorch DDP digits job (one worker per node; the third node is free),
2. waits until epoch 2 is under way, then reclaims the node under one worker the way GKE
   reclaims a spot VM (hack/real-node-reclaim.sh: SIGTERM, `--grace` seconds, node gone),
3. measures from the reclaim notice (t0):
   - running_s: until every worker of the next gang is Running,
   - step_s: until rank 0 trains a step past the checkpoint it resumed from,
   - lost_steps / lost_s: steps the old gang had trained past the checkpoint the new gang
     resumed from (work redone), and their time at the run's mean step time,
4. lets the job finish and brings the reclaimed node back for the next run.

    make bench-preemption                       # = the line below
    nice -n 10 .venv/bin/python bench/e2e_preemption.py --runs 3

Needs root and `make install images` (as the e2e tier does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubegan_api.contract import ATTEMPT_LABEL  # noqa: E402

from tests.e2e.jobs import Job, Nodes, index_of, resumed_at, victim_node  # noqa: E402
from tests.support.real_nodes import (  # noqa: E402
    HACK,
    JOBS_NS,
    RealCluster,
    digits_job,
    install_operator,
    real_cluster_up,
    run,
)

STEPS_PER_EPOCH = 8
TRANSCRIPTS = ROOT / "bench" / "out" / "e2e_preemption"


@dataclass
class Measured:
    running_s: float
    step_s: float
    lost_steps: int
    lost_s: float
    resumed_at: tuple[int, int]


def progress(job: Job) -> dict[str, Any]:
    try:
        return json.loads((job.output / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def global_step(epoch1: int, step: int) -> int:
    """progress.json's (1-based epoch being trained, steps done in it) as steps done."""
    return (epoch1 - 1) * STEPS_PER_EPOCH + step


def new_gang_running(job: Job, attempt: int) -> bool:
    pods = [
        p
        for p in job.pods()
        if p["metadata"]["labels"].get(ATTEMPT_LABEL) == str(attempt)
        and not p["metadata"].get("deletionTimestamp")
    ]
    return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)


def watch(cluster: RealCluster, out: Path) -> subprocess.Popen[bytes]:
    """`kubectl get ganjob -w` into a file: the transcript docs/guide.md shows."""
    return subprocess.Popen(
        [str(cluster.dir / "bin" / "kubectl"), "get", "ganjob", "-n", JOBS_NS, "-w"],
        env=cluster.env,
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
    )


@dataclass
class NewGang:
    """When the next gang was seen Running, and when its rank 0 first trained a step past
    the position it resumed from (its first progress record says where that is)."""

    attempt: int
    running_at: float | None = None
    resumed_global: int | None = None
    step_at: float | None = None

    def poll(self, job: Job, prog: dict[str, Any]) -> None:
        now = time.time()
        if self.running_at is None and new_gang_running(job, self.attempt):
            self.running_at = now
        if prog.get("resumed_from") is None or prog.get("state") != "running":
            return
        done = global_step(prog.get("epoch", 1), prog.get("step", 0))
        if self.resumed_global is None:
            self.resumed_global = done
        elif done > self.resumed_global and self.step_at is None:
            self.step_at = now


def reclaim_watching(
    cluster: RealCluster, nodes: Nodes, job: Job, index: int, grace: int
) -> tuple[dict[str, float], dict[str, Any], NewGang]:
    """Reclaim node `index` while reading rank 0's progress file: its last write before the
    new gang starts (state "stopped", at the last step the old gang trained) is what the
    old gang had done. The new gang may run before the node is fully gone, so its start is
    watched here too. Returns the reclaim's phase times, that record, and when the next
    gang was seen Running (None: not yet)."""
    gang = NewGang(job.status().get("attempt", 0) + 1)
    proc = subprocess.Popen(
        ["bash", str(HACK / "real-node-reclaim.sh"), str(index), "--grace", str(grace)],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    last: dict[str, Any] = {}
    old_gang_read = False
    while proc.poll() is None:
        prog = progress(job)
        if not old_gang_read:
            if prog.get("resumed_from") is not None and prog.get("state") == "running":
                old_gang_read = True  # the new gang's first word: the old gang's are all read
            elif prog:
                last = prog
                old_gang_read = prog.get("state") == "stopped"
        gang.poll(job, prog)
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"real-node-reclaim.sh {index} failed ({proc.returncode})")
    nodes.up_indices.discard(index)
    times = {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}
    return times, last, gang


def one_run(cluster: RealCluster, nodes: Nodes, name: str, grace: int) -> Measured:
    job = Job(cluster, digits_job(name, "pytorch", 6)).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    job.wait_training(epoch=2, steps=(1, 4))
    victim = victim_node(cluster, job)
    times, stopped, gang = reclaim_watching(cluster, nodes, job, index_of(victim), grace)
    t0 = times["notice"]
    trained = global_step(stopped.get("epoch", 1), stopped.get("step", 0))
    deadline = time.time() + 600
    while gang.step_at is None and time.time() < deadline:
        gang.poll(job, progress(job))
        time.sleep(0.05)
    log = cluster.kubectl("logs", "-n", JOBS_NS, f"{name}-worker-0", check=False)
    resume = resumed_at(log)
    if gang.running_at is None or gang.step_at is None or resume is None:
        raise SystemExit(f"{name}: the new gang did not train within 600 s: {job.status()}")
    job.finish()
    events = cluster.kubectl(
        "get", "events", "-n", JOBS_NS, "--sort-by=.lastTimestamp",
        f"--field-selector=involvedObject.name={name}",
    )  # fmt: skip
    (TRANSCRIPTS / f"{name}-events.txt").write_text(events)
    rows = [json.loads(ln) for ln in (job.output / "metrics.jsonl").read_text().splitlines()]
    step_seconds = statistics.mean(r["epoch_seconds"] / r["steps"] for r in rows if r["steps"])
    lost = max(0, trained - (resume[0] * STEPS_PER_EPOCH + resume[1]))
    cluster.kubectl("delete", "ganjob", "-n", JOBS_NS, name, "--wait=false")
    nodes.up(index_of(victim))
    return Measured(gang.running_at - t0, gang.step_at - t0, lost, lost * step_seconds, resume)


def table(results: list[Measured]) -> str:
    cols = {
        "node loss -> new workers Running (s)": [r.running_s for r in results],
        "node loss -> first new step (s)": [r.step_s for r in results],
        "steps redone": [float(r.lost_steps) for r in results],
        "training lost (s)": [r.lost_s for r in results],
    }
    lines = ["| measure | min | median | max |", "|---|---:|---:|---:|"]
    for label, xs in cols.items():
        lines.append(f"| {label} | {min(xs):.1f} | {statistics.median(xs):.1f} | {max(xs):.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grace", type=int, default=15, help="graceful shutdown seconds")
    args = ap.parse_args()
    if not 1 <= args.runs <= 20 or not 0 <= args.grace <= 120:
        ap.error("--runs 1..20, --grace 0..120")
    results: list[Measured] = []
    with (
        tempfile.TemporaryDirectory(prefix="kubegan-bench-preemption-") as tmp,
        real_cluster_up(Path(tmp), nodes=3) as cluster,
    ):
        run(["bash", str(HACK / "load-images.sh")], cluster.env, timeout=1200)
        install_operator(cluster)
        nodes = Nodes(cluster, {1, 2, 3})
        TRANSCRIPTS.mkdir(parents=True, exist_ok=True)
        watcher = watch(cluster, TRANSCRIPTS / "get-ganjob-w.txt")
        for i in range(args.runs):
            m = one_run(cluster, nodes, f"bench-reclaim-{i}", args.grace)
            results.append(m)
            print(
                f"run {i + 1}: running {m.running_s:.1f}s, first step {m.step_s:.1f}s, "
                f"resumed at epoch {m.resumed_at[0]} step {m.resumed_at[1]}, "
                f"redone {m.lost_steps} step(s) = {m.lost_s:.2f}s",
                flush=True,
            )
        watcher.terminate()
    print(f"transcripts (kubectl get ganjob -w, events) in {TRANSCRIPTS}")
    print(table(results))
    med = statistics.median
    print(
        f"e2e-preemption: runs={len(results)} grace_s={args.grace} "
        f"running_p50_s={med(r.running_s for r in results):.1f} "
        f"first_step_p50_s={med(r.step_s for r in results):.1f} "
        f"lost_steps_max={max(r.lost_steps for r in results)} "
        f"lost_s_max={max(r.lost_s for r in results):.2f}"
    )


if __name__ == "__main__":
    main()
