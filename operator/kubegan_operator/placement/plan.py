"""A placement plan: how many workers, what each holds, on which nodes, at what rate; and
its JSON form, as `kubegan plan` prints it and job status keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    feasible: bool
    workers: int = 0
    gpus_per_worker: int = 0
    tpu_chips_per_worker: int = 0
    strategy: str = ""
    nodes: tuple[str, ...] = ()
    spot: bool = False
    pool: str = ""
    pool_label: str = ""
    accelerator: str = ""
    cost_per_hour: float = 0.0
    reason: str = ""
    # What the price table has no price for (machine types, accelerators): cost_per_hour
    # counts the rest, and the job's CostKnown condition says what is missing.
    unpriced: tuple[str, ...] = ()
    # Nodes an autoscaled pool must add for this plan (its workers beyond `nodes` wait for
    # them, pinned to the pool), and where they come from, for the status and the events.
    new_nodes: int = 0
    pool_source: str = ""
    pool_limits: str = ""
    # How many more nodes the pool's limits let it add now (None: no limits). The planner
    # names the limits rather than enforce them; an elastic job reads them (decide/elastic.py).
    pool_room: int | None = None
    # What each worker requests when the job names no cpu/memory (placement.worker_share);
    # "" where the job names its own, or no node's shape is known.
    cpu_per_worker: str = ""
    memory_per_worker: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "workers": self.workers,
            "gpusPerWorker": self.gpus_per_worker,
            "tpuChipsPerWorker": self.tpu_chips_per_worker,
            "strategy": self.strategy,
            "nodes": list(self.nodes),
            "spot": self.spot,
            "pool": self.pool,
            "poolLabel": self.pool_label,
            "accelerator": self.accelerator,
            "costPerHour": self.cost_per_hour,
            "unpriced": list(self.unpriced),
            "reason": self.reason,
            **(
                {
                    "newNodes": self.new_nodes,
                    "poolSource": self.pool_source,
                    "poolLimits": self.pool_limits,
                    **({"poolRoom": self.pool_room} if self.pool_room is not None else {}),
                }
                if self.new_nodes
                else {}
            ),
            **({"cpuPerWorker": self.cpu_per_worker} if self.cpu_per_worker else {}),
            **({"memoryPerWorker": self.memory_per_worker} if self.memory_per_worker else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """The form `to_json` wrote into job status; ValueError/TypeError if tampered with."""
        return cls(
            feasible=bool(data.get("feasible")),
            workers=int(data.get("workers", 0)),
            gpus_per_worker=int(data.get("gpusPerWorker", 0)),
            tpu_chips_per_worker=int(data.get("tpuChipsPerWorker", 0)),
            strategy=str(data.get("strategy", "")),
            nodes=tuple(data.get("nodes") or ()),
            spot=bool(data.get("spot")),
            pool=str(data.get("pool", "")),
            pool_label=str(data.get("poolLabel", "")),
            accelerator=str(data.get("accelerator", "")),
            cost_per_hour=float(data.get("costPerHour", 0.0)),
            unpriced=tuple(str(u) for u in data.get("unpriced") or ()),
            reason=str(data.get("reason", "")),
            new_nodes=int(data.get("newNodes", 0)),
            pool_source=str(data.get("poolSource", "")),
            pool_limits=str(data.get("poolLimits", "")),
            pool_room=None if data.get("poolRoom") is None else int(data["poolRoom"]),
            cpu_per_worker=str(data.get("cpuPerWorker", "")),
            memory_per_worker=str(data.get("memoryPerWorker", "")),
        )

    def waits_for_capacity(self) -> bool:
        return self.new_nodes > 0
