"""hostPath in spec.podTemplate is refused by the apiserver itself: the
chart's ValidatingAdmissionPolicy (while workers.allowHostPath is false) answers with the same
field path and words as `kubegan validate`; with the value on, the chart renders no policy.
A control plane of its own: the policy is cluster-wide."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import CHART, helm
from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import ROOT, wait_for

JOB = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "hp", "namespace": "default"},
    "spec": {
        "framework": "pytorch",
        "model": {"name": "dcgan"},
        "resources": {"workers": 1, "gpusPerWorker": 0},
        "podTemplate": {
            "spec": {
                "volumes": [
                    {"name": "team", "configMap": {"name": "team"}},
                    {"name": "host", "hostPath": {"path": "/srv/datasets"}},
                ]
            }
        },
    },
}


def policy_docs(*args: str) -> list[dict[str, Any]]:
    out = helm("template", "kubegan", str(CHART), "-s", "templates/hostpath-policy.yaml", *args,
               check=False)  # fmt: skip
    return [d for d in yaml.safe_load_all(out.stdout) if d] if out.returncode == 0 else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with private_control_plane(tmp_path_factory.mktemp("hostpath")) as c:
        c.kubectl("apply", "-f", str(ROOT / "crds" / "gantrainingjobs.kubegan.io.yaml"))
        yield c


def test_the_policy_renders_only_while_host_path_is_off() -> None:
    assert [d["kind"] for d in policy_docs()] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert policy_docs("--set", "workers.allowHostPath=true") == []


def test_the_apiserver_refuses_host_path_as_validate_does(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    cluster.apply(*policy_docs())
    job = tmp_path / "hp.yaml"
    job.write_text(yaml.safe_dump(JOB))
    said = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "validate", str(job)],
        capture_output=True, text=True, check=False, timeout=60,
    ).stderr.strip()  # fmt: skip
    assert said.endswith(
        "spec.podTemplate.spec.volumes[1].hostPath: hostPath volumes are refused by this "
        "operator (the chart's workers.allowHostPath is off)"
    ), said

    def refused() -> str:
        # The policy takes effect once the apiserver has loaded it.
        r = cluster.kubectl("apply", "-f", str(job), check=False)
        if r.returncode == 0:
            cluster.kubectl("delete", "-f", str(job), "--wait=false", check=False)
            return ""
        return r.stderr

    stderr = wait_for("the policy to refuse hostPath", refused, timeout=60, interval=2)
    assert said.split(": ", 1)[1] in stderr, stderr
    ok = {**JOB, "spec": {**JOB["spec"], "podTemplate": {"spec": {"volumes": [
        {"name": "team", "configMap": {"name": "team"}}]}}}}  # fmt: skip
    assert (
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(ok), check=False).returncode == 0
    )
