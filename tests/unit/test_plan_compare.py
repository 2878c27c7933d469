"""`kubegan plan --compare`: every feasible placement (shape, pool, spot or on-demand) by the
planner's own rules, its rate and, with an epoch time, its cost per epoch and to finish; the
table and JSON the command prints, and the inputs it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.pools import from_declared, from_nodepool
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.placement.compare import alternatives, compare
from kubegan_operator.placement.planner import plan

from tests.support.world import node, pod

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def spec(**resources: Any) -> GANTrainingJobSpec:
    placement = resources.pop("placement", {})
    return GANTrainingJobSpec.model_validate(
        {
            "framework": "tensorflow",
            "model": {"name": "gan3d"},
            "training": {"epochs": 60},
            "resources": {"cpu": "8", "memory": "32Gi", **resources},
            "placement": placement,
        }
    )


def cluster_nodes() -> list[dict[str, Any]]:
    """Pool v100-spot: 4 spot nodes of 8 V100s; pool t4: 4 on-demand nodes of 4 T4s."""
    v100 = [node(f"v100-{i}", 8, pool="v100-spot", spot=True, taints=[TAINT]) for i in range(4)]
    t4 = [
        node(f"t4-{i}", 4, accelerator="nvidia-tesla-t4", pool="t4", taints=[TAINT], cpu="32")
        for i in range(4)
    ]
    return v100 + t4


def a100_nodepool() -> dict[str, Any]:
    types = ["a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g"]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "a100"},
        "spec": {
            "template": {
                "metadata": {"labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In",
                         "values": ["on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": types},
                    ],
                    "taints": [TAINT],
                },
            }
        },
    }  # fmt: skip


def shapes(rows: list[Any]) -> set[tuple[int, int, str, str, int]]:
    return {
        (r.plan.workers, r.plan.gpus_per_worker, r.plan.pool, r.capacity, r.plan.new_nodes)
        for r in rows
    }


def test_every_shape_on_every_pool_that_holds_it() -> None:
    rows, chosen = compare(spec(gpus=16), build_inventory(cluster_nodes()))
    assert shapes(rows) == {
        (2, 8, "v100-spot", "spot", 0),
        (4, 4, "v100-spot", "spot", 0),
        (4, 4, "t4", "on-demand", 0),
        # 8 workers of 2 fit neither pool alone: the planner spreads them over both
        (8, 2, "", "mixed", 0),
    }
    assert all(r.plan.feasible for r in rows)
    rates = [r.plan.cost_per_hour for r in rows]
    assert rates == sorted(rates) and all(rate > 0 for rate in rates)
    # The planner's own choice is one of them, and marked: the largest shape, spot first.
    assert [r.plan for r in rows if r.chosen] == [chosen]
    assert (chosen.workers, chosen.gpus_per_worker, chosen.pool) == (2, 8, "v100-spot")


def test_the_jobs_own_terms_narrow_the_rows() -> None:
    inventory = build_inventory(cluster_nodes())
    never = compare(spec(gpus=16, placement={"spot": "never"}), inventory)[0]
    assert shapes(never) == {(4, 4, "t4", "on-demand", 0)}
    t4 = compare(spec(gpus=16, accelerator="nvidia-tesla-t4"), inventory)[0]
    assert shapes(t4) == {(4, 4, "t4", "on-demand", 0)}
    explicit = compare(spec(workers=2, gpusPerWorker=8), inventory)[0]
    assert shapes(explicit) == {(2, 8, "v100-spot", "spot", 0)}


def test_busy_nodes_hold_fewer_shapes() -> None:
    nodes = cluster_nodes()
    busy = [pod(f"other-{i}", f"v100-{i}", 6) for i in range(4)]  # 2 of 8 V100s free
    rows, _ = compare(spec(gpus=16), build_inventory(nodes, busy))
    assert (2, 8, "v100-spot", "spot", 0) not in shapes(rows)
    assert (4, 4, "t4", "on-demand", 0) in shapes(rows)


def test_each_instance_type_of_an_autoscaled_pool_is_a_row() -> None:
    """Each shape on the smallest type that holds a worker: a larger one would add a machine
    whose other GPUs stay idle (one worker per node)."""
    pool = from_nodepool(a100_nodepool())
    assert not isinstance(pool, str)
    rows, chosen = compare(spec(gpus=16), build_inventory([]), pools=[pool])
    assert {(r.plan.workers, r.plan.new_nodes, r.machine) for r in rows} == {
        (2, 2, "a2-highgpu-8g"),
        (4, 4, "a2-highgpu-4g"),
        (8, 8, "a2-highgpu-2g"),
        (16, 16, "a2-highgpu-1g"),
    }
    assert {(r.plan.pool, r.capacity) for r in rows} == {("a100", "on-demand")}
    assert chosen == plan(spec(gpus=16), build_inventory([]), pools=[pool])
    assert [r.plan for r in rows if r.chosen] == [chosen]


def test_a_new_node_is_added_for_a_worker_that_takes_all_its_gpus() -> None:
    """One worker per new node: 16 GPUs on 4-GPU machines are 4 x 4 (not 8 x 2 or 16 x 1
    with the machines' other GPUs idle); 12 GPUs on 8-GPU machines, which no shape fills,
    the largest the planner would choose (2 x 6)."""
    l4, a100 = from_declared(
        [
            {"name": "l4-spot", "machineType": "g2-standard-48", "spot": True, "maxNodes": 8},
            {"name": "a100", "machineType": "a2-highgpu-8g", "maxNodes": 4},
        ]
    )
    rows, _ = compare(spec(gpus=16), build_inventory([]), pools=[l4])
    assert shapes(rows) == {(4, 4, "l4-spot", "spot", 4)}
    rows, chosen = compare(spec(gpus=12), build_inventory([]), pools=[a100])
    assert shapes(rows) == {(2, 6, "a100", "on-demand", 2)}
    assert [r.plan for r in rows] == [chosen]


def test_an_epoch_time_prices_an_epoch_and_the_whole_run() -> None:
    rows, _ = compare(spec(gpus=16), build_inventory(cluster_nodes()), epoch_seconds=240)
    for r in rows:
        assert r.cost_per_epoch == pytest.approx(r.plan.cost_per_hour * 240 / 3600)
        assert r.hours_to_finish == pytest.approx(60 * 240 / 3600)
        assert r.cost_to_finish == pytest.approx(r.cost_per_epoch * 60)
    bare, _ = compare(spec(gpus=16), build_inventory(cluster_nodes()))
    assert all(r.cost_per_epoch is None and r.hours_to_finish is None for r in bare)


def test_nowhere_to_run_is_no_row() -> None:
    rows, chosen = compare(spec(gpus=64), build_inventory(cluster_nodes()))
    assert rows == [] and not chosen.feasible and "64 GPUs" in chosen.reason
    assert alternatives(spec(gpus=64), build_inventory(cluster_nodes())) == []


# ---- the command ------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    job = {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "g"},
        "spec": spec(gpus=16).model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    paths = {"job": tmp_path / "job.yaml", "nodes": tmp_path / "nodes.yaml"}
    paths["job"].write_text(yaml.safe_dump(job))
    paths["nodes"].write_text(yaml.safe_dump({"items": cluster_nodes()}))
    paths["nodepools"] = tmp_path / "nodepools.yaml"
    paths["nodepools"].write_text(yaml.safe_dump({"items": [a100_nodepool()]}))
    return paths


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """The command's exit code, stdout and stderr (argparse's usage errors exit)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_is_aligned_and_marks_the_planners_choice(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "plan", "--compare", files["job"], "--nodes", files["nodes"],
        "--nodepools", files["nodepools"], "--epoch-seconds", "240",
    )  # fmt: skip
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == [
        "WORKERS", "PER-WORKER", "ACCELERATOR", "MACHINE", "CAPACITY", "POOL", "NEW-NODES",
        "$/HOUR", "$/EPOCH", "HOURS", "$-TOTAL",
    ]  # fmt: skip
    assert len(lines) == 1 + 4 + 4  # the cluster's four placements, the NodePool's four
    # Right-aligned numbers: every line's $-TOTAL ends where its header does.
    assert {len(line) for line in lines} == {len(lines[0])}
    chosen = [line for line in lines if line.startswith("*")]
    assert len(chosen) == 1 and chosen[0].split()[1:4] == ["2", "8xGPU", "nvidia-tesla-v100"]
    assert all(line.split()[-2] == "4.0" for line in lines[1:])  # 60 epochs of 4 minutes


def test_json_holds_each_plan_and_its_estimates(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "plan", "--compare", files["job"], "--nodes", files["nodes"], "-o", "json",
        "--epoch-seconds", "90",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert (doc["job"], doc["epochs"], doc["epochSeconds"], doc["reason"]) == ("g", 60, 90.0, "")
    rows = doc["alternatives"]
    assert len(rows) == 4 and sum(r["chosen"] for r in rows) == 1
    first = rows[0]
    assert {"workers", "gpusPerWorker", "nodes", "spot", "pool", "costPerHour", "capacity"} <= set(
        first
    )
    assert first["costPerEpoch"] == pytest.approx(first["costPerHour"] * 90 / 3600)
    assert first["hoursToFinish"] == pytest.approx(1.5)


def test_no_placement_exits_3_with_the_planners_reason(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "none.yaml"
    empty.write_text("items: []\n")
    code, out, err = run(capsys, "plan", "--compare", files["job"], "--nodes", empty)
    assert code == 3 and out == ""
    assert err.startswith("kubegan plan: no placement: no placement for 16 GPUs")
    code, out, err = run(capsys, "plan", "--compare", files["job"], "--nodes", empty, "-o", "json")
    assert code == 3 and json.loads(out)["alternatives"] == []
    assert "16 GPUs" in json.loads(out)["reason"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--compare", "--epoch-seconds", "0"], "--epoch-seconds: '0' is not a number of seconds"),
        (["--compare", "--epoch-seconds", "nan"], "--epoch-seconds: 'nan' is not a number"),
        (["--epoch-seconds", "60"], "kubegan plan: --epoch-seconds needs --compare"),
        (["-o", "table"], "kubegan plan: -o table needs --compare"),
        (["--compare", "-o", "yaml"], "argument -o/--output: invalid choice: 'yaml'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    code, out, err = run(capsys, "plan", files["job"], "--nodes", files["nodes"], *extra)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert says in err


def test_a_nodepool_of_unknown_instance_types_is_named_and_left_out(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    odd = a100_nodepool()
    odd["metadata"]["name"] = "odd"
    odd["spec"]["template"]["spec"]["requirements"][1]["values"] = ["x9-unknown"]
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump_all([odd, a100_nodepool()]))
    code, out, err = run(
        capsys, "plan", "--compare", files["job"], "--nodes", files["nodes"], "--nodepools", path
    )
    assert code == 0 and len(out.splitlines()) == 1 + 4 + 4
    assert err.startswith("kubegan plan: left out: NodePool odd: no instance type")


def test_plain_plan_plans_on_the_pools_too(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The pools `plan` is given are the operator's (--node-pools, --karpenter's NodePools):
    with no node free, it prints the scale-up the operator would ask for."""
    empty = tmp_path / "none.yaml"
    empty.write_text("items: []\n")
    code, out, _ = run(
        capsys, "plan", files["job"], "--nodes", empty, "--nodepools", files["nodepools"]
    )
    doc = json.loads(out)
    assert code == 0 and doc["feasible"] and doc["pool"] == "a100"
    assert (doc["workers"], doc["gpusPerWorker"], doc["newNodes"]) == (2, 8, 2)
