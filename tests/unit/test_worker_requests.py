"""No worker is BestEffort: a job naming no cpu/memory gets the share of its planned node its
accelerators are (less headroom, at most what the node has free), a CPU-only or shapeless
one the documented minimum; /dev/shm is sized from the memory request; `kubegan validate`
warns about a job that names neither."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubegan_api.reserved import SHM_VOLUME
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.api.loading import load_job
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.machines import machine_shape
from kubegan_operator.foundation.pools import PoolTemplate, new_node
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.manifests.pods import render_all
from kubegan_operator.manifests.volumes import shm_size_limit
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan, static_plan
from kubegan_operator.placement.worker_share import default_requests

from tests.support.world import node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GIB = 2**30


def qos_class(pod: dict[str, Any]) -> str:
    """The pod's QoS class, as the kubelet works it out: only non-zero cpu/memory requests
    and limits count (an accelerator request does not)."""
    counted = ("cpu", "memory")
    requests, limits = [], []
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        requests += [k for k, v in (res.get("requests") or {}).items() if k in counted and v]
        limits += [k for k, v in (res.get("limits") or {}).items() if k in counted and v]
    if not requests and not limits:
        return "BestEffort"
    every = all(
        set((c.get("resources") or {}).get("limits") or {}) >= set(counted)
        and (c["resources"]["limits"]["cpu"], c["resources"]["limits"]["memory"])
        == (c["resources"]["requests"].get("cpu"), c["resources"]["requests"].get("memory"))
        for c in pod["spec"]["containers"]
    )
    return "Guaranteed" if every else "Burstable"


def nodes_for(job: GANTrainingJob) -> list[dict[str, Any]]:
    """Four nodes a job's placement accepts: its accelerator, its nodeSelector's labels, spot
    where it requires spot, a TPU slice for a TPU job."""
    r, p = job.spec.resources, job.spec.placement
    labels = dict(p.node_selector)
    spot = p.spot.value == "required"
    if r.tpu is not None:
        labels["cloud.google.com/gke-tpu-accelerator"] = r.tpu.accelerator
        labels["cloud.google.com/gke-tpu-topology"] = r.tpu.topology
        return [node(f"t{i}", 0, tpu_chips=4, labels=labels, spot=spot) for i in range(4)]
    accelerator = r.accelerator or "nvidia-tesla-v100"
    gpus = 8 if (r.gpus or r.gpus_per_worker) else 0
    return [
        node(f"n{i}", gpus, accelerator=accelerator, labels=labels, spot=spot) for i in range(4)
    ]


def workers(job: GANTrainingJob, placed: Plan) -> list[dict[str, Any]]:
    assert placed.feasible, placed.reason
    return [o for o in render_all(job, placed) if o["kind"] == "Pod"]


def requests_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["spec"]["containers"][0]["resources"]["requests"])


def shm_of(pod: dict[str, Any]) -> dict[str, Any]:
    (shm,) = [v for v in pod["spec"]["volumes"] if v["name"] == SHM_VOLUME]
    return dict(shm["emptyDir"])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_no_example_renders_a_best_effort_worker(example: Path) -> None:
    job = load_job(example)
    placed = static_plan(job.spec)
    if not placed.feasible:  # `gpus` needs nodes to choose a shape
        placed = plan(job.spec, build_inventory(nodes_for(job)))
    for pod in workers(job, placed):
        assert {"cpu", "memory"} <= set(requests_of(pod)), example.name
        assert qos_class(pod) != "BestEffort"
        assert shm_of(pod) == {
            "medium": "Memory",
            "sizeLimit": shm_size_limit(requests_of(pod)["memory"]),
        }


def test_the_examples_of_clusters_name_their_own_requests() -> None:
    """Every example for a cloud says what its workers need; only the local one relies on
    the default (it runs under `kubegan run`)."""
    relying = [p.stem for p in EXAMPLES if load_job(p).spec.resources.cpu is None]
    assert relying == ["digits-local"]


def job_with(**resources: Any) -> GANTrainingJob:
    base = load_job(ROOT / "examples" / "gan3d-gke-v100-spot.yaml")
    doc = base.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["spec"]["resources"] = resources
    doc["spec"]["placement"] = {}
    return GANTrainingJob.model_validate(copy.deepcopy(doc))


def test_a_gpu_worker_requests_its_gpus_share_of_the_node() -> None:
    # Nodes of 8 GPUs, 96 CPUs and 624 GiB: 16 GPUs are two whole nodes, 4 half of one.
    inventory = build_inventory([node(f"n{i}", 8) for i in range(3)])
    whole = plan(job_with(gpus=16).spec, inventory)
    assert (whole.workers, whole.gpus_per_worker) == (2, 8)
    assert (whole.cpu_per_worker, whole.memory_per_worker) == ("86400m", "575078Mi")  # 90 %
    half = plan(job_with(workers=1, gpusPerWorker=4).spec, inventory)
    assert (half.cpu_per_worker, half.memory_per_worker) == ("43200m", "287539Mi")
    for pod in workers(job_with(gpus=16), whole):
        assert requests_of(pod) == {"cpu": "86400m", "memory": "575078Mi", "nvidia.com/gpu": "8"}
        # A share the operator chose is requested, never a limit that could OOM-kill.
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        assert qos_class(pod) == "Burstable"


def test_the_share_never_exceeds_what_the_node_has_free() -> None:
    busy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other", "namespace": "x"},
        "spec": {
            "nodeName": "n0",
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "90", "memory": "1Gi"}}}
            ],
        },
        "status": {"phase": "Running"},
    }
    placed = plan(job_with(workers=1, gpusPerWorker=8).spec, build_inventory([node("n0")], [busy]))
    assert placed.cpu_per_worker == "6"  # 96 - 90 free, below 90 % of 96
    # Nothing free (other pods requested it all): the floor, never a request that cannot bind.
    busy["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "96"
    (full,) = build_inventory([node("n0")], [busy]).nodes
    assert default_requests([full], 8, tpu=False)[0] == "10m"
    assert placed.memory_per_worker == "575078Mi"  # 90 % of 624 GiB, below the 623 free


def test_a_tpu_host_and_a_gang_of_unequal_nodes() -> None:
    tpu = job_with(tpu={"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"})
    labels = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    slice_ = [node(f"t{i}", 0, tpu_chips=4, labels=labels, cpu="112") for i in range(2)]
    placed = plan(tpu.spec, build_inventory(slice_))
    assert (placed.workers, placed.cpu_per_worker) == (2, "100800m")  # 4 of 4 chips
    # One figure for a gang: the smallest node's share, so every worker fits its own.
    small, big = node("s", 8, cpu="48"), node("b", 8, cpu="96")
    placed = plan(job_with(gpus=16).spec, build_inventory([small, big]))
    assert placed.cpu_per_worker == "43200m"


def test_cpu_workers_and_unknown_shapes_get_the_documented_minimum() -> None:
    cpu_only = job_with(workers=2, gpusPerWorker=0)
    placed = plan(cpu_only.spec, build_inventory([node(f"c{i}", 0) for i in range(2)]))
    assert (placed.cpu_per_worker, placed.memory_per_worker) == ("1", "2Gi")
    # `kubegan render` without nodes: the static plan knows no node.
    static = static_plan(job_with(workers=2, gpusPerWorker=1).spec)
    assert (static.cpu_per_worker, static.memory_per_worker) == ("", "")
    pod = workers(job_with(workers=2, gpusPerWorker=1), static)[0]
    assert {k: requests_of(pod)[k] for k in ("cpu", "memory")} == {"cpu": "1", "memory": "2Gi"}
    assert shm_of(pod)["sizeLimit"] == "1Gi"


def test_a_new_node_of_an_autoscaled_pool() -> None:
    pool = PoolTemplate("l4", "cloud.google.com/gke-nodepool", "test", {}, (), (), False)
    shape = machine_shape("g2-standard-8")
    assert shape is not None  # 8 vCPUs, 32 GiB, one L4
    assert default_requests([new_node(pool, shape, 0)], 1, tpu=False) == ("7200m", "29491Mi")
    unknown = new_node(pool, type(shape)("", 1, Decimal(0), Decimal(0), ""), 0)
    assert default_requests([unknown], 1, tpu=False) == ("1", "2Gi")


def test_what_the_job_names_wins_and_memory_it_names_is_limited() -> None:
    job = job_with(gpus=16, cpu="12")
    placed = plan(job.spec, build_inventory([node(f"n{i}", 8) for i in range(2)]))
    assert (placed.cpu_per_worker, placed.memory_per_worker) == ("", "575078Mi")
    res = workers(job, placed)[0]["spec"]["containers"][0]["resources"]
    assert (res["requests"]["cpu"], res["requests"]["memory"]) == ("12", "575078Mi")
    assert "memory" not in res["limits"]
    job = job_with(gpus=16, memory="64Gi")
    placed = plan(job.spec, build_inventory([node(f"n{i}", 8) for i in range(2)]))
    res = workers(job, placed)[0]["spec"]["containers"][0]["resources"]
    assert res["requests"]["memory"] == res["limits"]["memory"] == "64Gi"
    assert res["requests"]["cpu"] == "86400m"


def test_the_plan_keeps_the_shares_in_status() -> None:
    placed = plan(job_with(gpus=16).spec, build_inventory([node(f"n{i}", 8) for i in range(2)]))
    data = placed.to_json()
    assert (data["cpuPerWorker"], data["memoryPerWorker"]) == ("86400m", "575078Mi")
    assert Plan.from_json(data) == placed
    # A plan written before shares existed renders the minimum, not nothing.
    old = {k: v for k, v in data.items() if not k.endswith("PerWorker") or k == "gpusPerWorker"}
    pod = workers(job_with(gpus=16), Plan.from_json(old))[0]
    assert {k: requests_of(pod)[k] for k in ("cpu", "memory")} == {"cpu": "1", "memory": "2Gi"}


@pytest.mark.parametrize(
    ("memory", "size"),
    [("200Gi", "16Gi"), ("3Gi", "1536Mi"), ("2Gi", "1Gi"), ("256Mi", "256Mi"), ("1G", "476Mi")],
)
def test_shm_is_half_the_memory_within_bounds(memory: str, size: str) -> None:
    assert shm_size_limit(memory) == size


def test_validate_warns_about_a_job_naming_neither(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(ROOT / "examples" / "digits-local.yaml")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "valid"
    (line,) = err.splitlines()
    assert line.startswith("kubegan validate: warning: spec.resources sets neither cpu nor memory")
    assert "BestEffort" in line
    assert main(["validate", str(ROOT / "examples" / "gan3d-gke-v100-spot.yaml")]) == 0
    assert capsys.readouterr() == ("valid\n", "")
