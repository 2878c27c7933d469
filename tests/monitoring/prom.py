"""The chart's monitoring objects as Prometheus/promtool see them, and a real Prometheus
server (Debian package, hack/install-debian-packages.sh) started per test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml
from kubegan_trainer.launch.ports import reserve_port

from tests.helm.chart import MONITORING_ON, PROMETHEUS_OPERATOR_API, by_kind, one, template
from tests.support.kube import wait_for

ROOT = Path(__file__).resolve().parents[2]

# What Grafana substitutes before sending a panel's query (the job/namespace variables at
# "All", whose allValue is ".*").
GRAFANA_DEFAULTS = {"$namespace": ".*", "$ganjob": ".*", "$__rate_interval": "1m"}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run hack/install-debian-packages.sh (Debian prometheus)"
    return path


def chart_objects(*extra: str) -> list[dict[str, Any]]:
    return template(*MONITORING_ON, *PROMETHEUS_OPERATOR_API, *extra)


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


def promtool(*args: str, binary: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary or tool("promtool"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def check_live_metrics(url: str) -> None:
    """`promtool check metrics` (the pinned build) on what `url` serves now: the exposition
    format and Prometheus' naming conventions (`_total` only on counters, units, ...)."""
    page = requests.get(url, timeout=10)
    page.raise_for_status()
    result = subprocess.run(
        [prometheus_with_kubernetes_sd()[1], "check", "metrics"],
        input=page.text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"promtool check metrics {url}:\n{result.stdout}{result.stderr}"
    assert "# TYPE kubegan_" in page.text  # a page with kubegan's own metrics, not an empty one


def prometheus_with_kubernetes_sd() -> tuple[str, str]:
    """(prometheus, promtool) built with kubernetes service discovery, which Debian's
    package leaves out (hack/build-node-binaries.sh; `make install` builds them)."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-node-binaries.sh"), "--print"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    paths = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    for name in ("prometheus", "promtool"):
        assert Path(paths[name]).is_file(), f"{paths[name]} missing: run make install"
    return paths["prometheus"], paths["promtool"]


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
    tmp: Path,
    scrape_configs: list[dict[str, Any]],
    rule_files: list[str] | None = None,
    binaries: tuple[str, str] | None = None,
) -> Iterator[Prometheus]:
    """A throwaway Prometheus: own port, config and storage; never the Debian service."""
    port = reserve_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
        "rule_files": rule_files or [],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    server, checker = binaries or (tool("prometheus"), tool("promtool"))
    check = promtool("check", "config", str(tmp / "prometheus.yml"), binary=checker)
    assert check.returncode == 0, check.stdout + check.stderr
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            server,
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


# ---- the chart's monitors as kubernetes service discovery ---------------------------------


def _meta_label(kind: str, key: str) -> str:
    """Prometheus' name for a Kubernetes label in service discovery (non-word chars -> _)."""
    return f"__meta_kubernetes_{kind}_label_" + "".join(
        c if c.isalnum() or c == "_" else "_" for c in key
    )


def _sd(role: str, api: dict[str, Any], namespaces: list[str] | None) -> dict[str, Any]:
    sd: dict[str, Any] = {"role": role, **api}
    if namespaces:
        sd["namespaces"] = {"names": namespaces}
    return sd


def _keep_labels(kind: str, match: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"source_labels": [_meta_label(kind, k)], "regex": re.escape(v), "action": "keep"}
        for k, v in sorted(match.items())
    ]


def _relabelings(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [{names.get(k, k): v for k, v in r.items()} for r in rules]


def monitor_scrape_configs(
    objs: list[dict[str, Any]], api: dict[str, Any], interval: str = "2s"
) -> list[dict[str, Any]]:
    """What prometheus-operator generates from the chart's PodMonitor and ServiceMonitor
    (matchLabels selectors, named ports, the target labels it attaches), pointed at a real
    apiserver through `api` (api_server, tls_config, authorization). `interval` replaces the
    monitors' 30 s so a test does not wait minutes."""
    # kind -> (its endpoints' field, SD role, the port-name meta label, per-kind relabelings)
    kinds = {
        "PodMonitor": (
            "podMetricsEndpoints",
            "pod",
            "__meta_kubernetes_pod_container_port_name",
            [
                {
                    "source_labels": ["__meta_kubernetes_pod_phase"],
                    "regex": "(Failed|Succeeded)",
                    "action": "drop",
                }
            ],
        ),
        "ServiceMonitor": (
            "endpoints",
            "endpoints",
            "__meta_kubernetes_endpoint_port_name",
            [{"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"}],
        ),
    }
    configs: list[dict[str, Any]] = []
    for kind, (field, role, port_label, extra) in kinds.items():
        selected = "pod" if role == "pod" else "service"
        for mon in by_kind(objs, kind):
            spec, meta = mon["spec"], mon["metadata"]
            namespaces = spec["namespaceSelector"]
            ns = None if namespaces.get("any") else namespaces.get("matchNames")
            for i, ep in enumerate(spec[field]):
                configs.append(
                    {
                        "job_name": f"{kind[0].lower()}{kind[1:]}/{meta['namespace']}/"
                        f"{meta['name']}/{i}",
                        "honor_labels": ep.get("honorLabels", False),
                        "metrics_path": ep.get("path", "/metrics"),
                        "scrape_interval": interval,
                        "kubernetes_sd_configs": [_sd(role, api, ns)],
                        "relabel_configs": [
                            *extra,
                            *_keep_labels(selected, spec["selector"]["matchLabels"]),
                            {
                                "source_labels": [port_label],
                                "regex": re.escape(ep["port"]),
                                "action": "keep",
                            },
                            *_target_labels("pod"),
                            {"target_label": "endpoint", "replacement": ep["port"]},
                            *_relabelings(ep.get("relabelings", [])),
                        ],
                    }
                )
    return configs


def _target_labels(kind: str) -> list[dict[str, Any]]:
    return [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": [f"__meta_kubernetes_{kind}_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    ]
