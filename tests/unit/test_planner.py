"""Placement (DESIGN §3): shapes, node filters, spot policy, TPU slices, infeasible reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubegan_api.contract import JOB_NAME_LABEL, PLANNED_NODE_ANNOTATION
from kubegan_api.quantity import parse_quantity
from kubegan_api.resources import CostSpec
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.placement.planner import choose_gpu_shape, divisors_descending, plan

from tests.support.world import node, pod

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CPU, MEMORY = DEFAULT_PRICES.cpu, DEFAULT_PRICES.memory
assert CPU is not None and MEMORY is not None


def per_resource(p: Any, s: GANTrainingJobSpec, accelerator: str, spot: bool) -> float:
    """What plan `p` of `s` costs on nodes with no machine type (the test nodes): each
    device at the accelerator's price, and the vCPUs and GiB each worker's job names at the
    table's cpu and memory prices."""
    cpu = s.resources.cpu or "0"
    memory = s.resources.memory or "0"
    devices = p.gpus_per_worker or p.tpu_chips_per_worker
    price = DEFAULT_PRICES.price(accelerator, spot) if devices else 0.0
    host = float(parse_quantity(cpu)) * CPU.of(spot) + float(
        parse_quantity(memory)
    ) / 2**30 * MEMORY.of(spot)
    return p.workers * (devices * price + host)


def spec(**resources: Any) -> GANTrainingJobSpec:
    placement = resources.pop("placement", {})
    framework = resources.pop("framework", "tensorflow")
    return GANTrainingJobSpec.model_validate(
        {
            "framework": framework,
            "model": {"name": "gan3d"},
            "resources": resources,
            "placement": placement,
        }
    )


def v100_pool(n: int = 4, gpus: int = 8, **kw: Any) -> list[dict[str, Any]]:
    return [node(f"v100-{i}", gpus, taints=[GPU_TAINT], **kw) for i in range(n)]


def test_32_gpus_on_four_free_8_gpu_nodes() -> None:
    s = spec(gpus=32)
    p = plan(s, build_inventory(v100_pool()))
    assert p.feasible
    assert (p.workers, p.gpus_per_worker) == (4, 8)
    assert sorted(p.nodes) == ["v100-0", "v100-1", "v100-2", "v100-3"]
    assert p.strategy == "multi-worker"
    assert p.cost_per_hour == pytest.approx(per_resource(p, s, "nvidia-tesla-v100", False))
    assert p.unpriced == ()


def test_fragmentation_forces_smaller_workers() -> None:
    nodes = v100_pool(6)
    pods = [pod(f"other-{i}", f"v100-{i}", 4) for i in range(6)]  # 4 of 8 free everywhere
    p = plan(spec(gpus=16), build_inventory(nodes, pods))
    assert (p.workers, p.gpus_per_worker) == (4, 4)
    assert len(set(p.nodes)) == 4


def test_mixed_free_gpus_pick_best_fit() -> None:
    nodes = v100_pool(3)
    pods = [pod("a", "v100-0", 4), pod("b", "v100-1", 2)]
    p = plan(spec(gpus=8), build_inventory(nodes, pods))
    assert (p.workers, p.gpus_per_worker, p.nodes) == (1, 8, ("v100-2",))
    p = plan(spec(gpus=4), build_inventory(nodes, pods))
    assert p.nodes == ("v100-0",)  # exactly 4 free: best fit


def test_finished_pods_do_not_count() -> None:
    nodes = v100_pool(4)
    pods = [
        pod(f"done-{i}", f"v100-{i}", 8, phase=ph)
        for i, ph in enumerate(["Succeeded", "Failed", "Succeeded", "Failed"])
    ]
    assert plan(spec(gpus=32), build_inventory(nodes, pods)).workers == 4


def test_gpus_used_by_other_pods_count() -> None:
    nodes = v100_pool(4)
    pods = [pod("busy", "v100-3", 1)]
    p = plan(spec(gpus=32), build_inventory(nodes, pods))
    assert (p.workers, p.gpus_per_worker) == (8, 4) or not p.feasible
    assert not p.feasible  # 4x8 impossible and 8x4 needs 8 nodes
    assert "32 GPUs" in p.reason and "[8, 8, 8, 7]" in p.reason


def test_own_pods_excluded_when_replanning() -> None:
    nodes = v100_pool(4)
    mine = {JOB_NAME_LABEL: "gan"}
    pods = [pod(f"gan-worker-{i}", f"v100-{i}", 8, labels=mine) for i in range(4)]
    assert not plan(spec(gpus=32), build_inventory(nodes, pods)).feasible
    inv = build_inventory(nodes, pods, exclude_job=("default", "gan"))
    assert plan(spec(gpus=32), inv).feasible


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"cordoned": True}, "cordoned"),
        ({"deleting": True}, "being deleted"),
        ({"ready": False}, "NotReady"),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            "taint dedicated=ml:NoSchedule not tolerated",
        ),
    ],
)
def test_unusable_nodes_skipped(bad: dict[str, Any], why: str) -> None:
    nodes = [*v100_pool(3), node("v100-9", **bad)]
    p = plan(spec(gpus=32), build_inventory(nodes))
    assert not p.feasible
    assert f"v100-9: {why}" in p.reason
    assert plan(spec(gpus=24), build_inventory(nodes)).nodes == ("v100-0", "v100-1", "v100-2")


def test_user_toleration_admits_tainted_node() -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    nodes = [node("n0", taints=[taint])]
    assert not plan(spec(gpus=8), build_inventory(nodes)).feasible
    s = spec(
        gpus=8,
        placement={
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
            ]
        },
    )
    assert plan(s, build_inventory(nodes)).feasible


def test_prefer_no_schedule_taints_are_ignored() -> None:
    nodes = [node("n0", taints=[{"key": "x", "value": "y", "effect": "PreferNoSchedule"}])]
    assert plan(spec(gpus=8), build_inventory(nodes)).feasible


SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def mixed_spot() -> list[dict[str, Any]]:
    return [
        *[node(f"ondemand-{i}", pool="ondemand") for i in range(2)],
        *[node(f"spot-{i}", pool="spot", spot=True, taints=[SPOT_TAINT]) for i in range(2)],
    ]


def test_spot_allowed_prefers_spot() -> None:
    s = spec(gpus=16)
    p = plan(s, build_inventory(mixed_spot()))
    assert p.nodes == ("spot-0", "spot-1") and p.spot
    assert p.cost_per_hour == pytest.approx(per_resource(p, s, "nvidia-tesla-v100", True))


def test_spot_never_skips_spot_nodes() -> None:
    p = plan(spec(gpus=16, placement={"spot": "never"}), build_inventory(mixed_spot()))
    assert p.nodes == ("ondemand-0", "ondemand-1") and not p.spot
    p = plan(spec(gpus=24, placement={"spot": "never"}), build_inventory(mixed_spot()))
    assert not p.feasible and "spot-0: spot node (placement.spot: never)" in p.reason


def test_spot_required_only_spot() -> None:
    p = plan(spec(gpus=24, placement={"spot": "required"}), build_inventory(mixed_spot()))
    assert not p.feasible
    assert "ondemand-0: not a spot node (placement.spot: required)" in p.reason


def test_aks_spot_label_and_taint() -> None:
    aks = [
        node(
            f"aks-{i}",
            4,
            accelerator="",
            pool="",
            labels={
                "kubernetes.azure.com/agentpool": "gpuspot",
                "kubernetes.azure.com/scalesetpriority": "spot",
                "kubernetes.azure.com/accelerator": "nvidia",
            },
            taints=[
                {
                    "key": "kubernetes.azure.com/scalesetpriority",
                    "value": "spot",
                    "effect": "NoSchedule",
                }
            ],
        )
        for i in range(3)
    ]
    for n in aks:
        del n["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
    p = plan(spec(gpus=12, accelerator="nvidia"), build_inventory(aks))
    assert (p.workers, p.gpus_per_worker, p.spot, p.pool) == (3, 4, True, "gpuspot")
    assert p.pool_label == "kubernetes.azure.com/agentpool"


def test_aks_gpu_pools_sku_gpu_taint_is_tolerated_for_gpu_jobs_only() -> None:
    """AKS's GPU guide taints GPU pools sku=gpu:NoSchedule: a GPU job tolerates it by value;
    a CPU-only job, or another value of `sku`, does not."""
    sku = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
    nodes = [node(f"aks-{i}", 4, taints=[sku]) for i in range(2)]
    assert plan(spec(gpus=8), build_inventory(nodes)).feasible
    cpu_only = spec(framework="pytorch", workers=2, gpusPerWorker=0)
    p = plan(cpu_only, build_inventory(nodes))
    assert not p.feasible and "taint sku=gpu:NoSchedule not tolerated" in p.reason
    other = [node("x", 4, taints=[{**sku, "value": "fpga"}])]
    assert not plan(spec(gpus=4), build_inventory(other)).feasible


def test_accelerator_filter() -> None:
    nodes = [
        *v100_pool(2),
        *[node(f"t4-{i}", 4, accelerator="nvidia-tesla-t4", pool="t4") for i in range(4)],
    ]
    s = spec(gpus=16, accelerator="nvidia-tesla-t4")
    p = plan(s, build_inventory(nodes))
    assert (p.workers, p.gpus_per_worker) == (4, 4)
    assert all(n.startswith("t4-") for n in p.nodes)
    assert p.cost_per_hour == pytest.approx(per_resource(p, s, "nvidia-tesla-t4", False))
    p = plan(spec(gpus=16, accelerator="nvidia-tesla-a100"), build_inventory(nodes))
    assert not p.feasible and "accelerator nvidia-tesla-a100" in p.reason


def test_node_selector_filter() -> None:
    nodes = [node("a", labels={"team": "physics"}), node("b")]
    p = plan(spec(gpus=8, placement={"nodeSelector": {"team": "physics"}}), build_inventory(nodes))
    assert p.nodes == ("a",)


def test_one_pool_preferred_over_split() -> None:
    nodes = [node("a-0", pool="a"), node("b-0", pool="b"), node("b-1", pool="b")]
    assert plan(spec(gpus=16), build_inventory(nodes)).nodes == ("b-0", "b-1")


def test_explicit_shape() -> None:
    nodes = v100_pool(4)
    p = plan(spec(workers=2, gpusPerWorker=4), build_inventory(nodes))
    assert (p.workers, p.gpus_per_worker, len(set(p.nodes))) == (2, 4, 2)
    p = plan(spec(workers=5, gpusPerWorker=1), build_inventory(nodes))
    assert not p.feasible and "need 5 node(s) with 1 free GPUs" in p.reason


def test_cpu_workers_prefer_nodes_without_gpus() -> None:
    nodes = [node("gpu-0"), node("cpu-0", 0, pool="cpu"), node("cpu-1", 0, pool="cpu")]
    s = spec(framework="pytorch", workers=2, gpusPerWorker=0)
    p = plan(s, build_inventory(nodes))
    assert p.nodes == ("cpu-0", "cpu-1") and p.strategy == "ddp" and p.cost_per_hour == 0


def test_cpu_workers_cost_their_cpu_and_memory_at_the_node_s_price() -> None:
    """A CPU-only job is not free: on nodes of no known machine type its requested vCPUs and
    GiB are priced, spot on spot nodes; a table with no cpu/memory prices names them unpriced
    rather than charging $0."""
    cpu_pool = [node(f"cpu-{i}", 0, pool="cpu", spot=True, cpu="2", memory="8Gi") for i in range(2)]
    shape = {"framework": "pytorch", "workers": 2, "gpusPerWorker": 0}
    p = plan(spec(**shape, cpu="500m", memory="3Gi"), build_inventory(cpu_pool))
    assert p.spot and p.cost_per_hour == pytest.approx(2 * (0.5 * CPU.spot + 3 * MEMORY.spot))
    on_demand = [node(f"od-{i}", 0, pool="od", cpu="2", memory="8Gi") for i in range(2)]
    p = plan(spec(**shape, cpu="500m", memory="3Gi"), build_inventory(on_demand))
    assert not p.spot
    assert p.cost_per_hour == pytest.approx(2 * (0.5 * CPU.on_demand + 3 * MEMORY.on_demand))
    no_cpu_prices = PriceTable.from_mapping({"accelerators": {}})
    p = plan(spec(**shape, cpu="1", memory="1Gi"), build_inventory(cpu_pool), no_cpu_prices)
    assert (p.cost_per_hour, p.unpriced) == (0, ("cpu", "memory"))


def test_the_accelerator_price_override_leaves_cpu_and_memory_priced() -> None:
    s = spec(gpus=16, cpu="8", memory="64Gi")
    s = s.model_copy(update={"cost": CostSpec(accelerator_hourly_price=1.0)})
    p = plan(s, build_inventory(v100_pool(2)))
    assert p.cost_per_hour == pytest.approx(
        16 * 1.0 + 2 * (8 * CPU.on_demand + 64 * MEMORY.on_demand)
    )


def test_cpu_and_memory_requests_are_checked() -> None:
    nodes = [node("small", cpu="4", memory="16Gi"), node("big")]
    p = plan(spec(gpus=8, cpu="8", memory="64Gi"), build_inventory(nodes))
    assert p.nodes == ("big",)


def test_mirrored_strategy_needs_one_node() -> None:
    s = GANTrainingJobSpec.model_validate(
        {
            "framework": "tensorflow",
            "strategy": "mirrored",
            "model": {"name": "gan3d"},
            "resources": {"gpus": 16},
        }
    )
    assert not plan(s, build_inventory(v100_pool(4))).feasible
    p = plan(s, build_inventory(v100_pool(2, gpus=16)))
    assert (p.workers, p.gpus_per_worker, p.strategy) == (1, 16, "mirrored")


def tpu_slice(
    pool: str,
    hosts: int = 4,
    *,
    topology: str = "4x4",
    ready: int | None = None,
    spot: bool = False,
) -> list[dict[str, Any]]:
    return [
        node(
            f"{pool}-{i}",
            0,
            pool=pool,
            spot=spot,
            tpu_chips=4,
            ready=ready is None or i < ready,
            taints=[{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}],
            labels={
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": topology,
            },
        )
        for i in range(hosts)
    ]


def tpu_spec(topology: str = "4x4") -> GANTrainingJobSpec:
    return GANTrainingJobSpec.model_validate(
        {
            "framework": "tensorflow",
            "strategy": "tpu",
            "model": {"name": "acgan"},
            "resources": {"tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": topology}},
        }
    )


def test_tpu_slice() -> None:
    p = plan(tpu_spec(), build_inventory([*tpu_slice("s1"), *v100_pool(2)]))
    assert (p.workers, p.tpu_chips_per_worker, p.strategy) == (4, 4, "tpu")
    assert p.nodes == ("s1-0", "s1-1", "s1-2", "s1-3")
    # 16 chips; a TPU VM's chip price holds its host.
    chip = DEFAULT_PRICES.accelerators["tpu-v5-lite-podslice"]
    assert p.cost_per_hour == pytest.approx(16 * chip.on_demand)


def test_tpu_slice_is_one_failure_unit() -> None:
    p = plan(tpu_spec(), build_inventory(tpu_slice("s1", ready=3)))
    assert not p.feasible and "slice s1: 3 of 4 hosts free and eligible" in p.reason
    p = plan(tpu_spec(), build_inventory([*tpu_slice("s1", ready=3), *tpu_slice("s2")]))
    assert p.pool == "s2"


def test_tpu_wrong_topology_infeasible() -> None:
    p = plan(tpu_spec("2x4"), build_inventory(tpu_slice("s1")))
    assert not p.feasible and "no free TPU slice tpu-v5-lite-podslice 2x4" in p.reason


def test_nothing_at_all() -> None:
    p = plan(spec(gpus=8), build_inventory([]))
    assert not p.feasible and "0 eligible node(s)" in p.reason


def test_divisors() -> None:
    assert divisors_descending(32) == [32, 16, 8, 4, 2, 1]
    assert divisors_descending(12) == [12, 6, 4, 3, 2, 1]
    assert choose_gpu_shape(12, [8, 8, 8], single_worker=False) == 6
    assert choose_gpu_shape(12, [5, 5, 5, 5], single_worker=False) == 4
    assert choose_gpu_shape(7, [8, 4, 4], single_worker=False) == 7
    assert choose_gpu_shape(9, [4, 4], single_worker=False) is None


# ---- properties ---------------------------------------------------------------------------

node_sets = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 2, 4, 8, 16]),
        st.integers(0, 8),
        st.booleans(),
        st.sampled_from(["p0", "p1", "p2"]),
    ),
    min_size=0,
    max_size=12,
)


def _inventory(shape: list[tuple[int, int, bool, str]]):
    nodes, pods = [], []
    for i, (gpus, used, spot, pool) in enumerate(shape):
        nodes.append(node(f"n{i:02d}", gpus, spot=spot, pool=pool))
        if gpus and used:
            pods.append(pod(f"p{i}", f"n{i:02d}", min(used, gpus)))
    return build_inventory(nodes, pods)


@settings(max_examples=300, deadline=None)
@given(shape=node_sets, gpus=st.integers(1, 64))
def test_plan_invariants(shape: list[tuple[int, int, bool, str]], gpus: int) -> None:
    inventory = _inventory(shape)
    p = plan(spec(gpus=gpus), inventory)
    assert p == plan(spec(gpus=gpus), inventory)  # deterministic
    free = {n.name: n.free_gpus for n in inventory.nodes}
    if p.feasible:
        assert p.workers * p.gpus_per_worker == gpus
        assert len(set(p.nodes)) == len(p.nodes) == p.workers
        assert all(free[n] >= p.gpus_per_worker for n in p.nodes)
    else:
        assert p.reason
        # infeasible only if truly no divisor fits
        assert all(
            sum(f >= d for f in free.values()) < gpus // d for d in divisors_descending(gpus)
        )


@settings(max_examples=200, deadline=None)
@given(shape=node_sets, workers=st.integers(1, 8), per=st.integers(0, 8))
def test_explicit_shape_invariants(
    shape: list[tuple[int, int, bool, str]], workers: int, per: int
) -> None:
    inventory = _inventory(shape)
    p = plan(spec(workers=workers, gpusPerWorker=per), inventory)
    free = {n.name: n.free_gpus for n in inventory.nodes}
    if p.feasible:
        assert (p.workers, p.gpus_per_worker) == (workers, per)
        assert len(set(p.nodes)) == workers
        assert all(free[n] >= per for n in p.nodes)
    else:
        assert sum(f >= per for f in free.values()) < workers


# ---- the CLI ------------------------------------------------------------------------------


def write_list(path: Path, kind: str, items: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_cli_plan_feasible_and_infeasible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(__file__).resolve().parents[2]
    job = root / "examples" / "gan3d-gke-v100-spot.yaml"
    spot_nodes = v100_pool(4, spot=True)
    nodes = write_list(tmp_path / "nodes.yaml", "Node", spot_nodes)
    assert main(["plan", "--nodes", str(nodes), str(job)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] and out["workers"] == 4 and out["gpusPerWorker"] == 8
    assert set(out) >= {
        "feasible",
        "workers",
        "gpusPerWorker",
        "strategy",
        "nodes",
        "spot",
        "costPerHour",
        "reason",
    }
    pods = write_list(tmp_path / "pods.yaml", "Pod", [pod("x", "v100-0", 1)])
    assert main(["plan", "--nodes", str(nodes), "--pods", str(pods), str(job)]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] is False and "32 GPUs" in out["reason"]


def test_cli_plan_reads_yaml_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all(v100_pool(4, spot=True)))
    assert (
        main(["plan", "--nodes", str(nodes), str(root / "examples" / "gan3d-gke-v100-spot.yaml")])
        == 0
    )


def test_cli_plan_bad_nodes_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    nodes = tmp_path / "nodes.yaml"
    bad = node("n0")
    bad["status"]["allocatable"]["nvidia.com/gpu"] = "eight"
    nodes.write_text(yaml.safe_dump(bad))
    assert (
        main(["plan", "--nodes", str(nodes), str(root / "examples" / "gan3d-gke-v100-spot.yaml")])
        == 2
    )
    assert capsys.readouterr().err.strip() == "node n0: not a quantity: 'eight'"


def test_unbound_workers_of_other_jobs_hold_their_planned_nodes() -> None:
    nodes = v100_pool(4)
    gated = pod("other-worker-0", "", 8, phase="Pending", labels={JOB_NAME_LABEL: "other"})
    gated["spec"].pop("nodeName")
    gated["metadata"]["annotations"] = {PLANNED_NODE_ANNOTATION: "v100-0"}
    p = plan(spec(gpus=32), build_inventory(nodes, [gated]))
    assert not p.feasible  # v100-0's GPUs are promised to the other job
    p = plan(spec(gpus=24), build_inventory(nodes, [gated]))
    assert "v100-0" not in p.nodes
