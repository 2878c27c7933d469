"""One sync of a new job creates its gang and releases it: the create answers prove
every worker exists, so the gates are lifted without waiting for the watch to show the pods
and the job to come round the queue again. The controller runs over the indexes of a world
(tests/support/world.py) and writes through its RecordingKube."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubegan_api import spec as api
from kubegan_api.contract import GANG_GATE
from kubegan_operator.runtime import controller
from kubegan_operator.runtime.expectations import EXPECTATION_TIMEOUT_SECONDS
from kubernetes.client.exceptions import ApiException

from tests.support.world import RecordingKube, World, job_body, node

SPEC: dict[str, Any] = {
    "framework": "pytorch",
    "model": {"name": "dcgan"},
    "data": {"source": "synthetic"},
    "resources": {"gpus": 16},
}


def world() -> World:
    """Three nodes and the new job g."""
    w = World()
    for i in range(3):
        w.add_node(node(f"n{i}"))
    w.add_job(job_body("g", spec=copy.deepcopy(SPEC)))
    return w


def sync(kube: RecordingKube) -> controller.Controller:
    ctl = kube.world.controller(kube)

    async def run() -> None:
        await ctl.sync(("ns", "g"))
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
    return ctl


def test_a_new_gang_is_created_and_released_in_one_sync() -> None:
    kube = RecordingKube(world())
    sync(kube)
    workers = ["g-worker-0", "g-worker-1"]
    assert kube.calls[0] == ("status", "Pending")  # the plan, before any pod
    assert sorted(n for c, n in kube.calls[1:5] if c == "create") == ["g", "g-config", *workers]
    # The plan's status write recorded the release too: the gates are lifted with no second
    # status write (one write per new gang fewer: they are the apiserver's costliest).
    assert sorted(kube.calls[5:]) == [("lift", w) for w in workers]
    assert sum(c == "status" for c, _ in kube.calls) == 1


def test_a_sync_validates_the_spec_once_per_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """reconcile() validates the job; the plan, the renderers and the steps read that result
    (the plan used to validate the spec a second time)."""
    validated: list[str] = []

    def counting(cls: type[Any], original: Any) -> Any:
        def model_validate(obj: Any, *args: Any, **kwargs: Any) -> Any:
            validated.append(cls.__name__)
            return original(obj, *args, **kwargs)

        return model_validate

    for cls in (api.GANTrainingJob, api.GANTrainingJobSpec):
        monkeypatch.setattr(cls, "model_validate", counting(cls, cls.model_validate))
    kube = RecordingKube(world())
    sync(kube)
    assert ("lift", "g-worker-0") in kube.calls  # two decisions: plan and create, release
    assert validated == ["GANTrainingJob", "GANTrainingJob"]


def test_a_gang_created_and_released_in_one_sync_waits_for_the_watch_to_show_it() -> None:
    """Until the watch shows the new workers, the job is not reconciled again: with no pods
    in view it would be planned and created a second time."""
    ctl = sync(RecordingKube(world()))
    key = ("ns", "g")
    assert ctl.expectations.pending(key, []) is not None
    gates = {"schedulingGates": [{"name": GANG_GATE}]}
    gated = [{"metadata": {"name": f"g-worker-{i}"}, "spec": gates} for i in range(2)]
    assert ctl.expectations.pending(key, gated) is not None  # the lifts not shown yet
    ungated = [{"metadata": {"name": f"g-worker-{i}"}, "spec": {}} for i in range(2)]
    assert ctl.expectations.pending(key, ungated) is None


def test_a_worker_that_already_existed_waits_for_the_watch() -> None:
    kube = RecordingKube(world(), conflict={"g-worker-1"})
    ctl = sync(kube)
    assert not any(c == "lift" for c, _ in kube.calls)
    # ... which shows it: the expectations hold the job until then.
    assert ctl.expectations.pending(("ns", "g"), []) is not None


def test_a_refused_worker_is_not_released() -> None:
    class Refusing(RecordingKube):
        def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
            if obj["metadata"]["name"] == "g-worker-1":
                raise ApiException(status=500, reason="boom")
            return super().create(obj)

    kube = Refusing(world())
    with pytest.raises(ApiException):  # the worker loop retries it with a backoff
        sync(kube)
    assert not any(c == "lift" for c, _ in kube.calls)


def test_service_and_config_map_are_created_once_while_the_watch_lags() -> None:
    """A sync that runs before the watch shows the job's Service and ConfigMap does not
    create them again (a 409 each, for one job in seven at 1000 nodes); one that has waited
    longer than any watch lag does (someone deleted them before the watch showed them)."""

    w = world()
    kube = RecordingKube(w)
    ctl = w.controller(kube)
    key = ("ns", "g")

    def shared_creates() -> list[str]:
        return [n for c, n in kube.calls if c == "create" and n in ("g", "g-config")]

    async def run() -> None:
        await ctl.sync(key)
        for obj in kube.made:  # the watch shows the workers, ungated; not the others yet
            if obj["kind"] == "Pod":
                obj["spec"].pop("schedulingGates", None)
                w.add_pod(obj)
        await ctl.sync(key)
        assert sorted(shared_creates()) == ["g", "g-config"]
        later = ctl.expectations.clock() + EXPECTATION_TIMEOUT_SECONDS + 1
        ctl.expectations.clock = lambda: later
        await ctl.sync(key)
        assert sorted(shared_creates()) == ["g", "g", "g-config", "g-config"]
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
