"""The one port helper: never a port of the ephemeral range, never one that is bound (also not
one an established connection owns, which a connect probe calls free), leased across callers."""

from __future__ import annotations

import random
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from kubegan_trainer.launch import ports

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def own_leases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "LEASE_DIR", tmp_path / "leases")


def listen(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


@contextmanager
def established(server_port: int, client_port: int) -> Iterator[None]:
    """A connection on loopback from `client_port` to a listener on `server_port`, open while
    the block runs: nobody listens on `client_port`, yet it is taken."""
    with listen(server_port) as server, socket.socket() as client:
        client.bind(("127.0.0.1", client_port))
        client.connect(("127.0.0.1", server_port))
        conn, _ = server.accept()
        with conn:
            yield


def window(monkeypatch: pytest.MonkeyPatch, low: int, size: int) -> range:
    """Only `size` ports starting at `low` are candidates (the rest is 'ephemeral')."""
    monkeypatch.setattr(ports, "LOWEST", low)
    monkeypatch.setattr(ports, "ephemeral_range", lambda *_: (low + size, 65535))
    return range(low, low + size)


def a_free_window(size: int) -> int:
    """The start of `size` consecutive ports bindable now, below the machine's ephemeral range."""
    low, _ = ports.ephemeral_range()
    rng = random.Random()
    for _ in range(500):
        start = rng.randrange(ports.LOWEST, low - size)
        if all(ports.is_bindable(p) for p in range(start, start + size)):
            return start
    raise AssertionError("no free window of ports on this machine")


def test_reads_the_kernels_range(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ports.ephemeral_range(f) == (40000, 50000)
    f.write_text("garbage")
    assert ports.ephemeral_range(f) == ports.DEFAULT_EPHEMERAL
    assert ports.ephemeral_range(tmp_path / "missing") == ports.DEFAULT_EPHEMERAL


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (1024, 65535 - 50), (20000, 30000)])
def test_never_a_port_of_the_ephemeral_range(ephemeral: tuple[int, int]) -> None:
    rng = random.Random(4)
    got = ports.reserve_ports(20, span=2, rng=rng, ephemeral=ephemeral)
    assert len(set(got)) == 20
    for port in got:
        for p in (port, port + 1):
            assert not ephemeral[0] <= p <= ephemeral[1], (p, ephemeral)
            assert ports.LOWEST <= p <= 65535


def test_no_room_outside_the_range_is_said() -> None:
    with pytest.raises(ports.NoFreePort, match="outside the ephemeral range"):
        ports.reserve_ports(1, ephemeral=(1, 65535))


def test_never_a_port_that_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    start = a_free_window(12)
    candidates = window(monkeypatch, start, 12)
    with ExitStack() as held:
        for p in candidates:
            if p != start + 7:
                held.enter_context(listen(p))
        assert ports.reserve_ports(1) == [start + 7]
        # ... and once that one is leased, nothing is left to give.
        with pytest.raises(ports.NoFreePort):
            ports.reserve_ports(1)


def test_a_port_an_established_connection_owns_is_not_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start = a_free_window(2)
    server_port, client_port = start, start + 1
    with established(server_port, client_port):
        # A connect probe sees nothing listening on the client's port and calls it free.
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", client_port)) != 0
        assert not ports.is_bindable(client_port)
        window(monkeypatch, client_port, 1)
        with pytest.raises(ports.NoFreePort):
            ports.reserve_ports(1)


def test_a_block_is_free_as_a_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    start = a_free_window(6)
    window(monkeypatch, start, 6)
    # start+1 taken: blocks of two can start only at start+2, start+3 or start+4.
    with listen(start + 1):
        got = ports.reserve_ports(1, span=2, rng=random.Random(1))
    assert got[0] in (start + 2, start + 3, start + 4)


def test_leases_keep_two_callers_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    start = a_free_window(4)
    window(monkeypatch, start, 4)
    first = set(ports.reserve_ports(2))
    second = set(ports.reserve_ports(2))
    assert first.isdisjoint(second) and first | second == set(range(start, start + 4))


def test_a_stale_lease_is_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    start = a_free_window(1)
    window(monkeypatch, start, 1)
    assert ports.reserve_ports(1) == [start]
    monkeypatch.setattr(ports, "LEASE_SECONDS", 0.0)
    assert ports.reserve_ports(1) == [start]


def test_preferred_port_when_bindable_else_another() -> None:
    start = a_free_window(1)
    assert ports.reserve_port(start) == start
    with listen(start):
        assert ports.reserve_port(start) != start


def test_script_prints_and_checks(tmp_path: Path) -> None:
    script = ROOT / "trainer" / "kubegan_trainer" / "launch" / "ports.py"
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(script), "3", "--span", "2"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    assert len(out) == 3 and all(int(p) >= ports.LOWEST for p in out)
    start = a_free_window(1)
    with listen(start):
        busy = subprocess.run(
            [sys.executable, str(script), "--check", str(start)], capture_output=True, text=True
        )
    assert busy.returncode == 1 and f"port {start} is in use" in busy.stderr
    free = subprocess.run([sys.executable, str(script), "--check", str(start)])
    assert free.returncode == 0


def sources() -> Iterator[Path]:
    for top in ("tests", "bench", "hack", "api", "trainer", "operator"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".sh") and path.is_file():
                yield path


def test_nothing_else_picks_a_port_by_bind_zero_or_by_connecting() -> None:
    """Acceptance: one helper; no `bind((host, 0))` and no connect probe deciding a port."""
    bind_zero = re.compile(r"\.bind\(\(\s*[^,]+,\s*0\s*\)\)")
    probe = re.compile(r"port_free\(\)[^\n]*/dev/tcp")
    offenders = [
        str(p.relative_to(ROOT))
        for p in sources()
        if bind_zero.search(p.read_text()) or probe.search(p.read_text())
    ]
    assert offenders == []


def test_time_wait_is_taken_for_others_but_not_for_a_server_that_reuses_addresses() -> None:
    """A restarted operator's own connections from a moment ago sit in TIME_WAIT on its port:
    the strict check refuses the port, the check the operator uses (as its servers bind, with
    SO_REUSEADDR) does not."""
    port = a_free_window(1)
    with socket.socket() as server, socket.socket() as client:
        # the servers (prometheus_client, aiohttp) set SO_REUSEADDR, and so do their sockets
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen()
        client.connect(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server's side closes first: its end waits in TIME_WAIT
        client.recv(1)
    assert not ports.is_bindable(port)
    assert ports.is_bindable(port, reuse_addr=True)


FIN_WAIT1 = "04"  # the state column of /proc/net/tcp


def tcp_states(port: int) -> list[str]:
    """The states of this namespace's IPv4 TCP sockets whose local port is `port`."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return [f[3] for f in (r.split() for r in rows) if int(f[1].rsplit(":", 1)[1], 16) == port]


def test_a_connection_left_closing_is_free_for_a_server_but_a_listener_is_not() -> None:
    """After the real nodes' namespaces went, the apiserver port of a stopped cluster held
    connections in FIN-WAIT-1 with data nobody acknowledged, for minutes. cluster-up checks its
    ports as its servers bind them (127.0.0.1, SO_REUSEADDR, as Go sets it): such a socket does
    not keep a server from binding, so it does not count; a listener does."""
    port = a_free_window(1)
    script = ROOT / "trainer" / "kubegan_trainer" / "launch" / "ports.py"
    as_server = [sys.executable, str(script), "--check", str(port), "--host", "127.0.0.1"]
    with socket.socket() as server, socket.socket() as peer:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a Go server's
        server.bind(("127.0.0.1", port))
        server.listen()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        peer.connect(("127.0.0.1", port))
        conn, _ = server.accept()
        server.close()  # the server stops ...
        # ... while its connection has data the peer does not take (as a peer that is gone
        # acknowledges nothing): it is closed with the data still queued, so it stays in
        # FIN-WAIT-1 after the server has exited.
        conn.setblocking(False)
        with pytest.raises(BlockingIOError):
            while True:
                conn.send(b"x" * 65536)
        conn.close()
        assert FIN_WAIT1 in tcp_states(port)
        assert not ports.is_bindable(port)  # strict: any socket on the port counts
        assert ports.is_bindable(port, reuse_addr=True, host="127.0.0.1")
        assert subprocess.run([*as_server, "--reuse-addr"]).returncode == 0
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))  # what the check said: the server binds again
            again.listen()
            assert not ports.is_bindable(port, reuse_addr=True, host="127.0.0.1")
            assert subprocess.run([*as_server, "--reuse-addr"]).returncode == 1
    assert FIN_WAIT1 not in tcp_states(port)  # the peer's close reset what was left


def test_a_listener_on_every_address_or_a_client_connection_is_taken_for_a_server() -> None:
    """The check as a server binds still refuses a port someone listens on with the wildcard
    address, and one an established connection holds as its local end (nobody listens there:
    a connect probe would call it free; the server's bind fails all the same)."""
    start = a_free_window(2)
    with socket.socket() as wildcard:
        wildcard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        wildcard.bind(("0.0.0.0", start))
        wildcard.listen()
        assert not ports.is_bindable(start, reuse_addr=True, host="127.0.0.1")
    server_port, client_port = start, start + 1
    with established(server_port, client_port):
        assert not ports.is_bindable(client_port, reuse_addr=True, host="127.0.0.1")
