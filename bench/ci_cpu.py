"""Where a `make test` run's CPU goes, by tier and by program, from BSD process accounting.

    accton /tmp/pacct                      # as root; Debian's `acct` package
    bash .ci/run > /tmp/ci.log; accton off
    .venv/bin/python bench/ci_cpu.py /tmp/pacct /tmp/ci.log

`make test`'s own CPU column (hack/run-tiers.sh) counts a step's processes and what they
waited for, not the daemons a tier leaves to init: control planes, kubelets, containerd and
the training containers. Accounting records every process that exits with its CPU time, its
parent and its start. Each process is given to the tier whose `make test-<tier>` it descends
from (the log's "=== make <target> (HH:MM:SS)" lines say when each started); what descends
from none (daemons reparented to init) is "detached", and its training containers (Python
under containerd-shim) are counted apart. Prints markdown tables (bench/results/ keeps them).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

START = re.compile(r"^=== make (\S+) \((\d\d:\d\d:\d\d)\)")
DETACHED, CONTAINERS = "detached", "detached: training containers"


@dataclass(frozen=True)
class Proc:
    comm: str
    cpu_s: float
    pid: int
    ppid: int
    start: float  # unix seconds, whole
    elapsed_s: float


def read_accounting(pacct: Path) -> list[Proc]:
    """The records `dump-acct` prints (ticks of 1/100 s for CPU and elapsed time)."""
    out = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True)
    procs = []
    for line in out.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 15:
            continue
        when = datetime.strptime(f[14], "%a %b %d %H:%M:%S %Y").timestamp()
        cpu = (float(f[2]) + float(f[3])) / 100
        procs.append(Proc(f[0], cpu, int(f[9]), int(f[10]), when, float(f[4]) / 100))
    return procs


def tier_starts(log: Path) -> dict[str, str]:
    """HH:MM:SS each `make` target of the run started, by target."""
    found = (START.match(line) for line in log.read_text(errors="replace").splitlines())
    return {m.group(1): m.group(2) for m in found if m}


def _seconds(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def _roots(procs: list[Proc], starts: dict[str, str]) -> dict[int, str]:
    """The `make` process of each step. The log's clock and the record's start can differ by
    a second; a step's make runs for more than a few."""
    return {
        i: target
        for i, p in enumerate(procs)
        for target, hms in starts.items()
        if p.comm == "make"
        and p.elapsed_s > 5
        and abs(_seconds(datetime.fromtimestamp(p.start).strftime("%H:%M:%S")) - _seconds(hms)) <= 1
    }


def _parents(procs: list[Proc]) -> list[int | None]:
    """Each process's parent record: pids are reused, so the one alive when it started."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(procs):
        by_pid[p.pid].append(i)

    def parent(child: Proc) -> int | None:
        alive = [
            j
            for j in by_pid.get(child.ppid, [])
            if procs[j].start <= child.start + 1
            and procs[j].start + procs[j].elapsed_s >= child.start - 1
        ]
        return max(alive, key=lambda j: procs[j].start) if alive else None

    return [parent(p) for p in procs]


def classify(procs: list[Proc], starts: dict[str, str]) -> dict[int, str]:
    """Each process's tier (by index in procs)."""
    roots, parents = _roots(procs, starts), _parents(procs)
    tiers: dict[int, str] = {}
    for i, p in enumerate(procs):
        cur: int | None = i
        for _ in range(64):  # a deeper chain than any step makes is a loop of reused pids
            if cur is None or cur in roots:
                break
            cur = parents[cur]
        if cur is not None and cur in roots:
            tiers[i] = roots[cur]
            continue
        up = parents[i]
        shim = up is not None and procs[up].comm.startswith("containerd-shim")
        tiers[i] = CONTAINERS if p.comm == "python" and shim else DETACHED
    return tiers


def tables(procs: list[Proc], tiers: dict[int, str], top: int) -> str:
    by_tier: Counter[str] = Counter()
    by_tier_comm: dict[str, Counter[str]] = defaultdict(Counter)
    by_comm: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    for i, p in enumerate(procs):
        by_tier[tiers[i]] += p.cpu_s
        by_tier_comm[tiers[i]][p.comm] += p.cpu_s
        by_comm[p.comm] += p.cpu_s
        runs[p.comm] += 1
    total = sum(by_comm.values()) / 60
    lines = [f"{total:.1f} CPU-minutes in {len(procs)} processes", ""]
    lines += ["| where | CPU minutes | most of it |", "|---|---:|---|"]
    for tier, s in by_tier.most_common():
        most = ", ".join(f"{c} {v / 60:.1f}" for c, v in by_tier_comm[tier].most_common(4))
        lines.append(f"| {tier} | {s / 60:.1f} | {most} |")
    lines += ["", "| program | CPU minutes | runs |", "|---|---:|---:|"]
    lines += [f"| {c} | {s / 60:.2f} | {runs[c]} |" for c, s in by_comm.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pacct", type=Path, help="the accounting file accton wrote")
    parser.add_argument("log", type=Path, help="the run's output (`bash .ci/run > LOG`)")
    parser.add_argument("--top", type=int, default=15, help="programs to list")
    args = parser.parse_args(argv)
    for path in (args.pacct, args.log):
        if not path.is_file():
            print(f"ci_cpu: {path}: not a regular file", file=sys.stderr)
            return 2
    procs = read_accounting(args.pacct)
    print(tables(procs, classify(procs, tier_starts(args.log)), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
