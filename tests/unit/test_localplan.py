"""`kubegan run` and the operator plan a job the same way: the same shape (planner.plan) and
the same cost rate (pricing), given the same job and nodes: this machine is as many plain,
on-demand nodes as the job has workers, sharing its GPUs (localplan.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.api.loading import load_job
from kubegan_operator.api.pricing import DEFAULT_PRICES
from kubegan_operator.entry import cli
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.placement.localplan import local_plan
from kubegan_operator.placement.planner import plan

from tests.support.world import node

ROOT = Path(__file__).resolve().parents[2]


def spec(resources: dict[str, Any], price: float | None = None, **rest: Any) -> GANTrainingJobSpec:
    return GANTrainingJobSpec.model_validate(
        {
            "framework": rest.pop("framework", "tensorflow"),
            "model": {"name": "gan3d"},
            "resources": resources,
            "cost": {"acceleratorHourlyPrice": price},
            **rest,
        }
    )


def plain_nodes(count: int, gpus: int) -> list[dict[str, Any]]:
    """Nodes like this machine: no accelerator type, on-demand, no pool."""
    return [node(f"n{i}", gpus, accelerator="", pool="") for i in range(count)]


# (job, price override, nodes as (count, GPUs each), GPUs on the local machine)
CASES = {
    "gpus on one node": ({"gpus": 4}, 2.5, (1, 8), 8),
    "all of a node's gpus": ({"gpus": 8}, None, (1, 8), 8),
    "cpu and memory priced": ({"gpus": 2, "cpu": "8", "memory": "32Gi"}, 1.0, (1, 2), 2),
    "explicit workers": ({"workers": 2, "gpusPerWorker": 2}, 0.35, (2, 2), 4),
    "cpu-only workers": (
        {"workers": 3, "gpusPerWorker": 0, "cpu": "2", "memory": "4Gi"},
        None,
        (3, 0),
        0,
    ),
    "pytorch": ({"workers": 2, "gpusPerWorker": 1}, 3.0, (2, 1), 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kubegan_run_and_the_operator_agree_on_shape_and_cost(case: str) -> None:
    resources, price, (count, per_node), local_gpus = CASES[case]
    job = spec(resources, price, framework="pytorch" if case == "pytorch" else "tensorflow")
    cluster = plan(job, build_inventory(plain_nodes(count, per_node)), DEFAULT_PRICES)
    local, note = local_plan(job, local_gpus, DEFAULT_PRICES)
    assert cluster.feasible and local.feasible and not note
    shape = ("workers", "gpus_per_worker", "strategy", "cost_per_hour")
    assert [getattr(local, f) for f in shape] == [getattr(cluster, f) for f in shape]


def test_a_small_machine_runs_less_and_says_so() -> None:
    gan3d = load_job(ROOT / "examples" / "gan3d-gke-v100-spot.yaml").spec
    assert gan3d.resources.gpus == 32
    none, note = local_plan(gan3d, 0)
    assert (none.workers, none.gpus_per_worker) == (1, 0)
    assert "asks for 32 GPUs; this machine has 0" in note
    eight, note = local_plan(gan3d, 8)
    assert (eight.workers, eight.gpus_per_worker) == (1, 8)
    assert "running 1 worker(s) with 8 GPU(s) each" in note
    # What it runs is priced as the operator prices that shape (its spot pool aside).
    fitted = spec({"gpus": 8, "cpu": gan3d.resources.cpu, "memory": gan3d.resources.memory})
    assert eight.cost_per_hour == plan(fitted, build_inventory(plain_nodes(1, 8))).cost_per_hour
    digits = load_job(ROOT / "examples" / "digits-local.yaml").spec
    two, note = local_plan(digits, 0)
    assert (two.workers, two.gpus_per_worker, note) == (2, 0, "")


def test_kubegan_run_starts_what_the_plan_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command, up to the trainer's runner (no training)."""
    from kubegan_trainer.launch import local_run

    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: kubegan.io/v1alpha1\nkind: GANTrainingJob\nmetadata: {name: j}\n"
        "spec:\n  framework: pytorch\n  model: {name: dcgan}\n  data: {source: digits}\n"
        "  resources: {workers: 2, gpusPerWorker: 1, cpu: '2', memory: 8Gi}\n"
        "  cost: {acceleratorHourlyPrice: 2.0}\n"
    )
    started: dict[str, Any] = {}
    monkeypatch.setattr(cli, "local_gpu_count", lambda: 2)
    monkeypatch.setattr(local_run, "run_local", lambda config, **kw: started.update(kw) or 0)
    assert cli.main(["run", str(job), "--output", str(tmp_path / "out")]) == 0
    expected = plan(load_job(job).spec, build_inventory(plain_nodes(2, 1)))
    assert (started["workers"], started["gpus_per_worker"]) == (2, 1)
    assert started["cost_rate_per_hour"] == expected.cost_per_hour
    cpu, memory = DEFAULT_PRICES.cpu, DEFAULT_PRICES.memory
    assert cpu is not None and memory is not None
    assert expected.cost_per_hour == pytest.approx(
        2 * (2.0 + 2 * cpu.on_demand + 8 * memory.on_demand)
    )
