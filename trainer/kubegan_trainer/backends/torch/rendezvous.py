"""Where the ranks of a PyTorch job meet, and what listens where while they do.

Rank 0 serves the rendezvous store (a TCPStore) on MASTER_PORT; gloo and NCCL then open
connections of their own on ports they pick. PyTorch's `tcp://` rendezvous binds the store to
every interface whatever address it is given, so in a pod of a one-worker job (all ranks are
that pod's GPUs) and under `kubegan run` (every worker on this machine) the store would
still take connections from the whole cluster or LAN. There, where every rank is local, rank
0 binds the store's socket to loopback itself and hands it to the TCPStore, and gloo and
NCCL are pointed at the loopback interface (unless the job sets GLOO_SOCKET_IFNAME or
NCCL_SOCKET_IFNAME). A job of several workers needs the store and the collectives on the
pod's address: there the job's NetworkPolicy admits only its own workers.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import time
from datetime import timedelta
from typing import Any

from kubegan_api.contract import LOCAL_ADDR

from kubegan_trainer.worker.cluster_env import ClusterEnv

LISTEN_BACKLOG = 128
# How often a rank looks for rank 0's store before joining (wait_for_store).
STORE_POLL_SECONDS = 0.05
# The collectives' interface variables, set to loopback when every rank is local (Linux).
LOOPBACK_INTERFACE = "lo"
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def all_local(env: ClusterEnv) -> bool:
    """Every rank runs on this machine: one worker (its GPUs' processes), or workers whose
    rendezvous is on loopback (`kubegan run`)."""
    return env.nnodes == 1 or is_loopback(env.master_addr)


def local_collectives(environ: Any = os.environ, platform: str = sys.platform) -> None:
    """Point gloo and NCCL at the loopback interface, unless the job chose one."""
    if platform != "linux":  # elsewhere it is named otherwise (lo0)
        return
    for name in IFNAME_VARIABLES:
        environ.setdefault(name, LOOPBACK_INTERFACE)


def loopback_listener(port: int) -> int:
    """A socket listening on loopback `port`, as a file descriptor the TCPStore takes over."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As TCPStore binds its own: a port a previous gang left in TIME_WAIT is reusable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOCAL_ADDR, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock.detach()  # the store owns it from here; closing the object would close it


def local_store(env: ClusterEnv, rank: int, world: int, timeout: timedelta) -> Any:
    """The rendezvous store of a job whose ranks are all on this machine, on loopback only."""
    import torch.distributed as dist

    port = env.master_port
    assert port is not None
    if rank != 0:
        return dist.TCPStore(LOCAL_ADDR, port, world, False, timeout=timeout)
    return dist.TCPStore(
        LOCAL_ADDR,
        port,
        world,
        True,
        timeout=timeout,
        wait_for_workers=False,
        multi_tenant=True,
        master_listen_fd=loopback_listener(port),
    )


def wait_for_store(host: str, port: int, timeout: float) -> bool:
    """Wait until rank 0's store accepts connections (True), or `timeout` seconds (False).

    torch's store client tries again after a refused connection or an address that does not
    resolve yet (a new worker 0's DNS name) only after a backoff that grows, and after a gang
    restart every rank starts at about the same time, so a rank that asked first joined up to
    1.4 s late. Polled here every 50 ms, it joins as soon as the store listens. On False the
    caller joins anyway and torch says what is wrong."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return True
        except OSError:  # refused, unreachable, or no such name yet
            if time.monotonic() >= deadline:
                return False
            time.sleep(STORE_POLL_SECONDS)
