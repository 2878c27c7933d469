"""The cluster part of tests/monitoring: every dashboard panel's query returns
series from a real Prometheus that scrapes a running `kubegan run` job (trainer rank 0) and
the real operator reconciling the same job on fake nodes, labelled the way the chart's
PodMonitor/ServiceMonitor label them."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_trainer.launch.ports import reserve_port

from tests.helm.fake_nodes import POOL_LABEL, fake_nodes, toleration
from tests.monitoring.prom import Prometheus, chart_objects, dashboard, panel_queries, prometheus
from tests.support.kube import Kubectl, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(600)
JOB = "digits-mon"
OPERATOR_NAMESPACE = "kubegan-system"


def job_file(tmp: Path, namespace: str) -> Path:
    """The digits example, long enough to be scraped, on this test's fake nodes."""
    job = load_example(
        "digits-local.yaml",
        metadata__name=JOB,
        metadata__namespace=namespace,
        spec__training__epochs=500,
        spec__monitoring={"metricsPort": reserve_port()},
        spec__placement={
            "nodeSelector": {POOL_LABEL: namespace},
            "tolerations": [toleration(namespace)],
        },
    )
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def scrape_configs(
    namespace: str,
    trainer_port: int,
    operator: Operator,
) -> list[dict[str, Any]]:
    """Static equivalents of what prometheus-operator generates from the chart's monitors:
    same path and honor_labels, and the target labels it attaches (namespace, pod, container,
    endpoint, service; ganjob from the PodMonitor's relabeling)."""
    objs = chart_objects()
    pm = next(o for o in objs if o["kind"] == "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
    assert pm["relabelings"][0]["targetLabel"] == "ganjob"
    return [
        {
            "job_name": f"{OPERATOR_NAMESPACE}/kubegan-trainer",
            "metrics_path": pm["path"],
            "honor_labels": pm["honorLabels"],
            "static_configs": [
                {
                    "targets": [f"127.0.0.1:{trainer_port}"],
                    "labels": {
                        "namespace": namespace,
                        "pod": f"{JOB}-worker-0",
                        "container": "trainer",
                        "endpoint": pm["port"],
                        "ganjob": JOB,
                    },
                }
            ],
        },
        {
            "job_name": "kubegan-operator-metrics",
            "metrics_path": sm["path"],
            "honor_labels": sm["honorLabels"],
            "static_configs": [
                {
                    "targets": [f"127.0.0.1:{operator.metrics_port}"],
                    "labels": {
                        "namespace": OPERATOR_NAMESPACE,
                        "pod": "kubegan-operator-0",
                        "container": "operator",
                        "service": "kubegan-operator-metrics",
                        "endpoint": sm["port"],
                    },
                }
            ],
        },
    ]


def start_run(job: Path, out: Path) -> tuple[subprocess.Popen[bytes], int]:
    log = (out.parent / "kubegan-run.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(job), "--output", str(out)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def port() -> int | None:
        if proc.poll() is not None:
            raise AssertionError(
                f"kubegan run exited {proc.returncode}: "
                f"{(out.parent / 'kubegan-run.log').read_text()[-2000:]}"
            )
        text = (out.parent / "kubegan-run.log").read_text(errors="replace")
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", text)
        return int(m.group(1)) if m else None

    return proc, wait_for("kubegan run's metrics address", port, timeout=120)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # checkpoint and exit, like a pod
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def has_finite_series(prom: Prometheus, expr: str) -> list[dict[str, Any]] | None:
    result = prom.query(expr)
    finite = [s for s in result if math.isfinite(float(s["value"][1]))]
    return finite or None


def test_every_panel_returns_series(
    cluster: Kubectl, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    names = [f"mon-{namespace}-{i}" for i in range(2)]
    job = job_file(tmp_path, namespace)
    with fake_nodes(cluster, names, pool=namespace, gpus=0, namespace=namespace):
        # The operator side: the same job reconciled on fake nodes (cost, restarts, time to
        # running are the operator's series).
        cluster.run("apply", "-f", str(job))
        wait_for(
            f"{JOB} Running",
            lambda: (
                (cluster.get("ganjob", JOB, namespace=namespace) or {})
                .get("status", {})
                .get("phase")
                == "Running"
            ),
            timeout=90,
        )
        run, trainer_port = start_run(job, tmp_path / "run")
        try:
            configs = scrape_configs(namespace, trainer_port, operator)
            with prometheus(tmp_path, configs) as prom:
                wait_for("both targets up", lambda: len(prom.query("up == 1")) == 2, timeout=60)
                # A specific job selected in the dashboard, and "All".
                selections = [{"$namespace": namespace, "$ganjob": JOB}, {}]
                queries = [q for sel in selections for q in panel_queries(dashboard(), sel)]
                results = {}
                for title, expr in queries:
                    results[title] = wait_for(
                        f"panel {title}: {expr}",
                        lambda e=expr: has_finite_series(prom, e),
                        timeout=240,
                        interval=2,
                    )
                for title, series in results.items():
                    assert series, title
                # The per-job panels join trainer and operator series on the job's labels.
                for title, expr in panel_queries(dashboard(), selections[0]):
                    if "by (phase)" in expr:
                        continue
                    labels = {
                        (s["metric"].get("namespace"), s["metric"].get("ganjob"))
                        for s in prom.query(expr)
                    }
                    assert labels == {(namespace, JOB)}, (title, labels)
        finally:
            stop(run)
        cluster.run("delete", "ganjob", JOB, "-n", namespace, "--wait=false")
