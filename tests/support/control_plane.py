"""A control plane of its own (hack/cluster-up.sh) on ports nobody else holds, for the test
tiers and the benchmarks that must not share the developer's `make cluster-up` cluster.

Ports come from the repo's one port helper (kubegan_trainer.launch.ports: outside the ephemeral
range, proven by binding, leased). A bind can still lose a race to a process that does not
ask the helper, so a start that fails on a taken port is stopped and tried again on others.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL
from kubegan_trainer.launch.ports import reserve_ports

from tests.support.kube import Operator

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
ATTEMPTS = 3
# What cluster-up.sh and the components print when a port was taken between choice and bind.
PORT_TAKEN = ("address already in use", "is in use by another process")
# What cluster-up.sh prints when a component died while starting (seen once: etcd, on a machine
# at load 8, its log gone with the failed start's folder): tried again, its log kept first.
DIED_STARTING = "exited while waiting for"


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


def _log_files(cluster_dir: Path) -> list[Path]:
    logs = cluster_dir / "logs"
    return sorted(logs.glob("*.log")) if logs.is_dir() else []


def component_logs(cluster_dir: Path, lines: int = 15) -> str:
    """The last lines of each component's log, to say why a start failed."""
    tails = []
    for log in _log_files(cluster_dir):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(tails)


def lost_port_race(output: str, cluster_dir: Path) -> bool:
    """Whether a failed start failed because a port was taken (its output or a component log)."""
    texts = [output] + [log.read_text(errors="replace")[-20000:] for log in _log_files(cluster_dir)]
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
        race = lost_port_race(output, cluster_dir)
        died = DIED_STARTING in output
        output += "\n" + component_logs(cluster_dir)
        # Whatever it started before failing goes too: a start that failed late (applying the
        # CRDs, say) had left a whole control plane running with nothing to stop it.
        cluster_down(started)
        if not (race or died):
            break
        why = "lost a port race" if race else "had a component die while starting"
        on_retry(f"control plane start {attempt} {why}; trying again on other ports")
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


@dataclass(frozen=True)
class PrivateCluster:
    """A control plane of one's own (cluster_up in its own directory): its environment (ports,
    KUBECONFIG) and a kubectl bound to it."""

    env: dict[str, str]
    dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against this control plane; raises AssertionError naming the command and
        kubectl's message when it fails and `check` is set."""
        result = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, *docs: Mapping[str, Any]) -> None:
        """Server-side apply of objects (JSON is YAML), so re-applying a helper's object is
        idempotent."""
        text = "\n---\n".join(json.dumps(d) for d in docs)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Wait until CRDs (by name) are Established. `kubectl wait` alone fails at once on a
        CRD created a moment ago, before the apiserver has written any condition."""
        deadline = time.monotonic() + timeout
        args = ["wait", "--for=condition=Established", "--timeout=10s", *(f"crd/{c}" for c in crds)]
        while True:
            result = self.kubectl(*args, check=False, timeout=30)
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"CRDs not Established: {result.stderr.strip()}")
            time.sleep(0.5)

    def get(self, kind: str, name: str = "", namespace: str = "", selector: str = "") -> Any:
        """The object (or, without a name, the list's items) as JSON; None when not found."""
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        args += ["-n", namespace] if namespace else []
        args += ["-l", selector] if selector else []
        result = self.kubectl(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        data = json.loads(result.stdout)
        return data if name else data["items"]


@dataclass
class OperatedCluster:
    """A private control plane with an operator of its own, and the reads of a job that the
    tests of such a cluster (native gang, Kueue) all make."""

    cluster: PrivateCluster
    operator: Operator

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return (self.cluster.get("gantrainingjob", name, ns) or {}).get("status") or {}

    def pods(self, ns: str, name: str) -> list[dict[str, Any]]:
        """The job's pods, in name order."""
        pods = self.cluster.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}")
        return sorted(pods, key=lambda p: p["metadata"]["name"])


@contextmanager
def private_control_plane(work_dir: Path, *, native_gang: bool = False) -> Iterator[PrivateCluster]:
    """A control plane of its own under `work_dir` on leased ports, stopped and removed on exit.
    native_gang: Kubernetes' own gang scheduling on (KUBEGAN_NATIVE_GANG, hack/cluster-up.sh)."""
    cluster_dir = work_dir / "cluster"
    env = base_env(cluster_dir, KUBEGAN_NATIVE_GANG="true" if native_gang else "false")
    started = cluster_up(env)
    try:
        yield PrivateCluster(env=started, dir=cluster_dir)
    finally:
        cluster_down(started)
