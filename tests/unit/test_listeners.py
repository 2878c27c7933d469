"""Which rendezvous a PyTorch rank joins: on loopback when every rank is on this machine (a
one-worker job, `kubegan run`), at MASTER_ADDR otherwise; the collectives follow it to the
loopback interface unless the job names one (tests/trainer/test_listeners.py runs ranks)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from kubegan_api import contract
from kubegan_trainer.backends.torch.rendezvous import (
    IFNAME_VARIABLES,
    all_local,
    is_loopback,
    join_host,
    local_collectives,
    url_host,
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


@pytest.mark.parametrize(("nnodes", "rank", "host"), [
    (2, 0, contract.LOCAL_ADDR),  # its own store: never through its name, which may be stale
    (2, 1, "g-worker-0.g.ml.svc"),
    (1, 1, contract.LOCAL_ADDR),  # one pod's GPUs
])  # fmt: skip
def test_where_each_rank_joins_the_store(nnodes: int, rank: int, host: str) -> None:
    assert join_host(env(nnodes, "g-worker-0.g.ml.svc"), rank) == host


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
        assert wait_for_store(contract.LOCAL_ADDR, port, timeout=30.0) == contract.LOCAL_ADDR
        timer.join(10)
        assert len(accepted) == 1  # the probe reached the store, and only once
    finally:
        timer.cancel()
        for conn in accepted:
            conn.close()
        server.close()


@pytest.mark.parametrize("host", [contract.LOCAL_ADDR, "no-such-worker-0.invalid"])
def test_a_rank_stops_waiting_at_the_deadline(host: str) -> None:
    # Refused, or a name that does not resolve (yet): None, and torch's join says why.
    assert wait_for_store(host, ports.reserve_port(), timeout=0.2) is None


STALE_ADDR = "127.0.0.2"  # the pod a new worker 0 replaced, still in the DNS answer


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port on STALE_ADDR that drops connection attempts, as an address with no pod behind
    it does: a listener whose accept queue is full (Linux drops the SYN)."""
    port = ports.reserve_port()
    server = socket.socket()
    server.bind((STALE_ADDR, port))
    server.listen(0)
    fillers = []
    for _ in range(3):  # backlog 0 queues one; the rest wait in SYN-SENT or are dropped
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex((STALE_ADDR, port))
        fillers.append(c)
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        with pytest.raises(TimeoutError):  # the premise: no answer, not a refusal
            probe.connect((STALE_ADDR, port))
        yield port
    finally:
        probe.close()
        for c in fillers:
            c.close()
        server.close()


def test_a_rank_joins_at_the_address_that_answers_not_at_a_stale_one(
    black_hole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = black_hole
    store = socket.socket()
    store.bind((contract.LOCAL_ADDR, port))
    store.listen(8)
    stale_first = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (STALE_ADDR, port)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (contract.LOCAL_ADDR, port)),
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: stale_first)
    try:
        # Tried one after the other, the stale address would hold the join for its whole
        # connect timeout; and the name, resolved again by torch, may give it once more.
        assert wait_for_store("g-worker-0.g.ml.svc", port, timeout=30.0) == contract.LOCAL_ADDR
    finally:
        store.close()


def test_a_rank_gives_up_on_an_address_that_never_answers(
    black_hole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_stale = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (STALE_ADDR, black_hole))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: only_stale)
    assert wait_for_store("g-worker-0.g.ml.svc", black_hole, timeout=0.5) is None


@pytest.mark.parametrize(("address", "host"), [("10.4.0.7", "10.4.0.7"), ("fd00::7", "[fd00::7]")])
def test_an_address_as_a_url_host(address: str, host: str) -> None:
    assert url_host(address) == host
