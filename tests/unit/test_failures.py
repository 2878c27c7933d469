"""Failures the status explains: a container that cannot start shows the kubelet's
reason and message; an image that cannot be pulled fails the job after
runPolicy.imagePullTimeoutSeconds; the trainer's config exit code fails it at once."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_api.contract import CONTAINER_NAME, EXIT_USER_ERROR, WORKER_INDEX_LABEL
from kubegan_operator.foundation.podstate import Outcome, classify

from tests.support.world import JobWorld, gan_job, running_world


def waiting(w: JobWorld, index: int, reason: str, message: str) -> None:
    """Worker `index` is bound but its container cannot start."""
    p = w.pods[f"g-worker-{index}"]
    p["spec"]["nodeName"] = f"n{index}"
    p["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": CONTAINER_NAME, "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }


def started_world(**run_policy: Any) -> JobWorld:
    w = JobWorld(gan_job(**run_policy))
    w.step()
    w.step()  # gates lifted
    return w


def events(w: JobWorld) -> list[tuple[str, str, str]]:
    assert w.last is not None
    return w.last.events


def test_an_image_that_cannot_be_pulled_shows_then_fails_the_job_after_its_timeout() -> None:
    w = started_world(imagePullTimeoutSeconds=120)
    waiting(w, 0, "ErrImagePull", 'failed to pull image "ghcr.io/x/nope:1": not found')
    waiting(w, 1, "ErrImagePull", 'failed to pull image "ghcr.io/x/nope:1": not found')
    w.step()
    cond = w.condition("ContainersReady")
    assert (cond["status"], cond["reason"]) == ("False", "ErrImagePull")
    assert (
        cond["message"]
        == 'g-worker-0: ErrImagePull: failed to pull image "ghcr.io/x/nope:1": not found'
    )
    assert ("Warning", "ErrImagePull", cond["message"]) in events(w)
    assert w.status["phase"] == "Pending"
    assert w.last is not None and w.last.requeue_after is not None
    waiting(w, 0, "ImagePullBackOff", 'Back-off pulling image "ghcr.io/x/nope:1"')
    w.step(30)
    assert w.condition("ContainersReady")["reason"] == "ImagePullBackOff"
    d = w.step(91)
    assert w.status["phase"] == "Failed"
    failed = w.condition("Failed")
    assert failed["reason"] == "ImagePullBackOff" and "(for 120s)" in failed["message"]
    assert w.status["restarts"] == 0 and w.status["preemptions"] == 0
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]


def test_an_image_name_that_can_never_parse_fails_at_once() -> None:
    w = started_world()
    waiting(w, 1, "InvalidImageName", 'invalid reference format: "UPPER/case"')
    w.step()
    assert w.status["phase"] == "Failed"
    assert w.condition("Failed")["reason"] == "InvalidImageName"


def test_a_missing_secret_is_shown_not_failed_and_clears_when_it_starts() -> None:
    w = started_world()
    waiting(w, 0, "CreateContainerConfigError", 'secret "creds" not found')
    w.step()
    assert w.condition("ContainersReady")["reason"] == "CreateContainerConfigError"
    w.step(3600)
    assert w.status["phase"] == "Pending"
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    assert w.condition("ContainersReady")["status"] == "True"


def test_the_trainers_config_exit_code_fails_the_job_once_with_its_line() -> None:
    w = running_world(backoffLimit=3)
    w.end(0, "Failed", code=EXIT_USER_ERROR)
    term = w.pods["g-worker-0"]["status"]["containerStatuses"][0]["state"]["terminated"]
    term["message"] = "loading...\nspec.model.options.ngf: must be a positive integer\n"
    w.step()
    assert w.status["phase"] == "Failed"
    failed = w.condition("Failed")
    assert failed["reason"] == "TrainerConfigError"
    assert (
        failed["message"]
        == "g-worker-0: exit code 2: spec.model.options.ngf: must be a positive integer"
    )
    assert (w.status["restarts"], w.status["attempt"]) == (0, 0)


@pytest.mark.parametrize(
    ("terminated", "detail"),
    [
        ({"exitCode": 137, "reason": "OOMKilled"}, "exit code 137 (OOMKilled)"),
        (
            {"exitCode": 1, "reason": "Error", "message": "Traceback\nValueError: boom"},
            "exit code 1: ValueError: boom",
        ),
        ({"exitCode": 1, "message": '{"checkpoint": {"epoch": 1, "step": 0}}'}, "exit code 1"),
    ],
)
def test_an_application_failure_says_what_the_kubelet_and_the_log_said(
    terminated: dict[str, Any], detail: str
) -> None:
    pod = {
        "metadata": {"name": "g-worker-0", "labels": {WORKER_INDEX_LABEL: "0"}},
        "spec": {"nodeName": "n0"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}],
        },
    }
    state = classify(pod, {"n0": True})
    assert (state.outcome, state.detail) == (Outcome.app_failure, detail)
