"""A control plane of its own (hack/cluster-up.sh) on ports nobody else holds, for the test
tiers and the benchmarks that must not share the developer's `make cluster-up` cluster.

Ports come from the repo's one port helper (kubegan_trainer.ports: outside the ephemeral
range, proven by binding, leased). A bind can still lose a race to a process that does not
ask the helper, so a start that fails on a taken port is stopped and tried again on others.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from kubegan_trainer.ports import reserve_ports

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
ATTEMPTS = 3
# What cluster-up.sh and the components print when a port was taken between choice and bind.
PORT_TAKEN = ("address already in use", "is in use by another process")


def control_plane_ports() -> dict[str, str]:
    """cluster-up.sh's port variables; etcd's block is two ports wide (its peer is port + 1)."""
    apiserver, kcm, scheduler = reserve_ports(3)
    (etcd,) = reserve_ports(1, span=2)
    return {
        "KUBEGAN_APISERVER_PORT": str(apiserver),
        "KUBEGAN_ETCD_PORT": str(etcd),
        "KUBEGAN_KCM_PORT": str(kcm),
        "KUBEGAN_SCHEDULER_PORT": str(scheduler),
    }


def lost_port_race(output: str, cluster_dir: Path) -> bool:
    """Whether a failed start failed because a port was taken (its output or a component log)."""
    logs = sorted((cluster_dir / "logs").glob("*.log")) if (cluster_dir / "logs").is_dir() else []
    texts = [output] + [log.read_text(errors="replace")[-20000:] for log in logs]
    return any(marker in text for text in texts for marker in PORT_TAKEN)


def cluster_up(
    env: Mapping[str, str],
    *,
    timeout: float = 900,
    on_retry: Callable[[str], None] = lambda _: None,
) -> dict[str, str]:
    """Start hack/cluster-up.sh for `env`'s KUBEGAN_CLUSTER_DIR on fresh ports; returns the
    environment it started with (ports included). Raises AssertionError with the output when
    the start fails for any other reason, or loses the port race ATTEMPTS times."""
    cluster_dir = Path(env["KUBEGAN_CLUSTER_DIR"])
    output = ""
    for attempt in range(1, ATTEMPTS + 1):
        started = {**env, **control_plane_ports()}
        proc = subprocess.run(
            ["bash", str(HACK / "cluster-up.sh")],
            env=started,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode == 0:
            return started
        output = proc.stdout[-4000:] + proc.stderr[-4000:]
        if not lost_port_race(output, cluster_dir):
            break
        on_retry(f"control plane start {attempt} lost a port race; trying other ports")
        cluster_down(started)
    raise AssertionError(f"hack/cluster-up.sh failed:\n{output}")


def cluster_down(env: Mapping[str, str]) -> None:
    subprocess.run(
        ["bash", str(HACK / "cluster-down.sh")],
        env=dict(env),
        capture_output=True,
        timeout=300,
        check=False,
    )


def base_env(cluster_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "KUBEGAN_CLUSTER_DIR": str(cluster_dir),
        "KUBECONFIG": str(cluster_dir / "kubeconfig"),
        **extra,
    }
