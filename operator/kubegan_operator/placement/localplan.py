"""`kubegan run`'s placement: this machine as the planner sees a cluster.

A local run takes its shape from `planner.plan` and its cost rate from `pricing`, as a job on
a cluster does: one shape rule, one cost formula. Only what is local is decided here: the job
is fitted to the GPUs this machine has (fewer than a cluster job asks for, usually, and said
so), and the machine is described as the nodes the planner places on: one per worker (every
worker runs here, where a cluster puts one per node), sharing its GPUs, on-demand, with no
labels or taints (placement rules name a cluster's nodes, not a laptop).
"""

from __future__ import annotations

from decimal import Decimal

from kubegan_api.resources import PlacementSpec
from kubegan_api.spec import GANTrainingJobSpec

from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.foundation.topology import Inventory, NodeInfo
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan

LOCAL_NODE = "local"


def machine(workers: int, gpus: int) -> Inventory:
    """This machine as `workers` nodes, each with an equal share of its `gpus` and room for
    any CPU and memory request."""
    share = gpus // workers
    return Inventory(
        tuple(
            NodeInfo(
                name=f"{LOCAL_NODE}-{i}" if workers > 1 else LOCAL_NODE,
                labels={},
                taints=(),
                ready=True,
                unschedulable=False,
                gpus=share,
                free_gpus=share,
                tpu_chips=0,
                free_tpu_chips=0,
                free_cpu=Decimal("Infinity"),
                free_memory=Decimal("Infinity"),
                spot=False,
                pool="",
                pool_label="",
                accelerator="",
                tpu_accelerator="",
                tpu_topology="",
            )
            for i in range(workers)
        )
    )


def fit_to_machine(spec: GANTrainingJobSpec, gpus: int) -> tuple[GANTrainingJobSpec, str]:
    """The job's request as this machine with `gpus` GPUs can run it, and a note when that is
    less than the job asks of a cluster. Placement (node selector, spot, accelerator type)
    is dropped: this machine is what it is."""
    r = spec.resources
    workers = r.workers or 1
    wanted = r.gpus if r.gpus is not None else (r.gpus_per_worker or 0)
    per_worker = min(wanted, gpus // workers) if wanted else 0
    note = ""
    if wanted and per_worker < wanted:
        asked = f"{r.gpus} GPUs" if r.gpus is not None else f"{wanted} GPUs per worker"
        note = (
            f"the job asks for {asked}; this machine has {gpus}: running "
            f"{workers} worker(s) with {per_worker or 'no'} GPU(s) each"
        )
    if r.gpus is not None and per_worker == r.gpus:
        resources = r.model_copy(update={"accelerator": ""})  # the planner picks the shape
    else:
        explicit = {"gpus": None, "workers": workers, "gpus_per_worker": per_worker}
        resources = r.model_copy(update={**explicit, "accelerator": ""})
    fitted = spec.model_copy(update={"resources": resources, "placement": PlacementSpec()})
    return fitted, note


def local_plan(
    spec: GANTrainingJobSpec, gpus: int, prices: PriceTable = DEFAULT_PRICES
) -> tuple[Plan, str]:
    """The plan `kubegan run` follows on a machine with `gpus` GPUs, and fit_to_machine's
    note. The plan is feasible for every job the API admits but a TPU slice."""
    fitted, note = fit_to_machine(spec, gpus)
    return plan(fitted, machine(fitted.resources.workers or 1, gpus), prices), note
