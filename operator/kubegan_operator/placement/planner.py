"""Topology-aware placement (DESIGN §3) as pure functions.

The fastest shape on GPU clusters is one worker per node holding all of that node's GPUs, so
for `gpus: G` we take the largest divisor d of G that `G/d` eligible nodes can each hold.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import replace

from kubegan_api.resources import SpotPolicy
from kubegan_api.sections import Strategy
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_trainer.worker.distribution import decide_strategy

from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.api.rates import NodeBilling, Rate, WorkerRequest, cost_rate
from kubegan_operator.foundation.pools import (
    MAX_NEW_NODES,
    PoolTemplate,
    new_node,
    pool_nodes,
    room_for,
)
from kubegan_operator.foundation.topology import (
    Inventory,
    NodeInfo,
    Taint,
)
from kubegan_operator.placement.eligibility import Requirements, ineligibility
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.worker_share import default_requests

MAX_LISTED = 6  # skipped nodes named in a reason before "and N more"


# ---- shape and node choice ----------------------------------------------------------------


def divisors_descending(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)}, reverse=True)


def choose_gpu_shape(total: int, free_gpus: Sequence[int], single_worker: bool) -> int | None:
    """Largest d dividing `total` such that total/d nodes each have d free GPUs."""
    for d in divisors_descending(total):
        if single_worker and d != total:
            continue
        if sum(f >= d for f in free_gpus) >= total // d:
            return d
    return None


def choose_nodes(candidates: Sequence[NodeInfo], workers: int, per_worker: int) -> list[NodeInfo]:
    """`workers` nodes from `candidates` (each already fits): one pool holding the whole job,
    then spot (cheaper), then best fit, then name."""

    def node_key(n: NodeInfo) -> tuple[bool, int, int, str]:
        # Nodes that exist before nodes an autoscaler would have to add.
        return (n.planned, 0 if n.spot else 1, n.free_gpus - per_worker, n.name)

    by_pool: dict[str, list[NodeInfo]] = {}
    for n in candidates:
        if n.pool:
            by_pool.setdefault(n.pool, []).append(n)
    options: list[tuple[tuple[int, int, str], list[NodeInfo]]] = []
    for pool, nodes in by_pool.items():
        if len(nodes) >= workers:
            chosen = heapq.nsmallest(workers, nodes, key=node_key)
            spot_rank = 0 if all(n.spot for n in chosen) else 1
            waste = sum(n.free_gpus - per_worker for n in chosen)
            options.append(((spot_rank, waste, pool), chosen))
    if options:
        return min(options, key=lambda o: o[0])[1]
    return heapq.nsmallest(workers, candidates, key=node_key)


def resolve_strategy(spec: GANTrainingJobSpec, workers: int) -> str:
    """The trainer's own decision (kubegan_trainer.worker.distribution), for this job's shape."""
    tpu = spec.resources.tpu is not None
    return decide_strategy(spec.framework, spec.strategy, workers, tpu)


def _skipped_summary(skipped: Sequence[tuple[str, str]]) -> str:
    if not skipped:
        return ""
    listed = "; ".join(f"{name}: {why}" for name, why in skipped[:MAX_LISTED])
    more = f"; and {len(skipped) - MAX_LISTED} more" if len(skipped) > MAX_LISTED else ""
    return f" Skipped nodes: {listed}{more}."


def plan(
    spec: GANTrainingJobSpec,
    inventory: Inventory,
    prices: PriceTable = DEFAULT_PRICES,
    pools: Sequence[PoolTemplate] = (),
) -> Plan:
    """Free capacity on the nodes that exist first; when that cannot hold the job, the
    cheapest autoscaled pool that can add the nodes."""
    now = plan_existing(spec, inventory, prices)
    if now.feasible or not pools or spec.resources.tpu is not None:
        return now
    scaled, why_not = plan_on_pools(spec, inventory, pools, prices)
    if scaled is not None:
        return scaled
    return replace(now, reason=f"{now.reason} Autoscaled pools: {why_not}.")


def plan_existing(
    spec: GANTrainingJobSpec,
    inventory: Inventory,
    prices: PriceTable = DEFAULT_PRICES,
) -> Plan:
    eligible: list[NodeInfo] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    req = Requirements.of(spec)
    tolerated: dict[Taint, bool] = {}
    for node in inventory.nodes:
        # build_inventory refuses a node listed twice; an Inventory made another way must
        # still never give one node two workers.
        if node.name in seen:
            continue
        seen.add(node.name)
        why = ineligibility(node, req, tolerated)
        if why is None:
            eligible.append(node)
        else:
            skipped.append((node.name, why))
    if spec.resources.tpu is not None:
        return _plan_tpu(spec, eligible, skipped, prices)
    return _plan_gpu(spec, eligible, skipped, prices)


def _filters(spec: GANTrainingJobSpec) -> str:
    parts = []
    if spec.resources.accelerator:
        parts.append(f"accelerator {spec.resources.accelerator}")
    if spec.placement.spot != SpotPolicy.allowed:
        parts.append(f"spot {spec.placement.spot.value}")
    if spec.placement.node_selector:
        parts.append(
            "nodeSelector "
            + ",".join(f"{k}={v}" for k, v in sorted(spec.placement.node_selector.items()))
        )
    return f" ({'; '.join(parts)})" if parts else ""


def _plan_gpu(
    spec: GANTrainingJobSpec,
    eligible: list[NodeInfo],
    skipped: list[tuple[str, str]],
    prices: PriceTable,
) -> Plan:
    r = spec.resources

    def free_text() -> str:  # only for a reason: sorting every node's GPUs costs
        free = sorted((n.free_gpus for n in eligible), reverse=True)
        return ", ".join(map(str, free[:12])) + (" …" if len(free) > 12 else "")

    if r.gpus is not None:
        single = spec.strategy == Strategy.mirrored
        d = choose_gpu_shape(r.gpus, [n.free_gpus for n in eligible], single)
        if d is None:
            shape = "one node" if single else "G/d nodes with d free GPUs each, for a divisor d"
            return Plan(
                False,
                strategy=resolve_strategy(spec, 0),
                reason=f"no placement for {r.gpus} GPUs{_filters(spec)}: need {shape}; "
                f"{len(eligible)} eligible node(s) with free GPUs [{free_text()}]."
                + _skipped_summary(skipped),
            )
        workers, per_worker = r.gpus // d, d
    else:
        workers, per_worker = r.workers or 1, r.gpus_per_worker or 0
    candidates = [n for n in eligible if n.free_gpus >= per_worker]
    if len(candidates) < workers:
        what = f"{per_worker} free GPUs" if per_worker else "room for a CPU worker"
        return Plan(
            False,
            workers=workers,
            gpus_per_worker=per_worker,
            strategy=resolve_strategy(spec, workers),
            reason=f"need {workers} node(s) with {what}{_filters(spec)}, one worker per node; "
            f"{len(candidates)} eligible node(s) qualify (free GPUs [{free_text()}])."
            + _skipped_summary(skipped),
        )
    chosen = choose_nodes(candidates, workers, per_worker)
    return _feasible(spec, chosen, per_worker, 0, prices)


def plan_on_pools(
    spec: GANTrainingJobSpec,
    inventory: Inventory,
    pools: Sequence[PoolTemplate],
    prices: PriceTable,
) -> tuple[Plan | None, str]:
    """The cheapest plan that autoscaled pools can hold by adding nodes (spot first where
    the job allows it, then cost per hour, then fewer new nodes), or None and why no pool
    can. Each pool is planned alone: a gang spread over two pools would wait for two
    autoscalers, and one worker per node with all its GPUs holds for the new nodes too."""
    req = Requirements.of(spec)
    options: list[tuple[tuple[bool, bool, float, int, str], Plan]] = []
    notes: list[str] = []
    for pool in pools:
        best, why = _plan_on_pool(spec, req, inventory, pool, prices)
        if best is None:
            notes.append(f"{pool.source}: {why}")
        else:
            # A pool the table cannot price is no cheaper for it: priced pools first.
            key = (not best.spot, bool(best.unpriced), best.cost_per_hour, best.new_nodes)
            options.append(((*key, pool.name), best))
    if not options:
        return None, "; ".join(notes[:MAX_LISTED]) + (
            f"; and {len(notes) - MAX_LISTED} more" if len(notes) > MAX_LISTED else ""
        )
    return min(options, key=lambda o: o[0])[1], ""


def _plan_on_pool(
    spec: GANTrainingJobSpec,
    req: Requirements,
    inventory: Inventory,
    pool: PoolTemplate,
    prices: PriceTable,
) -> tuple[Plan | None, str]:
    """The pool's plan: its free nodes first, then as many new nodes as the gang needs. The
    pool's limits are named, not enforced: what else holds the pool (other pods, nodes being
    added) is the autoscaler's to know, and a gang it cannot complete is released after
    spec.scheduling.capacityTimeoutSeconds with the limits in the message."""
    existing = pool_nodes(pool, inventory.nodes)
    tolerated: dict[Taint, bool] = {}
    usable = [n for n in existing if ineligibility(n, req, tolerated) is None]
    need = min(MAX_NEW_NODES, spec.resources.workers or spec.resources.gpus or 1)
    why = "no instance type fits"
    # Largest nodes first: fewer, fuller nodes (the shape rule), as on nodes that exist.
    for shape in sorted(pool.shapes, key=lambda s: (-s.gpus, s.instance_type)):
        unfit = ineligibility(new_node(pool, shape, 0), req, tolerated)
        if unfit is not None:
            why = f"{shape.instance_type or 'its nodes'}: {unfit}"
            continue
        candidates = usable + [new_node(pool, shape, i) for i in range(need)]
        result = _plan_gpu(spec, candidates, [], prices)
        if not result.feasible:
            why = f"{shape.instance_type or 'its nodes'}: {result.reason.split(';')[0]}"
            continue
        new = {n.name for n in candidates if n.planned}
        real = tuple(n for n in result.nodes if n not in new)
        limits = pool.limit_text()
        room = room_for(pool, shape, existing) if pool.limits else None
        if room is not None:
            limits += f", room for {room} more node(s) when planned"
        return replace(
            result,
            nodes=real,
            new_nodes=result.workers - len(real),
            pool=pool.name,
            pool_label=pool.pool_label,
            pool_source=pool.source,
            pool_limits=limits,
            pool_room=room,
        ), ""
    return None, why


def topology_chips(topology: str) -> int:
    return math.prod(int(x) for x in topology.split("x"))


def _plan_tpu(
    spec: GANTrainingJobSpec,
    eligible: list[NodeInfo],
    skipped: list[tuple[str, str]],
    prices: PriceTable,
) -> Plan:
    tpu = spec.resources.tpu
    assert tpu is not None
    chips = topology_chips(tpu.topology)
    slices: dict[str, list[NodeInfo]] = {}
    for n in eligible:
        if n.tpu_accelerator == tpu.accelerator and n.tpu_topology == tpu.topology:
            slices.setdefault(n.pool or n.name, []).append(n)
    notes: list[str] = []
    options: list[tuple[tuple[int, str], list[NodeInfo]]] = []
    for pool, hosts in sorted(slices.items()):
        per_host = max(h.tpu_chips for h in hosts)
        if per_host == 0 or chips % per_host:
            notes.append(f"slice {pool}: {per_host} chips per host do not divide {chips}")
            continue
        need = chips // per_host
        ready = [h for h in hosts if h.tpu_chips == per_host and h.free_tpu_chips == per_host]
        if len(ready) < need:
            notes.append(f"slice {pool}: {len(ready)} of {need} hosts free and eligible")
            continue
        chosen = sorted(ready, key=lambda h: h.name)[:need]
        options.append(((0 if all(h.spot for h in chosen) else 1, pool), chosen))
    if not options:
        detail = "; ".join(notes) if notes else "no eligible node carries those TPU labels"
        return Plan(
            False,
            strategy=resolve_strategy(spec, 0),
            reason=f"no free TPU slice {tpu.accelerator} {tpu.topology}{_filters(spec)}: "
            f"{detail}." + _skipped_summary(skipped),
        )
    chosen = min(options, key=lambda o: o[0])[1]
    return _feasible(spec, chosen, 0, chosen[0].tpu_chips, prices)


def _worker_request(spec: GANTrainingJobSpec, accelerators: int) -> WorkerRequest:
    """What each worker is priced for: its accelerators and the cpu/memory its job names. The
    requests a job that names none is given (placement.worker_share) are a margin sized from
    each node, not the job's ask: pricing them would make a rate follow node sizes (and a
    local run, whose machine has none, disagree with the operator)."""
    return WorkerRequest.of(accelerators, spec.resources.cpu, spec.resources.memory)


def _feasible(
    spec: GANTrainingJobSpec,
    chosen: list[NodeInfo],
    gpus_per_worker: int,
    tpu_chips_per_worker: int,
    prices: PriceTable,
) -> Plan:
    def accelerator_of(n: NodeInfo) -> str:
        return n.tpu_accelerator if tpu_chips_per_worker else n.accelerator

    pools = {(n.pool, n.pool_label) for n in chosen}
    cpu, memory = default_requests(
        chosen, gpus_per_worker or tpu_chips_per_worker, tpu=bool(tpu_chips_per_worker)
    )
    rate = cost_rate(
        _worker_request(spec, gpus_per_worker or tpu_chips_per_worker),
        [NodeBilling.of(n, tpu=bool(tpu_chips_per_worker)) for n in chosen],
        prices,
        spec.cost.accelerator_hourly_price,
    )
    accelerators = (
        {accelerator_of(n) for n in chosen} if (gpus_per_worker or tpu_chips_per_worker) else set()
    )
    return Plan(
        True,
        workers=len(chosen),
        gpus_per_worker=gpus_per_worker,
        tpu_chips_per_worker=tpu_chips_per_worker,
        strategy=resolve_strategy(spec, len(chosen)),
        nodes=tuple(n.name for n in chosen),
        spot=all(n.spot for n in chosen),
        pool=next(iter(pools))[0] if len(pools) == 1 else "",
        pool_label=next(iter(pools))[1] if len(pools) == 1 else "",
        accelerator=accelerators.pop() if len(accelerators) == 1 else "",
        cost_per_hour=rate.per_hour,
        unpriced=rate.unpriced,
        reason="",
        cpu_per_worker="" if spec.resources.cpu is not None else cpu,
        memory_per_worker="" if spec.resources.memory is not None else memory,
    )


# Single-host slices of these types hold up to 8 chips; multi-host slices have 4 per host.
SINGLE_HOST_8_CHIP_TPUS = ("tpu-v5-lite-podslice", "tpu-v6e-slice")


def static_plan(spec: GANTrainingJobSpec, prices: PriceTable = DEFAULT_PRICES) -> Plan:
    """The shape when no nodes are known (`kubegan render` without --nodes): explicit
    workers, or a TPU slice sized from its topology. `gpus` needs nodes to choose a shape."""
    r = spec.resources
    if r.tpu is not None:
        chips = topology_chips(r.tpu.topology)
        single = chips <= 8 and r.tpu.accelerator in SINGLE_HOST_8_CHIP_TPUS
        per_host = chips if single else min(4, chips)
        if chips % per_host:
            # The API's topology pattern refuses such shapes; never round a slice down.
            return Plan(
                False,
                strategy=resolve_strategy(spec, 0),
                reason=f"spec.resources.tpu.topology: {r.tpu.topology} ({chips} chips) is not "
                f"a whole number of {per_host}-chip hosts",
            )
        hosts = chips // per_host
        host = NodeBilling("", r.tpu.accelerator, False, per_host, tpu=True)
        rate = _static_rate(spec, per_host, host, hosts, prices)
        return Plan(
            True,
            workers=hosts,
            tpu_chips_per_worker=per_host,
            strategy=resolve_strategy(spec, hosts),
            accelerator=r.tpu.accelerator,
            cost_per_hour=rate.per_hour,
            unpriced=rate.unpriced,
        )
    if r.workers is None:
        return Plan(
            False,
            strategy=resolve_strategy(spec, 0),
            reason="spec.resources.gpus: the shape depends on the nodes; pass --nodes",
        )
    per_worker = r.gpus_per_worker or 0
    node = NodeBilling("", r.accelerator, False, per_worker)
    rate = _static_rate(spec, per_worker, node, r.workers, prices)
    return Plan(
        True,
        workers=r.workers,
        gpus_per_worker=per_worker,
        strategy=resolve_strategy(spec, r.workers),
        accelerator=r.accelerator,
        cost_per_hour=rate.per_hour,
        unpriced=rate.unpriced,
    )


def _static_rate(
    spec: GANTrainingJobSpec, per_worker: int, node: NodeBilling, workers: int, prices: PriceTable
) -> Rate:
    """With no node known, each worker is priced on a node of no known machine type (its
    accelerator per device, and what it requests)."""
    request = _worker_request(spec, per_worker)
    return cost_rate(request, [node] * workers, prices, spec.cost.accelerator_hourly_price)
