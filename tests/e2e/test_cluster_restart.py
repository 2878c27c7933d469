"""`make cluster-down && make cluster-up` with real nodes up works at once, twice in a row, on
the same ports.

It did not: the relay's connections into the removed node namespaces stayed in FIN-WAIT-1 on
the apiserver port (data nobody acknowledged, until TCP gave up minutes later), and cluster-up's
port check, which counted any socket on the port, refused the port although nothing listened.
Now real-node-down lets the host's connections with a node close before its network goes, and
cluster-up checks each port as its server binds it (127.0.0.1, SO_REUSEADDR).

Each round streams a pod's log through the apiserver from the kubelet and keeps a pod's
connection to the `kubernetes` Service open (the relay's path, as the operator's), so data is
moving on the node connections when the cluster goes down.

The test brings up a cluster of its own as real-node site `docs` (tests/e2e/
test_readme_local_cluster.py's; the two never run at once) and needs none of the tier's
fixtures, so where it sorts among the modules changes nothing for them; sorted first, it runs
before the tier's own nodes exist.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import node_ready
from tests.support.control_plane import base_env, control_plane_ports
from tests.support.real_nodes import BUSYBOX, RealCluster, leftovers, site

pytestmark = pytest.mark.timeout(1500)
ROOT = Path(__file__).resolve().parents[2]
DOCS = site("docs")
NODE = DOCS.node(1)
# Logs a line five times a second, and keeps a connection to the apiserver's Service open
# through the relay (the apiserver closes the idle one after its TLS handshake timeout; the
# loop opens the next).
CHATTY = (
    "mkfifo /tmp/idle; exec 3<>/tmp/idle;"
    " (while true; do nc 10.0.0.1 443 <&3 >/dev/null; sleep 1; done) &"
    " while true; do echo tick; sleep 0.2; done"
)


def make(target: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc, time.monotonic() - started


def chatty_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "chatty", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", CHATTY],
                }
            ],
        },
    }


def stream_logs(cluster: RealCluster, log: Path) -> subprocess.Popen[bytes]:
    """The chatty pod running, and `kubectl logs -f` of it streaming into `log`."""
    cluster.apply(chatty_pod())
    cluster.kubectl(
        "wait", "pod/chatty", "--for=jsonpath={.status.phase}=Running", "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    with log.open("wb") as out:
        follower = subprocess.Popen(
            [str(cluster.dir / "bin" / "kubectl"), "logs", "-f", "chatty"],
            env=cluster.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while log.read_bytes().count(b"tick") < 3:
        assert follower.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, "no log lines streamed in 60 s"
        time.sleep(0.5)
    return follower


def unclosed(env: dict[str, str]) -> list[str]:
    """The host's TCP connections on the apiserver port or with the site's nodes and pods
    that have not finished closing (TIME-WAIT is finished: it holds no data and binds never
    fail on it with SO_REUSEADDR)."""
    port = env["KUBEGAN_APISERVER_PORT"]
    where = (
        f"( sport = :{port} or dport = :{port}"
        f" or dst {DOCS['NODE_NETWORK']} or dst {DOCS['POD_NETWORK']} )"
    )
    out = subprocess.run(
        ["ss", "-Htn", "state", "connected", "exclude", "time-wait", where],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def failed(what: str, proc: subprocess.CompletedProcess[str]) -> str:
    return f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"


def test_cluster_down_then_up_with_real_nodes_works_at_once_twice(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert os.geteuid() == 0, "real nodes need root"
    assert not leftovers(DOCS), f"site {DOCS.name} is in use: {leftovers(DOCS)}"
    # Short: the kubelet's unix sockets under it must fit in 107 bytes.
    cluster_dir = tmp_path_factory.mktemp("restart")
    logs = tmp_path_factory.mktemp("restart-logs")
    # One set of ports for every start: the next cluster-up takes the port the last one left.
    env = base_env(cluster_dir, REAL_NODES="1", **DOCS.env, **control_plane_ports())
    cluster = RealCluster(env=env, dir=cluster_dir)
    try:
        up, _ = make("cluster-up", env)
        assert up.returncode == 0, failed("the first make cluster-up", up)
        for round_ in (1, 2):
            follower = stream_logs(cluster, logs / f"chatty-{round_}.log")
            down, _ = make("cluster-down", env)
            try:
                follower.wait(timeout=30)  # its apiserver is gone
            except subprocess.TimeoutExpired:
                follower.kill()
                follower.wait()
            assert down.returncode == 0, failed(f"make cluster-down {round_}", down)
            assert unclosed(env) == [], f"round {round_}: connections left half-closed"
            up, took = make("cluster-up", env)
            assert up.returncode == 0, failed(f"make cluster-up {round_} right after down", up)
            assert node_ready(cluster, NODE), f"round {round_}: {NODE} not Ready"
            print(f"round {round_}: make cluster-up took {took:.0f} s")
    finally:
        make("cluster-down", env)
    left = leftovers(DOCS, cluster_dir)
    assert not left, f"make cluster-down left things behind: {left}"
