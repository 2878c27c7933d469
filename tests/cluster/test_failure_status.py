"""Failures the status explains, on a real control plane: a worker whose image cannot
be pulled shows the kubelet's ImagePullBackOff and message in a condition within a minute, and
fails the job after runPolicy.imagePullTimeoutSeconds; the trainer's config exit code fails the
job once, with the trainer's own line, instead of backoffLimit retries.

KWOK plays the kubelet (hack/kwok/stages.yaml): `pod-image-pull-backoff` reports the image
kubegan.local/does-not-exist:0 the way a kubelet reports an image it cannot pull, and
`pod-container-running-failed` ends a container with the exit code and message it is given.
A control plane of its own, so the stages are the ones of this checkout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api.contract import EXIT_USER_ERROR

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import FIXTURES, Operator, condition, load_example, wait_for

BAD_IMAGE = "kubegan.local/does-not-exist:0"
FAIL = "pod-container-running-failed.stage.kwok.x-k8s.io"
PULL_TIMEOUT = 20


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    work = tmp_path_factory.mktemp("failures")
    with private_control_plane(work) as cluster:
        cluster.kubectl("apply", "-f", str(FIXTURES / "nodes-gke-v100-spot.yaml"))
        cluster.kubectl("create", "namespace", "ml")
        operator = Operator(work, kubeconfig=cluster.kubeconfig)
        operator.start()
        try:
            yield cluster
        finally:
            operator.stop()


def job(name: str, **changes: Any) -> dict[str, Any]:
    body = load_example(
        "gan3d-gke-v100-spot.yaml", metadata__name=name, spec__checkpoint__claimName=None, **changes
    )
    body["metadata"]["namespace"] = "ml"
    return body


def status(cluster: PrivateCluster, name: str) -> dict[str, Any]:
    return (cluster.get("gantrainingjob", name, "ml") or {}).get("status") or {}


def test_an_image_that_cannot_be_pulled_is_shown_then_fails_the_job(world: PrivateCluster) -> None:
    world.apply(
        job(
            "nopull",
            spec__image=BAD_IMAGE,
            spec__runPolicy__imagePullTimeoutSeconds=PULL_TIMEOUT,
        )
    )

    def shown() -> dict[str, Any]:
        c = condition(status(world, "nopull"), "ContainersReady")
        return c if c.get("reason") == "ImagePullBackOff" else {}

    said = wait_for("ContainersReady=False, ImagePullBackOff", shown, timeout=60)
    assert said["status"] == "False"
    assert BAD_IMAGE in said["message"] and said["message"].startswith("nopull-worker-")
    wait_for("Failed", lambda: status(world, "nopull").get("phase") == "Failed", timeout=90)
    st = status(world, "nopull")
    failed = condition(st, "Failed")
    assert failed["reason"] == "ImagePullBackOff" and f"(for {PULL_TIMEOUT}s)" in failed["message"]
    assert (st["restarts"], st["preemptions"], st["attempt"]) == (0, 0, 0)
    events = world.kubectl("get", "events", "-n", "ml").stdout
    assert "ImagePullBackOff" in events


def test_a_trainer_config_error_fails_the_job_once(world: PrivateCluster) -> None:
    world.apply(job("badconfig", spec__runPolicy__backoffLimit=3))
    wait_for("Running", lambda: status(world, "badconfig").get("phase") == "Running", timeout=90)
    world.kubectl(
        "annotate", "pod", "badconfig-worker-0", "-n", "ml",
        f"{FAIL}/exit-code={EXIT_USER_ERROR}",
        f"{FAIL}/message=spec.model.options.ngf: must be a positive integer",
    )  # fmt: skip
    world.kubectl("label", "pod", "badconfig-worker-0", "-n", "ml", f"{FAIL}=true")
    try:
        wait_for("Failed", lambda: status(world, "badconfig").get("phase") == "Failed", timeout=90)
    except AssertionError as err:
        pod = world.get("pod", "badconfig-worker-0", "ml") or {}
        raise AssertionError(f"{err}\n{status(world, 'badconfig')}\n{pod.get('status')}") from None
    st = status(world, "badconfig")
    failed = condition(st, "Failed")
    assert failed["reason"] == "TrainerConfigError"
    assert "spec.model.options.ngf: must be a positive integer" in failed["message"]
    assert (st["restarts"], st["attempt"]) == (0, 0), "never retried"
