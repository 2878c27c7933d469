"""Which rendezvous a PyTorch rank joins: on loopback when every rank is on this machine (a
one-worker job, `kubegan run`), at MASTER_ADDR otherwise; the collectives follow it to the
loopback interface unless the job names one (tests/trainer/test_listeners.py runs ranks)."""

from __future__ import annotations

import socket
import threading

import pytest
from kubegan_api import contract
from kubegan_trainer.backends.torch.rendezvous import (
    IFNAME_VARIABLES,
    all_local,
    is_loopback,
    local_collectives,
    wait_for_store,
)
from kubegan_trainer.launch import ports
from kubegan_trainer.worker.cluster_env import ClusterEnv


def env(nnodes: int, master: str) -> ClusterEnv:
    return ClusterEnv.from_environ(
        {
            contract.ENV_NNODES: str(nnodes),
            contract.ENV_MASTER_ADDR: master,
            contract.ENV_MASTER_PORT: str(contract.TORCH_MASTER_PORT),
        }
    )


@pytest.mark.parametrize(
    ("nnodes", "master", "local"),
    [
        (1, "g-worker-0.g.ml.svc", True),  # one pod: its GPUs' processes only
        (2, contract.LOCAL_ADDR, True),  # kubegan run
        (2, "localhost", True),
        (2, "::1", True),
        (2, "g-worker-0.g.ml.svc", False),  # workers in other pods must reach the store
        (4, "10.4.0.7", False),
    ],
)
def test_where_the_store_listens(nnodes: int, master: str, local: bool) -> None:
    assert all_local(env(nnodes, master)) is local


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.2") and not is_loopback("") and not is_loopback(None)
    assert not is_loopback("0.0.0.0") and not is_loopback("not an address")


def test_the_collectives_go_to_loopback_unless_the_job_chose() -> None:
    chosen = {"NCCL_SOCKET_IFNAME": "eth0"}
    local_collectives(chosen, "linux")
    assert chosen == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "lo"}
    empty: dict[str, str] = {}
    local_collectives(empty, "linux")
    assert set(empty) == set(IFNAME_VARIABLES)
    elsewhere: dict[str, str] = {}
    local_collectives(elsewhere, "darwin")  # no interface named lo there: left to gloo
    assert elsewhere == {}


def test_a_rank_waits_for_a_store_that_listens_late() -> None:
    port = ports.reserve_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    accepted: list[socket.socket] = []

    def listen_later() -> None:
        server.bind((contract.LOCAL_ADDR, port))
        server.listen(1)
        accepted.append(server.accept()[0])

    timer = threading.Timer(0.3, listen_later)
    timer.start()
    try:
        assert wait_for_store(contract.LOCAL_ADDR, port, timeout=30.0) is True
        timer.join(10)
        assert len(accepted) == 1  # the probe reached the store, and only once
    finally:
        timer.cancel()
        for conn in accepted:
            conn.close()
        server.close()


@pytest.mark.parametrize("host", [contract.LOCAL_ADDR, "no-such-worker-0.invalid"])
def test_a_rank_stops_waiting_at_the_deadline(host: str) -> None:
    # Refused, or a name that does not resolve (yet): False, and torch's join says why.
    assert wait_for_store(host, ports.reserve_port(), timeout=0.2) is False
