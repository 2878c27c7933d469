"""Metrics by the conventions: the live /metrics pages of the real operator (on a
control plane of its own, reconciling jobs in two namespaces) and of a real `kubegan run`
worker pass `promtool check metrics` (the pinned Prometheus build's; it refuses `_total` on
a gauge, among other rules), and kubegan_jobs counts jobs per namespace and phase."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml
from kubegan_api.contract import EPOCH, JOB_COST, JOBS
from kubegan_trainer.launch.ports import reserve_port

from tests.cluster.test_helm_monitoring import start_run, stop
from tests.monitoring.prom import check_live_metrics
from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(600)
NAMESPACES = ("team-a", "team-b")


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with private_control_plane(tmp_path_factory.mktemp("metrics")) as cluster:
        yield cluster


def test_operator_metrics_pass_promtool(own_cluster: PrivateCluster, tmp_path: Path) -> None:
    operator = Operator(tmp_path, kubeconfig=own_cluster.kubeconfig)
    operator.start()
    try:
        for i, namespace in enumerate(NAMESPACES):
            own_cluster.kubectl("create", "namespace", namespace)
            # No nodes here: the jobs stay Pending, which is all the phase gauge needs.
            for n in range(i + 1):
                job = load_example(
                    "digits-local.yaml", metadata__name=f"d{n}", metadata__namespace=namespace
                )
                own_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
        url = f"http://127.0.0.1:{operator.metrics_port}/metrics"

        def per_namespace() -> dict[str, float] | None:
            text = requests.get(url, timeout=10).text
            found = dict(
                re.findall(rf'^{JOBS}{{namespace="([^"]+)",phase="Pending"}} (\S+)$', text, re.M)
            )
            ok = {ns: float(v) for ns, v in found.items()}
            return ok if ok == {"team-a": 1.0, "team-b": 2.0} and JOB_COST in text else None

        wait_for(f"{JOBS} per namespace", per_namespace, timeout=120, interval=2)
        check_live_metrics(url)
    finally:
        operator.stop()


def test_worker_metrics_pass_promtool(tmp_path: Path) -> None:
    job = load_example(
        "digits-local.yaml",
        spec__training__epochs=50,
        spec__monitoring={"metricsPort": reserve_port()},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    run, port = start_run(path, tmp_path / "run")
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        # After the first epoch every trainer metric has a sample (the histograms too). The
        # address is printed before the worker serves it.
        def epoch_done() -> bool:
            try:
                text = requests.get(url, timeout=10).text
            except requests.ConnectionError:
                return False
            return re.search(rf"^{EPOCH}\{{.*\}} [1-9]", text, re.M) is not None

        wait_for("a finished epoch", epoch_done, timeout=240, interval=2)
        check_live_metrics(url)
    finally:
        stop(run)
