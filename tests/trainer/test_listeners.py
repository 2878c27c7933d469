"""Ranks whose workers are all on this machine listen on loopback only: the rendezvous store
(which PyTorch's own tcp:// rendezvous binds to every interface) and gloo's pair sockets,
while two real gloo ranks train an all-reduce (docs/security.md "Which ports listen where")."""

from __future__ import annotations

import ipaddress
import multiprocessing as mp
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubegan_api import contract
from kubegan_trainer.launch.ports import reserve_ports

TCP_LISTEN = "0A"  # the state column of /proc/net/tcp{,6}


def listening_addresses(pid: int) -> list[str]:
    """The local addresses of every TCP socket process `pid` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed since the directory was read
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == TCP_LISTEN and fields[9] in inodes:
                raw = bytes.fromhex(fields[1].split(":")[0])
                # /proc writes each 32-bit word in host (little-endian) order.
                words = [raw[i : i + 4][::-1] for i in range(0, width, 4)]
                found.append(str(ipaddress.ip_address(b"".join(words))))
    return found


def rank(index: int, port: int, out: Any) -> None:
    import torch
    import torch.distributed as dist
    from kubegan_trainer.backends.torch.entry import _rendezvous
    from kubegan_trainer.worker.cluster_env import ClusterEnv

    env = ClusterEnv.from_environ(
        {
            contract.ENV_MASTER_ADDR: contract.LOCAL_ADDR,
            contract.ENV_MASTER_PORT: str(port),
            contract.ENV_NNODES: "2",
            contract.ENV_NODE_RANK: str(index),
        }
    )
    _rendezvous(env, "gloo", index, 2, timedelta(seconds=60))
    total = torch.ones(2) * (index + 1)
    dist.all_reduce(total)
    out.put((index, total.tolist(), listening_addresses(os.getpid())))
    dist.barrier()
    dist.destroy_process_group()


def test_local_ranks_listen_on_loopback_only() -> None:
    (port,) = reserve_ports(1)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank, args=(i, port, out)) for i in range(2)]
    for p in procs:
        p.start()
    seen = {i: (total, where) for i, total, where in (out.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    for total, where in seen.values():
        assert total == [3.0, 3.0]  # the ranks did meet
        assert where, "no listener found: the test reads no sockets"
        assert all(ipaddress.ip_address(a).is_loopback for a in where), where
    assert len(seen[0][1]) >= 2  # rank 0: the store and gloo's own listener
