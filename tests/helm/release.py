"""A real `helm install` of charts/kubegan into the local control plane, and the operator run
with exactly that release's ServiceAccount permissions (a token of it, not the admin cert)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import JOB_COST_RATE, JOB_NAME_LABEL
from kubegan_operator.api.pricing import DEFAULT_CATALOGUE, DEFAULT_PRICES

from tests.helm.chart import CHART, helm_bin
from tests.helm.fake_nodes import POOL_LABEL, fake_nodes, toleration
from tests.support.kube import KUBECONFIG, Kubectl, Operator, wait_for

TRAINER_IMAGE = "registry.example/kubegan/trainer-torch:helm-test"
PRICES_SOURCE = "kubegan helm test table"  # proves the operator loaded the chart's ConfigMap
# The chart's default catalogue, as a table of its own (prices.table) with a recognisable source.
DEFAULT_TABLE = yaml.safe_load(
    (CHART / "files" / "prices" / f"{DEFAULT_CATALOGUE}.yaml").read_text()
)


# The gang's rate on the fake nodes (no machine type: priced per resource): 8 T4s at the
# default table's on-demand price (the job names no cpu or memory).
T4_RATE = 8 * DEFAULT_PRICES.accelerators["nvidia-tesla-t4"].on_demand


COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io=true"


@dataclass
class Release:
    name: str
    namespace: str  # the release's (operator's) namespace
    job_namespace: str  # where the test's jobs run
    service_account: str
    nodes: list[str]
    install_output: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@contextmanager
def installed(
    k: Kubectl,
    tmp: Path,
    watch_own_job_namespace: bool = False,
    replicas: int = 1,
) -> Iterator[Release]:
    """Install a release (own namespace, own fake GPU nodes); uninstall and clean up after."""
    name = f"kg-{uuid.uuid4().hex[:6]}"
    ns = f"{name}-system"
    job_ns = f"{name}-ml" if watch_own_job_namespace else ns
    env = {**os.environ, "KUBECONFIG": str(KUBECONFIG)}
    nodes = [f"helm-gpu-{name}-{i}" for i in range(2)]
    with ExitStack() as stack:
        for namespace in dict.fromkeys([ns, job_ns]):
            k.run("create", "namespace", namespace)
            stack.callback(k.run, "delete", "namespace", namespace, "--wait=false", check=False)
        stack.callback(
            subprocess.run,
            [helm_bin(), "uninstall", name, "-n", ns, "--wait"],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        stack.enter_context(fake_nodes(k, nodes, pool=name, gpus=4, namespace=job_ns))
        values: dict[str, Any] = {
            # The Deployment's pod lands on a fake node (KWOK "runs" it); the operator that
            # does the work is the subprocess of ChartOperator, with the same SA's token.
            "nodeSelector": {POOL_LABEL: name},
            "tolerations": [toleration(name)],
            "trainerImages": {"pytorch": TRAINER_IMAGE},
            # Same figures as the built-in table (the default catalogue): an admin operator of
            # another test session on this shared control plane would plan the same cost.
            "prices": {"table": {**DEFAULT_TABLE, "source": PRICES_SOURCE}},
            # KWOK pods have made-up IPs in 10.244.0.0/16: nothing to scrape, and this machine
            # sends no traffic to addresses that are not its own.
            "operator": {"readTrainerProgress": False, "replicas": replicas},
        }
        if watch_own_job_namespace:
            values["operator"]["watchNamespaces"] = [job_ns]
        (tmp / "values.yaml").write_text(yaml.safe_dump(values))
        result = subprocess.run(
            [
                helm_bin(),
                "install",
                name,
                str(CHART),
                "--namespace",
                ns,
                "--wait",
                "--timeout",
                "120s",
                "-f",
                str(tmp / "values.yaml"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"helm install failed:\n{result.stderr}"
        yield Release(name, ns, job_ns, f"{name}-kubegan-operator", nodes, result.stdout)


def token_kubeconfig(k: Kubectl, release: Release, path: Path) -> Path:
    """A kubeconfig whose only credential is a token of the chart's ServiceAccount."""
    token = k.run(
        "create", "token", release.service_account, "-n", release.namespace, "--duration", "1h"
    ).stdout.strip()
    admin = yaml.safe_load(KUBECONFIG.read_text())
    cluster = admin["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "operator",
                        "context": {"cluster": cluster["name"], "user": "operator"},
                    }
                ],
                "current-context": "operator",
            }
        )
    )
    whoami = json.loads(Kubectl(path).run("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == release.user
    return path


class ChartOperator(Operator):
    """`kubegan operator` with the installed Deployment's arguments and environment, the
    installed price ConfigMap, and the ServiceAccount token instead of the admin cert."""

    def __init__(self, k: Kubectl, release: Release, tmp: Path) -> None:
        (tmp / "logs").mkdir(exist_ok=True)
        super().__init__(tmp / "logs")
        deployment = k.get("deployment", release.service_account, release.namespace)
        prices = k.get("configmap", f"{release.service_account}-prices", release.namespace)
        (tmp / "prices.yaml").write_text(prices["data"]["prices.yaml"])
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        local = {
            "--metrics-port": str(self.metrics_port),
            "--health-port": str(self.health_port),
            "--prices": str(tmp / "prices.yaml"),
        }
        self.args = []
        for arg in container["args"]:
            key, sep, value = arg.partition("=")
            self.args.append(f"{key}{sep}{local.get(key, value)}" if sep else arg)
        self.env = {e["name"]: e["value"] for e in container.get("env", []) if e["name"] != "HOME"}
        self.kubeconfig = token_kubeconfig(k, release, tmp / "operator.kubeconfig")

    def start(self) -> None:
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubegan_operator.entry.cli", *self.args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("the chart operator's liveness endpoint", self.healthy, timeout=60)


def foreign_operators(mine: Operator) -> list[int]:
    """Other `kubegan operator` processes on this machine (another session's cluster tests
    share the control plane and reconcile every namespace too)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or (mine.proc and int(proc.name) == mine.proc.pid):
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kubegan_operator.entry.cli" in argv and b"operator" in argv:
            pids.append(int(proc.name))
    return pids


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
            "placement": {
                "spot": "never",
                "nodeSelector": {POOL_LABEL: release.name},
                "tolerations": [toleration(release.name)],
            },
            "runPolicy": {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 1},
        },
    }


def reconcile_end_to_end(k: Kubectl, release: Release, tmp: Path) -> None:
    """Create -> planned on the fake nodes -> Running -> finished -> pods and job deleted by
    the operator, which runs with the release's ServiceAccount token only."""
    op = ChartOperator(k, release, tmp)
    op.start()
    ns, name = release.job_namespace, "helm-e2e"
    try:
        k.apply(gpu_job(name, release), namespace=ns)
        status = wait_for(
            f"{name} Running",
            lambda: (
                (s := (k.get("ganjob", name, namespace=ns) or {}).get("status", {})).get("phase")
                == "Running"
                and s
            ),
            timeout=90,
        )
        assert status["placement"]["workers"] == 2
        assert status["placement"]["gpusPerWorker"] == 4
        assert sorted(status["placement"]["nodes"]) == sorted(release.nodes)
        assert status["cost"]["ratePerHour"] == pytest.approx(T4_RATE)
        pods = k.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}")
        assert {p["spec"]["nodeName"] for p in pods} == set(release.nodes)
        if not foreign_operators(op):
            # Only this operator acts (as in CI, where cluster tests run one at a time), so
            # the workers carry the chart's trainer image.
            assert {p["spec"]["containers"][0]["image"] for p in pods} == {TRAINER_IMAGE}
        # This operator reconciled the job with its token (its own metrics say so).
        wait_for(
            "the chart operator's job metrics",
            lambda: f'{JOB_COST_RATE}{{ganjob="{name}",namespace="{ns}"}}' in op.metrics(),
            timeout=30,
        )
        # Worker 0 exits 0 -> Succeeded; cleanPodPolicy All and the TTL make the operator
        # delete the other pods and then the job itself.
        k.run("label", "pod", f"{name}-worker-0", "-n", ns, COMPLETE_LABEL)
        wait_for(
            f"{name} deleted by its TTL",
            lambda: k.get("ganjob", name, namespace=ns) is None,
            timeout=90,
        )
        wait_for(
            f"{name}'s pods gone",
            lambda: not k.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}"),
            timeout=90,
        )
    finally:
        op.stop()
    log = op.log_path.read_text()
    assert f"prices {PRICES_SOURCE}" in log
    for sign in ("Forbidden", " 403", "Not enough permissions", "failed", "Traceback"):
        assert sign not in log, f"operator log has {sign!r}:\n{log[-3000:]}"


# ---- the rules a user is granted, from the apiserver's own authorizer ----------------------

ROW = re.compile(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def granted(k: Kubectl, user: str, namespace: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs of `kubectl auth can-i --list` in a namespace, minus what every
    ServiceAccount gets anyway (discovery, self reviews: the namespace's default SA's). A rule
    limited to named objects shows as `resource/name`."""

    def listing(as_user: str) -> set[tuple[str, str]]:
        out = k.run("auth", "can-i", "--list", f"--as={as_user}", "-n", namespace).stdout
        pairs = set()
        for line in out.splitlines()[1:]:
            m = ROW.match(line)
            if not m:  # a non-resource URL row (starts with blanks)
                assert line.startswith(" "), line
                continue
            resource, _urls, names, verbs = m.groups()
            named = [f"{resource}/{n}" for n in names.split()] or [resource]
            pairs |= {(r, v) for r in named for v in verbs.split()}
        return pairs

    baseline = f"system:serviceaccount:{namespace}:default"
    return listing(user) - listing(baseline)
