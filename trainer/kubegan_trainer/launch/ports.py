"""TCP ports for local processes that cannot collide with the machine's other traffic.

`bind(0)` hands out a port from the kernel's ephemeral range, the same range every outgoing
connection takes its local port from: a port chosen that way and handed to a server a moment
later can already be the local end of someone's connection (etcd was given a port that a
kube-controller-manager's connection to its apiserver held). So ports come from outside that
range, each is proven free by binding it on every address (never by connecting to it: an
established connection answers nothing and looks free), and a short lease file keeps two
processes on this machine from picking the same one before either has bound it.

One helper for every place that needs a port: `kubegan run`, the tests, the benchmarks and the
hack/ scripts (as a script: `python3 trainer/kubegan_trainer/launch/ports.py [--span N]
COUNT` prints COUNT ports, `--check PORT...` exits 1 naming the first port that is taken).
Standard library only, so the scripts can run it before any virtualenv exists.

A port about to be given to a server of ours is checked the way that server binds it
(`--check PORT --host ADDRESS --reuse-addr`): on its own address, with SO_REUSEADDR as every Go
server sets it. Only a listener (or a socket bound without SO_REUSEADDR) on that address then
counts; connections that are closing (TIME_WAIT, FIN-WAIT-1 towards a network namespace that is
gone) do not, as they do not keep the server from binding.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default when /proc cannot be read (another OS, a locked-down container).
DEFAULT_EPHEMERAL = (32768, 60999)
# Below this are the well-known and the commonly configured service ports (6443, 8080, 9090,
# 10250, ...): a user's own servers default to them.
LOWEST = 20000
HIGHEST = 65535
# One lease folder per user: nobody else can write (or plant links) in it.
LEASE_DIR = Path(tempfile.gettempdir()) / f"kubegan-ports-{os.getuid()}"
# A lease only has to cover the time from choosing a port to the server binding it.
LEASE_SECONDS = 600.0
ATTEMPTS = 200


class NoFreePort(OSError):
    """No usable port was found outside the ephemeral range."""


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (inclusive)."""
    try:
        low, high = (int(part) for part in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= HIGHEST else DEFAULT_EPHEMERAL


def candidate_ranges(span: int, ephemeral: tuple[int, int]) -> list[range]:
    """Where a block of `span` consecutive ports may start: inside [LOWEST, HIGHEST], with no
    port of the block in the ephemeral range."""
    low, high = ephemeral
    below = range(LOWEST, min(low, HIGHEST + 1) - span + 1)
    above = range(max(high + 1, LOWEST), HIGHEST - span + 2)
    return [r for r in (below, above) if len(r) > 0]


def is_bindable(port: int, *, reuse_addr: bool = False, host: str = "0.0.0.0") -> bool:
    """True when `port` can be bound on `host` right now; on the default, every IPv4 address (a
    listener on any one address makes the wildcard bind fail). Without `reuse_addr` any socket
    on the port counts as taken, one still in TIME_WAIT or FIN-WAIT too: strict, for ports
    handed out to others. A server that binds with SO_REUSEADDR itself (the operator's, and
    every Go server: the control plane's) is checked with `reuse_addr=True` and the address it
    binds, as the kernel will judge its own bind: its connections from a moment ago, still
    closing, would otherwise keep it from starting again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse_addr:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _lease(port: int, now: float) -> bool:
    """Take this user's lease on `port`; False when another process holds a fresh one. Without
    a usable lease folder the bind check alone decides (True)."""
    try:
        LEASE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        usable = LEASE_DIR.is_dir() and not LEASE_DIR.is_symlink() and os.access(LEASE_DIR, os.W_OK)
    except OSError:
        usable = False
    if not usable:
        return True
    path = LEASE_DIR / str(port)
    try:
        if now - path.lstat().st_mtime < LEASE_SECONDS:
            return False
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.EACCES, errno.EPERM, errno.ELOOP):
            return False
        raise
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    return True


def reserve_ports(
    count: int = 1,
    *,
    span: int = 1,
    rng: random.Random | None = None,
    ephemeral: tuple[int, int] | None = None,
) -> list[int]:
    """`count` ports, each the first of `span` consecutive free ports (etcd: client port and
    peer port + 1), none in the ephemeral range, each bound once to prove it free and leased."""
    rng = rng or random.Random()
    ranges = candidate_ranges(span, ephemeral or ephemeral_range())
    if not ranges:
        raise NoFreePort(f"no room for {span} consecutive ports outside the ephemeral range")
    chosen: list[int] = []
    for _ in range(ATTEMPTS * count):
        if len(chosen) == count:
            break
        where = rng.choice(ranges)
        first = rng.randrange(where.start, where.stop)
        block = range(first, first + span)
        if any(p in range(c, c + span) for c in chosen for p in block):
            continue
        if all(is_bindable(p) for p in block) and all(_lease(p, time.time()) for p in block):
            chosen.append(first)
    if len(chosen) < count:
        raise NoFreePort(f"found {len(chosen)} of {count} free ports after {ATTEMPTS} tries each")
    return chosen


def reserve_port(preferred: int | None = None) -> int:
    """`preferred` when it can be bound now (a user's configured port), else a reserved one."""
    if preferred and is_bindable(preferred):
        return preferred
    return reserve_ports(1)[0]


def taken(ports: list[int], *, reuse_addr: bool = False, host: str = "0.0.0.0") -> int | None:
    """The first of `ports` that cannot be bound (as `is_bindable` binds), or None."""
    return next((p for p in ports if not is_bindable(p, reuse_addr=reuse_addr, host=host)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ports.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("count", nargs="?", type=int, default=1, help="ports to print")
    parser.add_argument("--span", type=int, default=1, help="consecutive free ports per port")
    parser.add_argument("--check", type=int, nargs="+", metavar="PORT", help="exit 1 if taken")
    parser.add_argument(
        "--host", default="0.0.0.0", help="--check: the address the server binds (default: all)"
    )
    parser.add_argument(
        "--reuse-addr",
        action="store_true",
        help="--check: bind with SO_REUSEADDR, as the server does (closing connections are free)",
    )
    args = parser.parse_args(argv)
    if args.check:
        busy = taken(args.check, reuse_addr=args.reuse_addr, host=args.host)
        if busy is not None:
            print(f"port {busy} is in use", file=sys.stderr)
            return 1
        return 0
    try:
        print(*reserve_ports(args.count, span=args.span))
    except NoFreePort as err:
        print(f"ports.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
