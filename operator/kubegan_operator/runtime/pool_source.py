"""The autoscaled pools the planner may scale: pools declared in the chart's values
(`--node-pools FILE`) and, with `--karpenter`, Karpenter's NodePools, listed every few seconds.

NodePools change rarely and an operator must run on clusters without Karpenter's CRDs, so they
are polled rather than watched through a kopf index (whose initial listing would never finish
for a resource the cluster does not have). A NodePool kubegan cannot size is logged once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from kubegan_operator.foundation.pools import PoolTemplate, from_nodepool
from kubegan_operator.runtime.threads import ApiThreads

log = logging.getLogger("kubegan.pools")

NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL = "karpenter.sh", "v1", "nodepools"
POLL_SECONDS = 10.0


class PoolSource:
    def __init__(self, declared: Sequence[PoolTemplate] = (), karpenter: bool = False) -> None:
        self.declared = tuple(declared)
        self.karpenter = karpenter
        self._nodepools: tuple[PoolTemplate, ...] = ()
        self._said: set[str] = set()

    def pools(self) -> tuple[PoolTemplate, ...]:
        return self.declared + self._nodepools

    def update(self, nodepools: Sequence[dict[str, Any]]) -> bool:
        """Take a fresh NodePool listing; True when the pools changed."""
        templates: list[PoolTemplate] = []
        for obj in nodepools:
            t = from_nodepool(obj)
            if isinstance(t, str):
                if t not in self._said:
                    self._said.add(t)
                    log.warning("%s", t)
            else:
                templates.append(t)
        new = tuple(sorted(templates, key=lambda t: t.source))
        changed = new != self._nodepools
        self._nodepools = new
        return changed

    async def poll(self, kube: Any, threads: ApiThreads, changed: Callable[[], None]) -> None:
        """List NodePools forever; `changed()` when the pools differ from the last listing."""
        while self.karpenter:
            try:
                items = await threads.run(_list_nodepools, kube)
            except ApiException as err:
                if err.status in (403, 404):
                    said = f"NodePools not readable ({err.status}): planning without them"
                    if said not in self._said:
                        self._said.add(said)
                        log.warning("%s", said)
                    items = []
                else:
                    log.warning(
                        "listing NodePools failed (%s); keeping the last listing", err.status
                    )
                    await asyncio.sleep(POLL_SECONDS)
                    continue
            if self.update(items):
                log.info(
                    "autoscaled pools: %s", ", ".join(t.source for t in self.pools()) or "none"
                )
                changed()
            await asyncio.sleep(POLL_SECONDS)


def _list_nodepools(kube: Any) -> list[dict[str, Any]]:
    listing = kube.custom.list_cluster_custom_object(
        NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL
    )
    return list(listing.get("items") or [])
