"""Autoscaled pools: what a pool at zero nodes can add, and plans that use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubegan_api.contract import GANG_GATE
from kubegan_api.spec import GANTrainingJob, GANTrainingJobSpec
from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import load_node_pools
from kubegan_operator.foundation.pools import from_declared, from_nodepool
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.planner import plan

from tests.support.world import node

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def nodepool(
    name: str = "a100-spot",
    types: tuple[str, ...] = ("a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g"),
    capacity: str = "spot",
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {
        "cloud.google.com/gke-nodepool": name,
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }
    if capacity == "spot":
        labels["cloud.google.com/gke-spot"] = "true"
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": [capacity],
                        },
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": list(types),
                        },
                    ],
                    "taints": [GPU_TAINT],
                },
            },
            **({"limits": limits} if limits else {}),
        },
    }


def spec(**resources: Any) -> GANTrainingJobSpec:
    placement = resources.pop("placement", {})
    return GANTrainingJobSpec.model_validate(
        {
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "resources": resources,
            "placement": placement,
        }
    )


def template(obj: dict[str, Any]) -> Any:
    t = from_nodepool(obj)
    assert not isinstance(t, str), t
    return t


def test_a_nodepool_becomes_a_template_sized_from_its_instance_types() -> None:
    t = template(nodepool(limits={"nvidia.com/gpu": "16"}))
    assert (t.name, t.pool_label, t.spot) == ("a100-spot", "cloud.google.com/gke-nodepool", True)
    assert sorted(s.gpus for s in t.shapes) == [1, 2, 4, 8]
    assert {s.accelerator for s in t.shapes} == {"nvidia-tesla-a100"}
    assert t.labels["karpenter.sh/nodepool"] == "a100-spot"
    assert "nvidia.com/gpu=16" in t.limit_text()


def test_a_nodepool_of_unknown_types_says_how_to_size_it() -> None:
    said = from_nodepool(nodepool(types=("x1-mystery",)))
    assert isinstance(said, str) and "x1-mystery" in said and "kubegan.io/gpus-per-node" in said
    sized = template(nodepool(types=("x1-mystery",), annotations={"kubegan.io/gpus-per-node": "4"}))
    assert [s.gpus for s in sized.shapes] == [4]


def test_a_gang_on_a_pool_at_zero_plans_new_nodes_of_the_largest_shape() -> None:
    p = plan(spec(gpus=16), build_inventory([]), pools=[template(nodepool())])
    assert p.feasible and p.waits_for_capacity()
    assert (p.workers, p.gpus_per_worker, p.new_nodes, p.nodes) == (2, 8, 2, ())
    assert (p.pool, p.pool_label, p.spot) == ("a100-spot", "cloud.google.com/gke-nodepool", True)
    assert p.pool_source == "Karpenter NodePool a100-spot"
    assert p.cost_per_hour > 0


def test_free_nodes_that_exist_win_over_a_scale_up() -> None:
    nodes = [node(f"v100-{i}", 8, taints=[GPU_TAINT]) for i in range(2)]
    p = plan(spec(gpus=16), build_inventory(nodes), pools=[template(nodepool())])
    assert p.feasible and not p.waits_for_capacity()
    assert sorted(p.nodes) == ["v100-0", "v100-1"]


def test_a_pools_free_node_is_used_and_only_the_rest_is_added() -> None:
    existing = node(
        "a100-node-1", 8, accelerator="nvidia-tesla-a100", pool="a100-spot", spot=True,
        taints=[GPU_TAINT],
    )  # fmt: skip
    p = plan(
        spec(workers=2, gpusPerWorker=8), build_inventory([existing]), pools=[template(nodepool())]
    )
    assert p.feasible and (p.nodes, p.new_nodes) == (("a100-node-1",), 1)


def test_no_worker_of_a_scale_up_is_pinned_by_field() -> None:
    """Karpenter refuses pods whose affinity has matchFields or requires the hostname label: a
    gang waiting for it is pinned to the pool only, even the workers planned on the pool's free
    node, and even with a node of the pool being deleted (Karpenter reclaiming it)."""
    kw = {"accelerator": "nvidia-tesla-a100", "pool": "a100-spot", "spot": True}
    existing = node("a100-node-1", 8, taints=[GPU_TAINT], **kw)
    going = node("a100-node-2", 8, taints=[GPU_TAINT], deleting=True, **kw)
    job = GANTrainingJob.model_validate(
        {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": spec(workers=2, gpusPerWorker=8).model_dump(by_alias=True),
        }
    )
    p = plan(job.spec, build_inventory([existing, going]), pools=[template(nodepool())])
    assert p.nodes == ("a100-node-1",) and p.new_nodes == 1
    pods = [render_pod(job, p, i) for i in range(p.workers)]
    assert len(pods) == 2
    assert "matchFields" not in str(pods)
    # Nor by the hostname label: Karpenter refuses a pod that requires kubernetes.io/hostname
    # ("might interfere with the internal provisioning logic"), In or NotIn.
    for pod in pods:
        required = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert "kubernetes.io/hostname" not in str(required), required


def test_spot_pools_first_then_the_cheaper() -> None:
    pools = [
        template(nodepool("a100-od", capacity="on-demand")),
        template(nodepool("a100-spot")),
    ]
    assert plan(spec(gpus=8), build_inventory([]), pools=pools).pool == "a100-spot"
    never = plan(spec(gpus=8, placement={"spot": "never"}), build_inventory([]), pools=pools)
    assert never.pool == "a100-od" and not never.spot


def test_no_node_and_no_pool_is_no_fit_naming_each_pool() -> None:
    p = plan(
        spec(gpus=8, accelerator="nvidia-l4"), build_inventory([]), pools=[template(nodepool())]
    )
    assert not p.feasible
    assert "Karpenter NodePool a100-spot" in p.reason and "accelerator" in p.reason


def test_limits_are_named_not_enforced() -> None:
    """What else holds a pool is the autoscaler's to know: the gang is tried, and the capacity
    timeout releases it with the limits in its message."""
    p = plan(
        spec(gpus=16),
        build_inventory([]),
        pools=[template(nodepool(limits={"nvidia.com/gpu": "8"}))],
    )
    assert p.feasible and p.new_nodes == 2
    assert "nvidia.com/gpu=8" in p.pool_limits and "room for 1 more node" in p.pool_limits


def test_workers_waiting_for_capacity_are_ungated_and_pinned_to_the_pool() -> None:
    job = GANTrainingJob.model_validate(
        {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": spec(gpus=16).model_dump(by_alias=True),
        }
    )
    p = plan(job.spec, build_inventory([]), pools=[template(nodepool())])
    pods = [render_pod(job, p, i) for i in range(p.workers)]
    assert len(pods) == 2
    for pod in pods:
        assert GANG_GATE not in str(pod["spec"].get("schedulingGates", []))
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        exprs = [e for t in terms["nodeSelectorTerms"] for e in t.get("matchExpressions", [])]
        assert {
            "key": "cloud.google.com/gke-nodepool",
            "operator": "In",
            "values": ["a100-spot"],
        } in exprs
        assert all("matchFields" not in t for t in terms["nodeSelectorTerms"])


def test_declared_pools_from_the_values_file(tmp_path: Path) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(
        "pools:\n- name: l4-spot\n  machineType: g2-standard-24\n  spot: true\n  maxNodes: 3\n"
        "  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
    )
    (pool,) = load_node_pools(f)
    assert (pool.name, pool.spot, [s.gpus for s in pool.shapes]) == ("l4-spot", True, [2])
    assert pool.labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    p = plan(spec(gpus=4), build_inventory([]), pools=[pool])
    assert (p.workers, p.gpus_per_worker, p.new_nodes) == (2, 2, 2)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            {"pools": [{"name": "x", "maxNodes": 1, "machineType": "nope"}]},
            "not in kubegan's catalogue",
        ),
        ({"pools": [{"name": "x", "maxNodes": -1, "gpusPerNode": 1}]}, "maxNodes"),
        ({"pools": [{"name": "x", "maxNodes": 1, "gpusPerNode": 1, "colour": "red"}]}, "colour"),
        ({"pools": "l4"}, "expected a list"),
    ],
)
def test_a_bad_pools_file_is_one_line_naming_the_field(
    tmp_path: Path, data: dict[str, Any], said: str
) -> None:
    import yaml

    f = tmp_path / "pools.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_node_pools(f)
    (line,) = err.value.problems
    assert said in line and line.startswith(str(f))


def test_from_declared_refuses_a_non_list() -> None:
    with pytest.raises(ValueError, match="expected a list"):
        from_declared({"name": "x"})
