"""kopf's indexes, in memory: each object's entries come from the same index functions the
operator registers with `@kopf.index`, and replace that object's earlier entries as kopf's
do. For unit tests of the controller's triggers and view."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubegan_operator.runtime import cache
from kubegan_trainer.contract import CONTAINER_NAME, JOB_NAME_LABEL


class FakeIndex(Mapping[Any, list[Any]]):
    def __init__(self, fn: Callable[[Mapping[str, Any]], dict[Any, Any]]) -> None:
        self.fn = fn
        self.by_object: dict[tuple[str, str], dict[Any, Any]] = {}

    def put(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.by_object[(meta.get("namespace", ""), meta["name"])] = self.fn(body)

    def drop(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.by_object.pop((meta.get("namespace", ""), meta["name"]), None)

    def _all(self) -> dict[Any, list[Any]]:
        out: dict[Any, list[Any]] = {}
        for entries in self.by_object.values():
            for k, v in entries.items():
                out.setdefault(k, []).append(v)
        return out

    def __getitem__(self, key: Any) -> list[Any]:
        return self._all()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class _Both(Mapping[Any, list[Any]]):
    """The operator's one pod index: usage by node name and worker pods by job key."""

    def __init__(self, *parts: FakeIndex) -> None:
        self.parts = parts

    def __getitem__(self, key: Any) -> list[Any]:
        for part in self.parts:
            if key in part:
                return part[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return (k for part in self.parts for k in part)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)


class Indexes:
    """kopf's indexes, and the FreeCapacity the operator's index handlers feed alongside."""

    def __init__(self) -> None:
        self.capacity = cache.FreeCapacity()
        self.jobs = FakeIndex(cache.index_job)
        self.nodes = FakeIndex(cache.index_node)
        self.usage = FakeIndex(cache.index_pod_usage)
        self.job_pods = FakeIndex(cache.index_job_pod)
        self.services = FakeIndex(cache.index_owned)
        self.config_maps = FakeIndex(cache.index_owned)

    def indices(self) -> dict[str, FakeIndex]:
        return {
            "kubegan_jobs": self.jobs,
            "kubegan_nodes": self.nodes,
            "kubegan_pods": _Both(self.usage, self.job_pods),
            "kubegan_services": self.services,
            "kubegan_config_maps": self.config_maps,
        }

    def add_job(self, body: Mapping[str, Any]) -> None:
        self.jobs.put(body)

    def add_node(self, body: Mapping[str, Any]) -> None:
        self.nodes.put(body)
        for name, entry in cache.index_node(body).items():
            self.capacity.see_node(name, entry)

    def drop_node(self, body: Mapping[str, Any]) -> None:
        self.nodes.drop(body)
        self.capacity.see_node(body["metadata"]["name"], None)

    def add_pod(self, body: Mapping[str, Any]) -> None:
        self.usage.put(body)
        self.job_pods.put(body)
        usage = cache.index_pod_usage(body)
        self.capacity.see_pod(cache.pod_key(body), next(iter(usage.values()), None))

    def drop_pod(self, body: Mapping[str, Any]) -> None:
        self.usage.drop(body)
        self.job_pods.drop(body)
        self.capacity.see_pod(cache.pod_key(body), None)


def job_body(
    name: str, phase: str = "Pending", unschedulable: bool = False, rv: str = "1"
) -> dict[str, Any]:
    conditions = (
        [{"type": "Unschedulable", "status": "True", "reason": "NoFit"}] if unschedulable else []
    )
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {},
        "status": {"phase": phase, "conditions": conditions},
    }


def pod_body(job: str, index: int, node: str | None = None, gpus: int = 8) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": CONTAINER_NAME, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": f"{job}-worker-{index}",
            "namespace": "ns",
            "labels": {JOB_NAME_LABEL: job},
            "ownerReferences": [{"uid": f"uid-{job}"}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }
