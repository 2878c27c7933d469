"""One sync of a new job creates its gang and releases it (issue 13): the create answers prove
every worker exists, so the gates are lifted without waiting for the watch to show the pods
and the job to come round the queue again. Against a recording fake of kube.Kube."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubegan_operator.api import spec as api
from kubegan_operator.runtime import cache, controller
from kubernetes.client.exceptions import ApiException

from tests.unit.cache_world import Indexes
from tests.unit.nodes import node


class FakeKube:
    """Records requests in order; answers creates as the apiserver would."""

    def __init__(self, conflict: set[str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.conflict = conflict or set()
        self.rv = 10

    def patch_status(
        self, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any], rv: Any
    ) -> dict[str, Any]:
        self.calls.append(("status", new.get("phase", "")))
        self.rv += 1
        return {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "uid-g",
                         "resourceVersion": str(self.rv), "generation": 1},
            "spec": JOB["spec"],
            "status": new,
        }  # fmt: skip

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        name = obj["metadata"]["name"]
        self.calls.append(("create", name))
        if name in self.conflict:
            return None
        return copy.deepcopy(obj)

    def lift_gates(self, namespace: str, name: str) -> None:
        self.calls.append(("lift", name))

    def delete_pod(self, namespace: str, name: str, force: bool) -> None:
        self.calls.append(("delete", name))

    def event(self, *args: Any) -> None:
        pass


JOB: dict[str, Any] = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {
        "name": "g",
        "namespace": "ns",
        "uid": "uid-g",
        "resourceVersion": "1",
        "generation": 1,
    },
    "spec": {
        "framework": "pytorch",
        "model": {"name": "dcgan"},
        "data": {"source": "synthetic"},
        "resources": {"gpus": 16},
    },
}


def world(kube: FakeKube) -> tuple[controller.Controller, Indexes]:
    """A controller over in-memory indexes holding three nodes and the job."""
    idx = Indexes()
    for i in range(3):
        idx.add_node(node(f"n{i}"))
    idx.add_job(copy.deepcopy(JOB))
    ctl = controller.Controller(kube=kube, read_progress=False, capacity=idx.capacity)
    ctl.attach(idx.indices())
    return ctl, idx


def sync(kube: FakeKube) -> controller.Controller:
    ctl, _ = world(kube)

    async def run() -> None:
        await ctl.sync(("ns", "g"))
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
    return ctl


def test_a_new_gang_is_created_and_released_in_one_sync() -> None:
    kube = FakeKube()
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
    kube = FakeKube()
    sync(kube)
    assert ("lift", "g-worker-0") in kube.calls  # two decisions: plan and create, release
    assert validated == ["GANTrainingJob", "GANTrainingJob"]


def test_a_gang_created_and_released_in_one_sync_waits_for_the_watch_to_show_it() -> None:
    """Until the watch shows the new workers, the job is not reconciled again: with no pods
    in view it would be planned and created a second time."""
    ctl = sync(FakeKube())
    key = ("ns", "g")
    assert ctl.expectations.pending(key, []) is not None
    gated = [{"metadata": {"name": f"g-worker-{i}"}, "spec": {"schedulingGates": [{}]}}
             for i in range(2)]  # fmt: skip
    assert ctl.expectations.pending(key, gated) is not None  # the lifts not shown yet
    ungated = [{"metadata": {"name": f"g-worker-{i}"}, "spec": {}} for i in range(2)]
    assert ctl.expectations.pending(key, ungated) is None


def test_a_worker_that_already_existed_waits_for_the_watch() -> None:
    kube = FakeKube(conflict={"g-worker-1"})
    ctl = sync(kube)
    assert not any(c == "lift" for c, _ in kube.calls)
    # ... which shows it: the expectations hold the job until then.
    assert ctl.expectations.pending(("ns", "g"), []) is not None


def test_a_refused_worker_is_not_released() -> None:
    class Refusing(FakeKube):
        def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
            if obj["metadata"]["name"] == "g-worker-1":
                raise ApiException(status=500, reason="boom")
            return super().create(obj)

    kube = Refusing()
    with pytest.raises(ApiException):  # the worker loop retries it with a backoff
        sync(kube)
    assert not any(c == "lift" for c, _ in kube.calls)


def test_service_and_config_map_are_created_once_while_the_watch_lags() -> None:
    """A sync that runs before the watch shows the job's Service and ConfigMap does not
    create them again (a 409 each, for one job in seven at 1000 nodes); one that has waited
    longer than any watch lag does (someone deleted them before the watch showed them)."""

    class Keeping(FakeKube):
        made: list[dict[str, Any]] = []

        def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
            self.made.append(copy.deepcopy(obj))
            return super().create(obj)

    kube = Keeping()
    ctl, idx = world(kube)
    key = ("ns", "g")

    def shared_creates() -> list[str]:
        return [n for c, n in kube.calls if c == "create" and n in ("g", "g-config")]

    async def run() -> None:
        await ctl.sync(key)
        for obj in kube.made:  # the watch shows the workers, ungated; not the others yet
            if obj["kind"] == "Pod":
                obj["spec"].pop("schedulingGates", None)
                idx.add_pod(obj)
        await ctl.sync(key)
        assert sorted(shared_creates()) == ["g", "g-config"]
        later = ctl.expectations.clock() + cache.EXPECTATION_TIMEOUT_SECONDS + 1
        ctl.expectations.clock = lambda: later
        await ctl.sync(key)
        assert sorted(shared_creates()) == ["g", "g", "g-config", "g-config"]
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
