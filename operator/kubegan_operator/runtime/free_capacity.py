"""Free capacity, kept between plans from the node and pod-usage watch events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from kubegan_operator.foundation.topology import Inventory, NodeInfo, PodUsage, with_usage
from kubegan_operator.runtime.indexes import JobKey, NodeEntry, PodKey


class FreeCapacity:
    """Each node's capacity less what the pods the watch shows hold on it, kept up to date
    per watch event and recomputed only for the nodes whose entry or pods changed since the
    last plan. Assembling it from the indexes for every plan (every node's usage summed,
    every node copied, all sorted) was a fifth of the operator's event loop at 1000 nodes,
    and every waiting job is planned again whenever capacity frees up.

    Fed by the same events as kopf's node and pod-usage indexes (their index handlers, and
    the DELETED events kopf removes from its indexes without calling them), so it holds what
    they hold; `inventory()` equals `assemble_inventory()` over their entries
    (tests/unit/test_cache.py checks that after random event sequences)."""

    def __init__(self) -> None:
        self._entries: dict[str, NodeEntry] = {}
        self._pods: dict[PodKey, PodUsage] = {}
        self._job_pods: dict[JobKey, set[PodKey]] = {}
        self._used: dict[str, dict[str, Decimal]] = {}  # node -> summed requests of its pods
        self._free: dict[str, NodeInfo] = {}  # node -> capacity less _used
        self._dirty: set[str] = set()
        self._order: list[str] = []  # names in _free, sorted (the inventory's order)
        self._position: dict[str, int] = {}
        self._snapshot: tuple[NodeInfo, ...] = ()
        self._problem: dict[str, str] = {}  # node -> why it cannot be read
        self._problems: tuple[str, ...] = ()

    # ---- events ----

    def see_node(self, name: str, entry: NodeEntry | None) -> None:
        """A node's index entry now (None: deleted)."""
        if entry is None:
            self._entries.pop(name, None)
        else:
            self._entries[name] = entry
        self._dirty.add(name)

    def see_pod(self, pod: PodKey, usage: PodUsage | None) -> None:
        """What a pod holds now (None: nothing, finished, or deleted)."""
        old = self._pods.pop(pod, None)
        if old is not None:
            self._add(old.node, old.requests, -1)
            if old.job:
                held = self._job_pods.get((old.namespace, old.job))
                if held is not None:
                    held.discard(pod)
                    if not held:
                        del self._job_pods[(old.namespace, old.job)]
        if usage is not None:
            self._pods[pod] = usage
            self._add(usage.node, usage.requests, 1)
            if usage.job:
                self._job_pods.setdefault((usage.namespace, usage.job), set()).add(pod)

    def holds(self, pod: PodKey) -> bool:
        return pod in self._pods

    def _add(self, node: str, requests: Mapping[str, Decimal], sign: int) -> None:
        used = self._used.setdefault(node, {})
        for resource, amount in requests.items():
            left = used.get(resource, Decimal(0)) + sign * amount
            if left:
                used[resource] = left
            else:
                used.pop(resource, None)
        if not used:
            del self._used[node]
        self._dirty.add(node)

    # ---- reads ----

    def _refresh(self) -> None:
        if not self._dirty:
            return
        reordered = problems_changed = False
        for name in self._dirty:
            entry = self._entries.get(name)
            problem = entry.problem if entry is not None else None
            if self._problem.get(name) != problem:
                problems_changed = True
                if problem is None:
                    del self._problem[name]
                else:
                    self._problem[name] = problem
            if entry is None or entry.capacity is None:
                reordered |= self._free.pop(name, None) is not None
                continue
            reordered |= name not in self._free
            self._free[name] = with_usage(entry.capacity, self._used.get(name, {}))
        self._dirty.clear()
        if reordered:
            self._order = sorted(self._free)
            self._position = {name: i for i, name in enumerate(self._order)}
        if problems_changed:
            self._problems = tuple(self._problem[name] for name in sorted(self._problem))
        self._snapshot = tuple(self._free[name] for name in self._order)

    def inventory(
        self, exclude_job: JobKey | None = None, extra: Iterable[PodUsage] = ()
    ) -> Inventory:
        """Free capacity now, as `assemble_inventory` would sum it: `exclude_job`'s own pods
        left out (re-planning a running job), `extra` usages (pods the watch does not show
        yet or at all) counted on top, except those of `exclude_job`."""
        self._refresh()
        delta: dict[str, dict[str, Decimal]] = {}

        def adjust(u: PodUsage, sign: int) -> None:
            bucket = delta.setdefault(u.node, {})
            for resource, amount in u.requests.items():
                bucket[resource] = bucket.get(resource, Decimal(0)) + sign * amount

        for pod in self._job_pods.get(exclude_job, ()) if exclude_job else ():
            adjust(self._pods[pod], -1)
        for u in extra:
            if exclude_job is None or (u.namespace, u.job) != exclude_job:
                adjust(u, 1)
        nodes: tuple[NodeInfo, ...] | list[NodeInfo] = self._snapshot
        if delta:
            nodes = list(nodes)
            for name, change in delta.items():
                i, entry = self._position.get(name), self._entries.get(name)
                if i is None or entry is None or entry.capacity is None:
                    continue  # usage on a node the index does not hold: nothing to reduce
                used = dict(self._used.get(name, {}))
                for resource, amount in change.items():
                    used[resource] = used.get(resource, Decimal(0)) + amount
                nodes[i] = with_usage(entry.capacity, used)
        return Inventory(tuple(nodes), self._problems)
