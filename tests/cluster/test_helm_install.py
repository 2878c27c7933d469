"""Acceptance 2: `helm install` into the real control plane succeeds, and the operator, run
with exactly the chart's ServiceAccount permissions (a token of that ServiceAccount, not the
admin certificate), reconciles a job end to end: created, planned on fake GPU nodes with the
chart's price table and trainer image, Running, finished, cleaned up and deleted (TTL)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import KUBECONFIG, Kubectl, Operator, wait_for
from tests.helm.chart import CHART, helm
from tests.helm.fake_nodes import POOL_LABEL, fake_nodes

pytestmark = pytest.mark.timeout(600)
TRAINER_IMAGE = "registry.example/kubegan/trainer-torch:helm-test"
PRICES_SOURCE = "kubegan helm test table"  # proves the operator loaded the chart's ConfigMap
COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io=true"


@dataclass
class Release:
    name: str
    namespace: str
    service_account: str
    nodes: list[str]
    install_output: str


@pytest.fixture(scope="module")
def release(
    cluster: Kubectl,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    name = f"kg-{uuid.uuid4().hex[:6]}"
    ns = f"{name}-system"
    cluster.run("create", "namespace", ns)
    nodes = [f"helm-gpu-{name}-{i}" for i in range(2)]
    env = {**os.environ, "KUBECONFIG": str(KUBECONFIG)}
    try:
        with fake_nodes(cluster, nodes, pool=ns, gpus=4, namespace=ns):
            # The operator Deployment itself lands on a fake node (KWOK "runs" it); the real
            # operator is the subprocess below, with the ServiceAccount's token.
            values = {
                "nodeSelector": {POOL_LABEL: ns},
                "trainerImages": {"pytorch": TRAINER_IMAGE},
                # Same figures as the built-in table, so an admin operator of another test
                # session on this shared cluster would plan the same cost.
                "prices": {"source": PRICES_SOURCE},
            }
            values_file = tmp_path_factory.mktemp("helm") / "values.yaml"
            values_file.write_text(yaml.safe_dump(values))
            result = subprocess.run(
                [
                    helm_path(),
                    "install",
                    name,
                    str(CHART),
                    "--namespace",
                    ns,
                    "--wait",
                    "--timeout",
                    "120s",
                    "-f",
                    str(values_file),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
                check=False,
            )
            assert result.returncode == 0, f"helm install failed:\n{result.stderr}"
            yield Release(name, ns, f"{name}-kubegan-operator", nodes, result.stdout)
    finally:
        subprocess.run(
            [helm_path(), "uninstall", name, "--namespace", ns, "--wait"],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        cluster.run("delete", "namespace", ns, "--wait=false", check=False)


def helm_path() -> str:
    from tests.helm.chart import helm_bin

    return helm_bin()


def token_kubeconfig(k: Kubectl, release: Release, path: Path) -> Path:
    """A kubeconfig whose only credential is a token of the chart's ServiceAccount."""
    token = k.run(
        "create", "token", release.service_account, "-n", release.namespace, "--duration", "1h"
    ).stdout.strip()
    admin = yaml.safe_load(KUBECONFIG.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [admin["clusters"][0]],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {"cluster": admin["clusters"][0]["name"], "user": "operator"},
            }
        ],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class ChartOperator(Operator):
    """`kubegan operator` with the installed Deployment's arguments and environment, the
    installed price ConfigMap, and the ServiceAccount token instead of the admin cert."""

    def __init__(
        self, log_dir: Path, kubeconfig: Path, deployment: dict[str, Any], prices: Path
    ) -> None:
        super().__init__(log_dir)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        self.args = []
        for arg in container["args"]:
            if arg.startswith("--metrics-port="):
                arg = f"--metrics-port={self.metrics_port}"
            elif arg.startswith("--health-port="):
                arg = f"--health-port={self.health_port}"
            elif arg.startswith("--prices="):
                arg = f"--prices={prices}"
            self.args.append(arg)
        self.env = {e["name"]: e["value"] for e in container.get("env", [])}
        self.env.pop("HOME", None)
        self.kubeconfig = kubeconfig

    def start(self) -> None:
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubegan_operator.cli", *self.args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("the chart operator's liveness endpoint", self.healthy, timeout=60)


def test_helm_install_succeeded(cluster: Kubectl, release: Release) -> None:
    status = json.loads(
        helm(
            "status",
            release.name,
            "-n",
            release.namespace,
            "-o",
            "json",
            "--kubeconfig",
            str(KUBECONFIG),
        ).stdout
    )
    assert status["info"]["status"] == "deployed"
    assert "kubectl get ganjob -A" in release.install_output  # NOTES.txt
    deployment = cluster.get("deployment", release.service_account, release.namespace)
    assert deployment["status"]["readyReplicas"] == 1  # helm --wait saw it roll out
    assert cluster.get("serviceaccount", release.service_account, release.namespace)
    assert cluster.get("clusterrole", release.service_account)
    assert cluster.get("clusterrolebinding", release.service_account)


def test_operator_with_chart_permissions_reconciles_a_job(
    cluster: Kubectl, release: Release, tmp_path: Path
) -> None:
    kubeconfig = token_kubeconfig(cluster, release, tmp_path / "operator.kubeconfig")
    sa_user = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    whoami = Kubectl(kubeconfig).run("auth", "whoami", "-o", "json").stdout
    assert json.loads(whoami)["status"]["userInfo"]["username"] == sa_user
    deployment = cluster.get("deployment", release.service_account, release.namespace)
    prices_cm = cluster.get("configmap", f"{release.service_account}-prices", release.namespace)
    (tmp_path / "prices.yaml").write_text(prices_cm["data"]["prices.yaml"])
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    op = ChartOperator(log_dir, kubeconfig, deployment, tmp_path / "prices.yaml")
    op.start()
    ns, name = release.namespace, "helm-e2e"
    try:
        cluster.apply(gpu_job(name, release), namespace=ns)
        status = wait_for(
            f"{name} Running",
            lambda: (
                (s := (cluster.get("ganjob", name, namespace=ns) or {}).get("status", {})).get(
                    "phase"
                )
                == "Running"
                and s
            ),
            timeout=90,
        )
        assert status["placement"]["workers"] == 2
        assert status["placement"]["gpusPerWorker"] == 4
        assert sorted(status["placement"]["nodes"]) == sorted(release.nodes)
        assert status["cost"]["ratePerHour"] == pytest.approx(8 * 0.35)  # 8 x T4 on-demand
        pods = cluster.get("pods", namespace=ns, selector=f"kubegan.io/job-name={name}")
        if not foreign_operators(op):
            # Only this operator acts (as in CI, where cluster tests run one at a time), so
            # the workers carry the chart's trainer image.
            assert {p["spec"]["containers"][0]["image"] for p in pods} == {TRAINER_IMAGE}
        assert {p["spec"]["nodeName"] for p in pods} == set(release.nodes)
        # This operator (not another one on the cluster) reconciled it, with its token.
        wait_for(
            "the chart operator's job metrics",
            lambda: (
                f'kubegan_job_cost_rate_dollars_per_hour{{ganjob="{name}",namespace="{ns}"}}'
                in op.metrics()
            ),
            timeout=30,
        )
        # Finish: worker 0 exits 0 -> Succeeded; cleanPodPolicy All and the TTL make the
        # operator delete the pods and then the job itself.
        for pod in pods:
            cluster.run("label", "pod", pod["metadata"]["name"], "-n", ns, COMPLETE_LABEL)
        wait_for(
            f"{name} deleted by its TTL",
            lambda: cluster.get("ganjob", name, namespace=ns) is None,
            timeout=90,
        )
        wait_for(
            f"{name}'s pods gone",
            lambda: not cluster.get("pods", namespace=ns, selector=f"kubegan.io/job-name={name}"),
            timeout=90,
        )
    finally:
        op.stop()
    log = op.log_path.read_text()
    assert f"prices {PRICES_SOURCE}" in log
    for sign in ("Forbidden", " 403", "Not enough permissions", "failed", "Traceback"):
        assert sign not in log, f"operator log has {sign!r}:\n{log[-3000:]}"


def foreign_operators(mine: Operator) -> list[int]:
    """Other `kubegan operator` processes on this machine (another session's cluster tests
    share the control plane); they reconcile every namespace too."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kubegan_operator.cli" in argv and b"operator" in argv and proc.name.isdigit():
            pid = int(proc.name)
            if mine.proc is None or pid != mine.proc.pid:
                pids.append(pid)
    return pids


def test_chart_trainer_images_reach_the_renderer(cluster: Kubectl, release: Release) -> None:
    """The Deployment's environment makes the chart's images the operator's defaults."""
    deployment = cluster.get("deployment", release.service_account, release.namespace)
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    code = (
        "from kubegan_operator.render import DEFAULT_IMAGES; "
        "print(DEFAULT_IMAGES['pytorch'], DEFAULT_IMAGES['tensorflow'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [TRAINER_IMAGE, "ghcr.io/kubegan/trainer-tf:0.1.0"]


def gpu_job(name: str, release: Release) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "data": {"source": "synthetic"},
            "training": {"epochs": 2, "batchSizePerReplica": 8},
            "resources": {"gpus": 8, "accelerator": "nvidia-tesla-t4"},
            "placement": {"spot": "never", "nodeSelector": {POOL_LABEL: release.namespace}},
            "runPolicy": {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 1},
        },
    }


# ---- the granted rules, exactly ------------------------------------------------------------

EXPECTED = (
    {("gantrainingjobs.kubegan.io", v) for v in ("delete", "get", "list", "watch")}
    | {("gantrainingjobs.kubegan.io/status", "patch")}
    | {("pods", v) for v in ("create", "delete", "list", "patch", "watch")}
    | {(r, v) for r in ("configmaps", "services") for v in ("create", "get")}
    | {
        ("events", "create"),
        ("nodes", "list"),
        ("nodes", "watch"),
    }
)


ROW = re.compile(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def granted(k: Kubectl, user: str, namespace: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs from `kubectl auth can-i --list` (resource rows only)."""
    out = k.run("auth", "can-i", "--list", f"--as={user}", "-n", namespace).stdout
    pairs = set()
    for line in out.splitlines()[1:]:
        m = ROW.match(line)
        if not m:  # a non-resource URL row (starts with blanks)
            assert line.startswith(" "), line
            continue
        resource, _urls, names, verbs = m.groups()
        assert names == "", f"per-name rule granted: {line}"
        pairs |= {(resource, v) for v in verbs.split()}
    return pairs


def test_granted_rules_are_exactly_what_the_operator_uses(
    cluster: Kubectl, release: Release
) -> None:
    sa = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    # What every authenticated ServiceAccount gets anyway (discovery, self reviews).
    baseline_sa = f"system:serviceaccount:{release.namespace}:default"
    for namespace in (release.namespace, "default"):
        extra = granted(cluster, sa, namespace) - granted(cluster, baseline_sa, namespace)
        assert extra == EXPECTED, (
            f"in {namespace}: unexpected {sorted(extra - EXPECTED)}, "
            f"missing {sorted(EXPECTED - extra)}"
        )
    # And nothing beyond: spot checks through the apiserver's own authorizer.
    for verb, resource in [
        ("update", "pods"),
        ("get", "secrets"),
        ("list", "secrets"),
        ("delete", "nodes"),
        ("create", "gantrainingjobs.kubegan.io"),
        ("update", "gantrainingjobs.kubegan.io/status"),
        ("list", "customresourcedefinitions"),
        ("list", "namespaces"),
    ]:
        r = cluster.run("auth", "can-i", verb, resource, f"--as={sa}", "-A", check=False)
        assert r.stdout.strip() == "no", (verb, resource)
