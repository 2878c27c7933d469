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

import errno
import ipaddress
import os
import selectors
import socket
import sys
import time
from datetime import timedelta
from typing import Any

from kubegan_api.contract import LOCAL_ADDR

from kubegan_trainer.worker.cluster_env import ClusterEnv

LISTEN_BACKLOG = 128
# How often a rank looks for rank 0's store before joining (wait_for_store), and how long each
# look waits for an answer.
STORE_POLL_SECONDS = 0.05
STORE_PROBE_SECONDS = 0.25
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


def join_host(env: ClusterEnv, rank: int) -> str:
    """Where `rank` connects to the store. Rank 0 serves it, on every interface (above), and
    joins it at loopback: for a few seconds after a restart its own name may still resolve
    to the pod it replaced, and a connection there got no answer for 3 to 72 s on real nodes.
    The others at MASTER_ADDR (then at the address of it that answers, wait_for_store)."""
    if all_local(env) or rank == 0:
        return LOCAL_ADDR
    assert env.master_addr
    return env.master_addr


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


def wait_for_store(host: str, port: int, timeout: float) -> str | None:
    """Wait until rank 0's store accepts connections: the address that accepted (join there,
    not at `host`), or None after `timeout` seconds.

    After a gang restart every rank starts at about the same time, and torch's store client
    tries again after a refused connection (or a name that does not resolve yet) only after
    a backoff that grows: a rank that asked first joined up to 1.4 s late. Polled here every
    50 ms, it joins as soon as the store listens.

    The name of a new worker 0 may still resolve to the pod it replaced for a few seconds
    (the cluster's DNS caches the answer, the endpoints catch up): connections there get no
    answer at all (a gang's rendezvous waited 3 s, once 135 s, on real nodes), and torch's
    client resolves the name again. So every address is tried at once, and the rank joins at
    the one that answered. On None the caller joins at `host` anyway, and torch says what is
    wrong."""
    deadline = time.monotonic() + timeout
    while True:
        found = answering_address(host, port, STORE_PROBE_SECONDS)
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(STORE_POLL_SECONDS)


def answering_address(host: str, port: int, wait: float) -> str | None:
    """The first of `host`'s addresses to accept a TCP connection on `port` within `wait`
    seconds, all tried at once (so one that drops the attempt delays none of the others)."""
    try:
        candidates = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:  # no such name (yet)
        return None
    selector = selectors.DefaultSelector()
    try:
        for family, kind, proto, _, address in candidates:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            if sock.connect_ex(address) in (0, errno.EINPROGRESS):
                selector.register(sock, selectors.EVENT_WRITE, address[0])
            else:
                sock.close()
        end = time.monotonic() + wait
        while selector.get_map() and (left := end - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    return str(key.data)
                selector.unregister(sock)
                sock.close()
        return None
    finally:
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()


def url_host(address: str) -> str:
    """An address as the host of a URL: an IPv6 one in brackets."""
    return f"[{address}]" if ":" in address else address
