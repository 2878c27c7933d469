"""Names of the objects a job owns and the label keys on them, in one place: the renderer
writes them, reconcile and the controller find objects by them, and they must agree."""

from __future__ import annotations

from kubegan_operator.api import WORKER_SUFFIX

JOB_NAME_LABEL = "kubegan.io/job-name"
WORKER_INDEX_LABEL = "kubegan.io/worker-index"
# Each gang generation carries its attempt, so pods of an earlier gang are told apart.
ATTEMPT_LABEL = "kubegan.io/attempt"
GANG_GATE = "kubegan.io/gang"
# The trainer container of a worker pod: podstate reads its exit code and termination message.
CONTAINER_NAME = "trainer"


def worker_name(job_name: str, index: int) -> str:
    return f"{job_name}{WORKER_SUFFIX}{index}"


def service_name(job_name: str) -> str:
    """The headless Service that gives workers their DNS names."""
    return job_name


def config_map_name(job_name: str) -> str:
    return f"{job_name}-config"
