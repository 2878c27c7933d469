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
   - the breakdown, each milestone seen from outside the pods: the old gang stopped (rank
     0's last progress.json record, state "stopped", its "time"); the reclaim script's
     "stopped" (the node's containers gone), "marked" (its pods marked Failed, as the
     kubelet's shutdown manager would) and "gone" (its Node deleted); the old pods'
     containers exited, all marked for deletion, all gone; the new pods created, scheduled
     (spec.nodeName), Running (the job's pods from one `kubectl get pods -w`, looked at every
     50 ms: a kubectl run per look cost about 0.08 CPU-s on the CPUs the new gang starts
     on); the new rank 0's process started
     (its host pid from the node's containerd, /proc's start time); its rendezvous store
     listening (MASTER_PORT in /proc/<pid>/net/tcp*, polled: torch imported, data and
     models built); its first log line and its "resumed from" line (`kubectl logs
     --timestamps`: rendezvous and checkpoint load done); its first step past the resumed
     position (that progress.json record's "time"),
   - each new worker's own start, from the line it logs with its first step (python and
     config, framework import, data and models, rendezvous, trainer set-up, checkpoint,
     first step; trainer/kubegan_trainer/worker/startup.py), and this bench's own CPU in
     the window; both workers' logs are kept in bench/out/e2e_preemption/,
4. lets the job finish and brings the reclaimed node back for the next run.

    make bench-preemption                       # = the line below
    nice -n 10 .venv/bin/python bench/e2e_preemption.py --runs 3

Needs root and `make install images` (as the e2e tier does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubegan_api.contract import ATTEMPT_LABEL, ENV_MASTER_PORT, JOB_NAME_LABEL  # noqa: E402
from kubegan_trainer.worker.startup import (  # noqa: E402
    AFTER_START,
    FIRST_STEP_PREFIX,
    PHASES,
    process_started_at,
)

from bench.operator_scale import cpu_seconds  # noqa: E402
from tests.e2e.jobs import Job, Nodes, index_of, resumed_at, victim_node  # noqa: E402
from tests.support.real_nodes import (  # noqa: E402
    HACK,
    JOBS_NS,
    RealCluster,
    digits_job,
    install_operator,
    real_cluster_up,
    run,
    site,
)

STEPS_PER_EPOCH = 8
TRANSCRIPTS = ROOT / "bench" / "out" / "e2e_preemption"


# The breakdown's milestones, in the order they happen; each is seconds from the notice.
MILESTONES = {
    "stopped": "old gang stopped (rank 0 progress.json)",
    "node_stopped": "reclaimed node's containers gone (script)",
    "node_marked": "reclaimed node's pods marked Failed (script)",
    "node_gone": "reclaimed node gone (script)",
    "old_exited": "old pods' containers exited",
    "old_deleting": "old pods marked for deletion",
    "old_gone": "old pods gone",
    "created": "new pods created (both seen)",
    "scheduled": "new pods scheduled (spec.nodeName)",
    "started": "new rank 0 process started (/proc)",
    "running": "new pods Running (phase)",
    "listening": "new rank 0 rendezvous store listening",
    "first_log": "new rank 0 first log line",
    "resumed": 'new rank 0 "resumed from" line',
    "first_step": "new rank 0 first step (progress.json)",
}
# Each phase runs from the milestone it waits on, not always the row above (rank 0's process
# starts before the kubelet reports the pods Running; the old pods exit as the node's do).
SINCE = {
    "node_stopped": "stopped",
    "node_marked": "node_stopped",
    "node_gone": "node_marked",
    "old_exited": "stopped",
    "old_deleting": "node_marked",
    "old_gone": "old_deleting",
    "created": "old_gone",
    "scheduled": "created",
    "running": "scheduled",
    "started": "scheduled",
    "listening": "started",
    "first_log": "started",
    "resumed": "listening",
    "first_step": "resumed",
}


@dataclass
class Measured:
    running_s: float
    step_s: float
    lost_steps: int
    lost_s: float
    resumed_at: tuple[int, int]
    breakdown: dict[str, float | None] = field(default_factory=dict)
    startup: list[dict[str, float]] = field(default_factory=list)  # per new rank
    observer_cpu_s: float = 0.0  # this bench's CPU from the notice to the first step


def startup_phases(log: str) -> dict[str, float]:
    """A worker's "first step N s after the process started: <phase> <s>, ..." line (the
    trainer's worker/startup.py) as {phase: seconds, "total": N}; {} without one."""
    for line in log.splitlines():
        head, _, phases = line.partition(AFTER_START)
        if not phases or FIRST_STEP_PREFIX not in head:
            continue
        out = {"total": float(head.rpartition(" ")[2])}
        for part in phases.split(", "):
            name, _, value = part.rpartition(" ")
            out[name] = float(value)
        return out
    return {}


def progress(job: Job) -> dict[str, Any]:
    try:
        return json.loads((job.output / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def global_step(epoch1: int, step: int) -> int:
    """progress.json's (1-based epoch being trained, steps done in it) as steps done."""
    return (epoch1 - 1) * STEPS_PER_EPOCH + step


def new_gang_pods(pods: list[dict[str, Any]], attempt: int) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["metadata"]["labels"].get(ATTEMPT_LABEL) == str(attempt)
        and not p["metadata"].get("deletionTimestamp")
    ]


def old_gang_stage(pods: list[dict[str, Any]], attempt: int) -> set[str]:
    """Which of exited (no container of it running), deleting (each marked for deletion)
    and gone the gang before `attempt` has reached."""
    old = [p for p in pods if p["metadata"]["labels"].get(ATTEMPT_LABEL) != str(attempt)]
    running = [
        c
        for p in old
        for c in p["status"].get("containerStatuses") or []
        if "running" in (c.get("state") or {})
    ]
    stages = set() if running else {"old_exited"}
    if all(p["metadata"].get("deletionTimestamp") for p in old):
        stages.add("old_deleting")
    if not old:
        stages.add("old_gone")
    return stages


def gang_stage(pods: list[dict[str, Any]], workers: int = 2) -> set[str]:
    """Which of created / scheduled / running every worker of the gang has reached."""
    if len(pods) < workers:
        return set()
    stages = {"created"}
    if all(p["spec"].get("nodeName") for p in pods):
        stages.add("scheduled")
    if all(p["status"].get("phase") == "Running" for p in pods):
        stages.add("running")
    return stages


def log_times(log: str) -> dict[str, float]:
    """`kubectl logs --timestamps` lines (RFC3339Nano, then the line): the time of the
    first line and of the "resumed from" line, as epoch seconds."""
    times: dict[str, float] = {}
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            at = datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            continue
        times.setdefault("first_log", at)
        if "resumed from" in text:
            times.setdefault("resumed", at)
    return times


def watch(cluster: RealCluster, out: Path) -> subprocess.Popen[bytes]:
    """`kubectl get ganjob -w` into a file: the transcript docs/guide.md shows."""
    return subprocess.Popen(
        [str(cluster.dir / "bin" / "kubectl"), "get", "ganjob", "-n", JOBS_NS, "-w"],
        env=cluster.env,
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
    )


class PodStream:
    """The job's pods as one `kubectl get pods -w` keeps them, by uid (the next gang's pods
    have the old ones' names). One process for the whole run: polling ran a kubectl (about
    0.08 CPU-s) every 50 ms on the two CPUs the new gang starts on."""

    def __init__(self, cluster: RealCluster, job_name: str) -> None:
        self.proc = subprocess.Popen(
            [str(cluster.dir / "bin" / "kubectl"), "get", "pods", "-n", JOBS_NS,
             f"-l{JOB_NAME_LABEL}={job_name}", "-w", "-o", "json", "--output-watch-events"],
            env=cluster.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        self._pods: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = ""
        for line in self.proc.stdout:  # an event per line (or pretty: over several)
            buf += line
            if not line.rstrip().endswith("}"):
                continue
            try:
                event = json.loads(buf)
            except ValueError:  # an inner object's end
                continue
            buf = ""
            pod = event.get("object") or {}
            uid = pod.get("metadata", {}).get("uid", "")
            with self._lock:
                if event.get("type") == "DELETED":
                    self._pods.pop(uid, None)
                else:
                    self._pods[uid] = pod

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pods.values())

    def wait_for(self, count: int, timeout: float = 60) -> None:
        """Until the stream holds `count` pods: its first list has arrived."""
        deadline = time.time() + timeout
        while len(self.pods()) < count:
            if time.time() > deadline:
                raise SystemExit(f"kubectl get pods -w: not {count} pods in {timeout:.0f} s")
            time.sleep(0.05)

    def cpu_seconds(self) -> float:
        """The stream's own CPU so far (its kubectl process)."""
        return cpu_seconds(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def own_cpu() -> float:
    me = os.times()
    return me.user + me.system


@dataclass
class NewGang:
    """When the next gang was seen Running, and when its rank 0 first trained a step past
    the position it resumed from (its first progress record says where that is); on the
    way, the breakdown's milestones seen by polling (old and new pods, rank 0's socket)."""

    attempt: int
    seen: dict[str, float] = field(default_factory=dict)  # gang_stage -> first seen at
    resumed_global: int | None = None
    step_at: float | None = None
    step_time: float | None = None  # that progress record's own "time"
    rank0: tuple[int, int] | None = None  # the new rank 0's host pid and MASTER_PORT

    def poll_rank0(self, job: Job, pods: list[dict[str, Any]], now: float) -> None:
        if self.rank0 is None and "running" in self.seen:
            self.rank0 = rank0_process(job.cluster, self.pod(pods, f"{job.name}-worker-0"))
            started = process_started_at(self.rank0[0]) if self.rank0 else None
            if started is not None:  # read now: a short job's process is gone at its end
                self.seen["started"] = started
        if self.rank0 is not None and "listening" not in self.seen and listening(*self.rank0):
            self.seen["listening"] = now

    @property
    def running_at(self) -> float | None:
        return self.seen.get("running")

    def pod(self, pods: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
        mine = [p for p in new_gang_pods(pods, self.attempt) if p["metadata"]["name"] == name]
        return mine[0] if mine else None

    def poll(self, job: Job, pods: list[dict[str, Any]], prog: dict[str, Any]) -> None:
        now = time.time()
        if "running" not in self.seen:
            stages = gang_stage(new_gang_pods(pods, self.attempt))
            for stage in stages | old_gang_stage(pods, self.attempt):
                self.seen.setdefault(stage, now)
        self.poll_rank0(job, pods, now)
        if prog.get("resumed_from") is None or prog.get("state") != "running":
            return
        done = global_step(prog.get("epoch", 1), prog.get("step", 0))
        if self.resumed_global is None:
            self.resumed_global = done
        elif done > self.resumed_global and self.step_at is None:
            self.step_at = now
            self.step_time = prog.get("time")


def reclaim_watching(
    cluster: RealCluster, nodes: Nodes, job: Job, index: int, grace: int, stream: PodStream
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
        gang.poll(job, stream.pods(), prog)
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"real-node-reclaim.sh {index} failed ({proc.returncode})")
    nodes.up_indices.discard(index)
    times = {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}
    return times, last, gang


def one_run(
    cluster: RealCluster, nodes: Nodes, name: str, grace: int, framework: str = "pytorch"
) -> Measured:
    job = Job(cluster, digits_job(name, framework, 6)).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    job.wait_training(epoch=2, steps=(1, 4))
    victim = victim_node(cluster, job)
    stream = PodStream(cluster, name)
    stream.wait_for(2)  # the gang's two workers: what the reclaim is measured against
    cpu0 = own_cpu() + stream.cpu_seconds()
    times, stopped, gang = reclaim_watching(cluster, nodes, job, index_of(victim), grace, stream)
    t0 = times["notice"]
    trained = global_step(stopped.get("epoch", 1), stopped.get("step", 0))
    deadline = time.time() + 600
    while gang.step_at is None and time.time() < deadline:
        gang.poll(job, stream.pods(), progress(job))
        time.sleep(0.05)
    observer_cpu = own_cpu() + stream.cpu_seconds() - cpu0
    stream.close()
    logs = [  # the new gang's: each worker's start, line by line
        cluster.kubectl("logs", "--timestamps", "-n", JOBS_NS, f"{name}-worker-{r}", check=False)
        for r in range(2)
    ]
    for rank, text in enumerate(logs):
        (TRANSCRIPTS / f"{name}-worker-{rank}.log").write_text(text)
    startup = [startup_phases(text) for text in logs]
    log = logs[0]
    resume = resumed_at(log)
    if gang.running_at is None or gang.step_at is None or resume is None:
        raise SystemExit(f"{name}: the new gang did not train within 600 s: {job.status()}")
    marks = {**gang.seen, **log_times(log), "first_step": gang.step_time}
    marks |= {f"node_{k}": times.get(k) for k in ("stopped", "marked", "gone")}
    marks["stopped"] = stopped.get("time") if stopped.get("state") == "stopped" else None
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
    breakdown = {k: (marks[k] - t0 if marks.get(k) else None) for k in MILESTONES}
    return Measured(
        gang.running_at - t0,
        gang.step_at - t0,
        lost,
        lost * step_seconds,
        resume,
        breakdown,
        startup,
        observer_cpu,
    )


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


def spread(xs: list[float]) -> str:
    if not xs:
        return "- | - | -"
    return f"{min(xs):.1f} | {statistics.median(xs):.1f} | {max(xs):.1f}"


def breakdown_table(results: list[Measured]) -> str:
    """Each milestone's seconds from the notice, and the phase before it (from the previous
    milestone it waits on, SINCE, in the same run), min / median / max over the runs that
    saw both."""
    lines = [
        "| milestone | from notice: min | median | max | phase before it: min | median | max |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in MILESTONES.items():
        at = [v for r in results if (v := r.breakdown.get(key)) is not None]
        prev = SINCE.get(key, "")
        phase = [
            b[key] - b[prev]
            for b in (r.breakdown for r in results)
            if b.get(key) is not None and b.get(prev) is not None
        ]
        since = f" (since {prev})" if prev else ""
        lines.append(f"| {label}{since} | {spread(at)} | {spread(phase)} |")
    return "\n".join(lines)


def startup_table(results: list[Measured]) -> str:
    """Each new rank's own start (its log line), median and range over the runs, with the
    bench's own CPU in the same window: on this machine it shares the CPUs."""
    ranks = max((len(r.startup) for r in results), default=0)
    head = "| phase (s) | " + " | ".join(f"rank {i}: median (min-max)" for i in range(ranks))
    lines = [head + " |", "|---|" + "---:|" * ranks]
    for key in [*PHASES.values(), "total"]:
        cells = []
        for i in range(ranks):
            xs = [r.startup[i][key] for r in results if key in r.startup[i]]
            cells.append(
                f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"
            )
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    cpu = [r.observer_cpu_s for r in results]
    lines.append(
        f"\nthis bench's own CPU from the notice to the first step: {min(cpu):.2f}-"
        f"{max(cpu):.2f} s (median {statistics.median(cpu):.2f})"
    )
    return "\n".join(lines)


def rank0_process(cluster: RealCluster, pod: dict[str, Any] | None) -> tuple[int, int] | None:
    """The host pid of `pod`'s main process, read from its node's containerd (nodes are
    namespaces on this host), and the pod's MASTER_PORT."""
    if pod is None:
        return None
    statuses = pod["status"].get("containerStatuses") or [{}]
    cid = statuses[0].get("containerID", "").partition("://")[2]
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}
    sock = (
        Path(site(cluster.env.get("KUBEGAN_REAL_SITE", "e2e"))["RUN_ROOT"])
        / pod["spec"]["nodeName"]
    )
    ls = subprocess.run(
        ["ctr", "--address", str(sock / "containerd.sock"), "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    for line in ls.stdout.splitlines():
        cols = line.split()
        if cid and len(cols) >= 2 and cols[0] == cid and cols[1].isdigit():
            return int(cols[1]), int(env.get(ENV_MASTER_PORT) or 0)
    return None


def listening(pid: int, port: int) -> bool:
    """Whether a socket in process `pid`'s network namespace listens on TCP `port` (rank
    0's rendezvous store: torch is imported, data and models are built)."""
    for name in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rpartition(":")[2], 16) == port:
                return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grace", type=int, default=15, help="graceful shutdown seconds")
    ap.add_argument(
        "--framework",
        choices=("pytorch", "tensorflow"),
        default="pytorch",
        help="the job's framework (tensorflow: no rendezvous store, so no 'listening' row)",
    )
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
            m = one_run(cluster, nodes, f"bench-reclaim-{i}", args.grace, args.framework)
            results.append(m)
            print(
                f"run {i + 1}: running {m.running_s:.1f}s, first step {m.step_s:.1f}s, "
                f"resumed at epoch {m.resumed_at[0]} step {m.resumed_at[1]}, "
                f"redone {m.lost_steps} step(s) = {m.lost_s:.2f}s; "
                + ", ".join(
                    f"{k} {'-' if v is None else f'{v:.2f}'}" for k, v in m.breakdown.items()
                ),
                flush=True,
            )
        watcher.terminate()
    print(f"transcripts (kubectl get ganjob -w, events) in {TRANSCRIPTS}")
    print(table(results))
    print()
    print(breakdown_table(results))
    print()
    print(startup_table(results))
    med = statistics.median
    print(
        f"e2e-preemption: framework={args.framework} runs={len(results)} grace_s={args.grace} "
        f"running_p50_s={med(r.running_s for r in results):.1f} "
        f"first_step_p50_s={med(r.step_s for r in results):.1f} "
        f"lost_steps_max={max(r.lost_steps for r in results)} "
        f"lost_s_max={max(r.lost_s for r in results):.2f}"
    )


if __name__ == "__main__":
    main()
