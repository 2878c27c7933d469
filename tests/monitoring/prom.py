"""The chart's monitoring objects as Prometheus/promtool see them, and a real Prometheus
server (Debian package, hack/install-debian-packages.sh) started per test."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.cluster.conftest import free_port, wait_for
from tests.helm.chart import MONITORING_ON, by_kind, one, template

# What Grafana substitutes before sending a panel's query (the job/namespace variables at
# "All", whose allValue is ".*").
GRAFANA_DEFAULTS = {"$namespace": ".*", "$ganjob": ".*", "$__rate_interval": "1m"}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run hack/install-debian-packages.sh (Debian prometheus)"
    return path


def chart_objects(*extra: str) -> list[dict[str, Any]]:
    return template(*MONITORING_ON, *extra)


def rules_file(path: Path, *extra: str) -> dict[str, Any]:
    """The PrometheusRule's spec as a Prometheus rule file (what prometheus-operator mounts)."""
    spec = one(chart_objects(*extra), "PrometheusRule")["spec"]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def dashboard(*extra: str) -> dict[str, Any]:
    cm = next(
        d
        for d in by_kind(chart_objects(*extra), "ConfigMap")
        if d["metadata"]["name"].endswith("-dashboard")
    )
    return json.loads(cm["data"]["kubegan.json"])


def panel_queries(
    dash: dict[str, Any],
    values: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """(panel title / refId, expr with Grafana's variables substituted) for every target."""
    subs = {**GRAFANA_DEFAULTS, **(values or {})}
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for var, value in subs.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            out.append((f"{panel['title']}/{target['refId']}", expr))
    return out


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def targets(self) -> list[dict[str, Any]]:
        r = requests.get(f"{self.url}/api/v1/targets", timeout=10)
        return r.json()["data"]["activeTargets"]


@contextmanager
def prometheus(
    tmp: Path, scrape_configs: list[dict[str, Any]], rule_files: list[str] | None = None
) -> Iterator[Prometheus]:
    """A throwaway Prometheus: own port, config and storage; never the Debian service."""
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
        "rule_files": rule_files or [],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    check = promtool("check", "config", str(tmp / "prometheus.yml"))
    assert check.returncode == 0, check.stdout + check.stderr
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()}")
        try:
            return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for("prometheus ready", ready, timeout=60)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
