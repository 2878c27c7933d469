"""A spec that means what it says: once a job has started, the real apiserver refuses
an edit of its framework, model, data, training or checkpoint fields, naming the field, and
still takes the fields documented as changeable. Before it starts, everything may change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubegan_api.rules import FROZEN_ONCE_STARTED

from tests.support.kube import Kubectl, load_example

NAME = "frozen"


def job(**spec: Any) -> dict[str, Any]:
    body = load_example("digits-local.yaml")
    body["metadata"] = {"name": NAME}
    # Never started by the session's operator (if it runs): suspended, so it stops at the
    # `suspended` step, before `record_start` writes a startTime (a job that merely cannot be
    # placed still gets one, which made the before-start test race the operator); and never
    # placed either (a node selector no node has).
    body["spec"]["placement"] = {"nodeSelector": {"kubegan.io/test": "nowhere"}}
    body["spec"].setdefault("runPolicy", {})["suspend"] = True
    body["spec"].update(spec)
    return body


def mark_started(k: Kubectl, ns: str) -> None:
    k.run(
        "patch", "ganjob", NAME, "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"startTime": "2026-11-25T12:00:00Z"}}),
    )  # fmt: skip


def patch(k: Kubectl, ns: str, spec: dict[str, Any]) -> Any:
    return k.run(
        "patch", "ganjob", NAME, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec}),
        check=False,
    )  # fmt: skip


EDITS: dict[str, dict[str, Any]] = {
    "framework": {"framework": "tensorflow"},
    "strategy": {"strategy": "multi-worker"},
    "model": {"model": {"options": {"ngf": 32}}},
    "data": {"data": {"source": "synthetic"}},
    "training": {"training": {"epochs": 99}},
    "checkpoint": {"checkpoint": {"keep": 5}},
}


def test_every_frozen_field_has_an_edit_here() -> None:
    assert set(EDITS) == set(FROZEN_ONCE_STARTED)


def test_before_start_the_spec_may_change(cluster: Kubectl, namespace: str) -> None:
    cluster.apply(job(), namespace=namespace)
    result = patch(cluster, namespace, EDITS["training"])
    assert result.returncode == 0, result.stderr
    assert cluster.get("ganjob", NAME, namespace)["spec"]["training"]["epochs"] == 99


@pytest.mark.parametrize("field", sorted(EDITS))
def test_a_started_job_refuses_a_frozen_edit_naming_the_field(
    cluster: Kubectl, namespace: str, field: str
) -> None:
    cluster.apply(job(), namespace=namespace)
    mark_started(cluster, namespace)
    before = cluster.get("ganjob", NAME, namespace)["spec"]
    result = patch(cluster, namespace, EDITS[field])
    assert result.returncode != 0
    assert f"spec.{field}: Invalid value" in result.stderr
    assert f"spec.{field} cannot change once the job has started" in result.stderr
    assert cluster.get("ganjob", NAME, namespace)["spec"] == before


def test_a_started_job_still_takes_suspend_deadlines_and_cost(
    cluster: Kubectl, namespace: str
) -> None:
    cluster.apply(job(), namespace=namespace)
    mark_started(cluster, namespace)
    changes = {
        "runPolicy": {"suspend": False, "activeDeadlineSeconds": 3600},
        "cost": {"acceleratorHourlyPrice": 1.5},
    }
    result = patch(cluster, namespace, changes)
    assert result.returncode == 0, result.stderr
    spec = cluster.get("ganjob", NAME, namespace)["spec"]
    assert spec["runPolicy"]["suspend"] is False and spec["cost"]["acceleratorHourlyPrice"] == 1.5
