"""When a node counts as usable: Ready, or NotReady for less than a grace period."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from kubegan_operator.runtime.indexes import NodeEntry, stored

# What a node must be NotReady for before its workers count as disrupted: a heartbeat blip
# must not restart a whole gang (whose old containers may still be writing checkpoints).
NOT_READY_GRACE_SECONDS = 30.0


class NodeReadiness(Mapping[str, bool]):
    """View.node_ready: a node's name -> usable now, computed when asked."""

    def __init__(self, nodes: Mapping[str, Any], now: datetime) -> None:
        self._nodes, self._now = nodes, now

    def __getitem__(self, name: str) -> bool:
        entry = stored(self._nodes.get(name))
        if entry is None:
            raise KeyError(name)
        return usable(entry, self._now)

    def __iter__(self) -> Iterator[str]:
        return (name for name, store in self._nodes.items() if stored(store) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def usable(entry: NodeEntry, now: datetime) -> bool:
    if entry.ready:
        return True
    since = entry.not_ready_since
    return since is not None and (now - since).total_seconds() < NOT_READY_GRACE_SECONDS
