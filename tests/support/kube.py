"""The local control plane as tests see it: kubectl on its kubeconfig, the operator as a process,
waiting, the examples. Shared by the cluster, helm, monitoring and e2e tiers and by bench/
(tests/cluster/conftest.py holds only the fixtures)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubegan_trainer.launch.ports import reserve_ports

ROOT = Path(__file__).resolve().parents[2]


CLUSTER = ROOT / ".cluster"


KUBECONFIG = CLUSTER / "kubeconfig"


FIXTURES = ROOT / "tests" / "cluster" / "fixtures"


EXAMPLES = ROOT / "examples"


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.5
) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def condition(status: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """A job status's condition of `type_` ({} when it has none)."""
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.base = [str(CLUSTER / "bin" / "kubectl"), "--kubeconfig", str(kubeconfig)]

    def run(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.base, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(
        self, obj: dict[str, Any] | str | Path, namespace: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = (
            obj.read_text()
            if isinstance(obj, Path)
            else (obj if isinstance(obj, str) else yaml.safe_dump(obj))
        )
        ns = ["-n", namespace] if namespace else []
        return self.run("apply", *ns, "-f", "-", input=text, check=check)

    def get(
        self,
        kind: str,
        name: str | None = None,
        namespace: str | None = None,
        selector: str | None = None,
    ) -> Any:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        if selector:
            args += ["-l", selector]
        result = self.run(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(result.stderr)
        data = json.loads(result.stdout)
        return data["items"] if name is None else data


class Operator:
    """`kubegan operator` as a subprocess, the way a user runs it."""

    def __init__(
        self, log_dir: Path, *extra_args: str, name: str = "operator", kubeconfig: Path = KUBECONFIG
    ) -> None:
        self.log_path = log_dir / f"{name}.log"
        self.kubeconfig = kubeconfig
        self.extra_args = list(extra_args)
        self.metrics_port, self.health_port = reserve_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubegan_operator.entry.cli",
                "operator",
                "--metrics-port",
                str(self.metrics_port),
                "--health-port",
                str(self.health_port),
                # KWOK pods have made-up IPs in 10.244.0.0/16: nothing to scrape, and the
                # tests send no traffic to addresses that are not this machine's.
                "--no-trainer-progress",
                *self.extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("the operator's liveness endpoint", self.healthy, timeout=60)

    # A context manager too, for the fixtures whose operator lives as long as one block; a
    # start that fails raises before the block, with nothing to stop, as start() does.
    def __enter__(self) -> Operator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def healthy(self) -> bool:
        import urllib.request

        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator exited {self.proc.returncode}; see {self.log_path}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
            ) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return r.read().decode()

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as when a node dies under the operator."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def control_plane_is_up() -> bool:
    kubectl = CLUSTER / "bin" / "kubectl"
    if not (kubectl.exists() and KUBECONFIG.exists()):
        return False
    probe = subprocess.run(
        [str(kubectl), "--kubeconfig", str(KUBECONFIG), "get", "--raw", "/readyz"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


def node_ready(node: dict[str, Any] | None) -> bool:
    if not node:
        return False
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def load_example(name: str, **changes: Any) -> dict[str, Any]:
    job = yaml.safe_load((EXAMPLES / name).read_text())
    for dotted, value in changes.items():
        target = job
        keys = dotted.split("__")
        for k in keys[:-1]:
            target = target.setdefault(k, {})
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return job
