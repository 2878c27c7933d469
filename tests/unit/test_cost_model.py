"""A worker costs its share of what the cloud bills for its node (api/rates.py): the starter
examples on nodes of their machine types, priced from the shipped catalogues; what a table
cannot price is named, never $0 unseen: in the plan, in `kubegan plan`/`kubegan run`'s one
warning line, and as the job's CostKnown=False condition, event and gauge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api import contract
from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.api.loading import load_job
from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable, catalogue
from kubegan_operator.api.rates import NodeBilling, Rate, WorkerRequest, cost_rate, worker_rate
from kubegan_operator.entry import cli
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan
from kubegan_operator.runtime import metrics

from tests.support.world import PLAN, JobWorld, gan_job, node

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GKE_POOL = "cloud.google.com/gke-nodepool"
GCP = catalogue("gcp-us-central1")
AZURE = catalogue("azure-eastus")


def gke_node(name: str, machine: str, gpus: int, **kw: Any) -> dict[str, Any]:
    labels = {INSTANCE_TYPE: machine, **kw.pop("labels", {})}
    return node(name, gpus, labels=labels, **kw)


def aks_node(name: str, machine: str, gpus: int, pool: str, **kw: Any) -> dict[str, Any]:
    """An AKS spot GPU node: its pool and accelerator labels, not GKE's."""
    n = node(
        name,
        gpus,
        accelerator="",
        labels={
            INSTANCE_TYPE: machine,
            "kubernetes.azure.com/agentpool": pool,
            "kubernetes.azure.com/scalesetpriority": "spot",
            "kubernetes.azure.com/accelerator": "nvidia",
        },
        taints=[{"key": "kubernetes.azure.com/scalesetpriority", "value": "spot",
                 "effect": "NoSchedule"}],
        **kw,
    )  # fmt: skip
    del n["metadata"]["labels"][GKE_POOL]
    return n


def planned(example: str, nodes: list[dict[str, Any]], table: PriceTable) -> Plan:
    p = plan(load_job(EXAMPLES / example).spec, build_inventory(nodes), table)
    assert p.feasible, p.reason
    assert p.unpriced == (), p.unpriced
    return p


# ---- the starter examples, each on a node of its machine type --------------------------------


def test_l4_job_costs_its_share_of_a_g2_standard_8_spot_node() -> None:
    n = gke_node("l4-0", "g2-standard-8", 1, accelerator="nvidia-l4", pool="l4-spot", spot=True,
                 cpu="8", memory="32Gi")  # fmt: skip
    p = planned("acgan-gke-l4-spot.yaml", [n], GCP)
    # 1 of the node's 1 L4: the whole machine, its L4 included (no accelerator row needed).
    assert p.cost_per_hour == pytest.approx(GCP.machine_types["g2-standard-8"].spot)
    assert "nvidia-l4" not in GCP.accelerators


def test_t4_job_costs_its_share_of_an_aks_nc4as_t4_v3_spot_node() -> None:
    n = aks_node("aks-t4-0", "Standard_NC4as_T4_v3", 1, "t4spot", cpu="4", memory="28Gi")
    p = planned("acgan-aks-t4-spot.yaml", [n], AZURE)
    assert p.cost_per_hour == pytest.approx(AZURE.machine_types["Standard_NC4as_T4_v3"].spot)


def test_v100_job_on_gke_n1_costs_attached_gpus_and_what_it_requests() -> None:
    nodes = [
        gke_node(f"v100-{i}", "n1-standard-96", 8, spot=True, pool="v100-spot", cpu="96",
                 memory="360Gi")
        for i in range(4)
    ]  # fmt: skip
    p = planned("gan3d-gke-v100-spot.yaml", nodes, GCP)
    assert (p.workers, p.gpus_per_worker) == (4, 8)
    v100, cpu, memory = GCP.accelerators["nvidia-tesla-v100"], GCP.cpu, GCP.memory
    assert cpu is not None and memory is not None
    # N1 is billed per resource: 8 attached V100s + the 32 vCPUs and 200 GiB each requests.
    each = 8 * v100.spot + 32 * cpu.spot + 200 * memory.spot
    assert p.cost_per_hour == pytest.approx(4 * each)


def test_pix2pix_on_aks_costs_the_8_gpu_vm_it_fills() -> None:
    machine = "Standard_ND96amsr_A100_v4"
    n = aks_node("aks-a100-0", machine, 8, "gpuspot", cpu="96", memory="1900Gi")
    p = planned("pix2pix-aks-spot.yaml", [n], AZURE)
    assert (p.workers, p.gpus_per_worker) == (1, 8)
    assert p.cost_per_hour == pytest.approx(AZURE.machine_types[machine].spot)


def test_tpu_v5e_slice_costs_its_chips() -> None:
    hosts = [
        gke_node(f"tpu-{i}", "ct5lp-hightpu-4t", 0, pool="v5e", tpu_chips=4,
                 taints=[{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}],
                 labels={"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                         "cloud.google.com/gke-tpu-topology": "4x4"})
        for i in range(4)
    ]  # fmt: skip
    p = planned("acgan-gke-tpu-v5e.yaml", hosts, GCP)
    assert (p.workers, p.tpu_chips_per_worker) == (4, 4)
    assert p.cost_per_hour == pytest.approx(16 * GCP.accelerators["tpu-v5-lite-podslice"].on_demand)


# ---- shares and overrides ------------------------------------------------------------------


def test_a_worker_pays_the_fraction_of_the_machine_it_takes() -> None:
    machine = GCP.machine_types["a2-highgpu-8g"]
    node_ = NodeBilling("a2-highgpu-8g", "nvidia-tesla-a100", False, devices=8, vcpus=96)
    two = worker_rate(WorkerRequest(2), node_, GCP, None)
    assert two.per_hour == pytest.approx(machine.on_demand * 2 / 8)
    # A CPU-only worker takes its vCPUs' share; asking for more than the node has, all of it.
    assert worker_rate(WorkerRequest(0, 24), node_, GCP, None).per_hour == pytest.approx(
        machine.on_demand / 4
    )
    assert worker_rate(WorkerRequest(0, 500), node_, GCP, None).per_hour == pytest.approx(
        machine.on_demand
    )


def test_the_accelerator_price_override_replaces_the_gpu_part() -> None:
    g2 = NodeBilling("g2-standard-8", "nvidia-l4", True, devices=1, vcpus=8)
    # Billed whole: the override is each GPU's all-in price.
    assert worker_rate(WorkerRequest(1, 6), g2, AZURE, 0.5).per_hour == 0.5
    n1 = NodeBilling("n1-standard-8", "nvidia-tesla-t4", False, devices=1, vcpus=8)
    cpu = GCP.cpu
    assert cpu is not None
    rate = worker_rate(WorkerRequest(1, 4), n1, GCP, 0.5)
    assert rate.per_hour == pytest.approx(0.5 + 4 * cpu.on_demand) and rate.unpriced == ()


# ---- what a table cannot price is named ------------------------------------------------------


def test_unpriced_machines_and_accelerators_are_named_not_zero() -> None:
    rate = cost_rate(
        WorkerRequest(1, 6, 24),
        [
            NodeBilling("g2-standard-8", "nvidia-l4", True, devices=1, vcpus=8),  # no Azure row
            NodeBilling("Standard_NC4as_T4_v3", "nvidia", True, devices=1, vcpus=4),
        ],
        AZURE,
        None,
    )
    assert rate.unpriced == ("g2-standard-8",)
    assert rate.per_hour == pytest.approx(AZURE.machine_types["Standard_NC4as_T4_v3"].spot)
    # A row a region does not offer says why; a row with no spot price, that spot is missing.
    retired = worker_rate(
        WorkerRequest(1), NodeBilling("Standard_NC6s_v3", "nvidia", False, 1, 6), AZURE, None
    )
    assert retired.unpriced == (f"Standard_NC6s_v3 ({AZURE.not_offered['Standard_NC6s_v3']})",)
    h100 = NodeBilling("Standard_NC40ads_H100_v5", "nvidia", True, devices=1, vcpus=40)
    assert AZURE.machine_types["Standard_NC40ads_H100_v5"].spot is None
    assert worker_rate(WorkerRequest(1), h100, AZURE, None).unpriced == (
        "Standard_NC40ads_H100_v5 (no spot price)",
    )
    # No instance-type label and an accelerator the table lacks: the accelerator is named.
    bare = NodeBilling("", "nvidia-l4", False, devices=1)
    assert worker_rate(WorkerRequest(1), bare, GCP, None).unpriced == ("nvidia-l4",)


def test_an_older_table_s_price_per_gpu_stands_for_a_machine_it_has_no_row_for() -> None:
    """The older chart's AKS table priced `nvidia` as the VM's price per GPU: still so."""
    old = PriceTable.from_mapping({"accelerators": {"nvidia": {"onDemand": 0.5, "spot": 0.1}}})
    t4 = NodeBilling("Standard_NC4as_T4_v3", "nvidia", True, devices=1, vcpus=4)
    assert worker_rate(WorkerRequest(1, 3, 16), t4, old, None) == Rate(0.1)
    # A CPU-only worker on a machine billed whole has nothing to go by: named.
    assert worker_rate(WorkerRequest(0, 3), t4, old, None).unpriced == ("Standard_NC4as_T4_v3",)


def test_a_pool_the_table_cannot_price_is_not_the_cheapest() -> None:
    from kubegan_operator.foundation.pools import from_declared

    pools = from_declared([
        {"name": "unknown", "machineType": "x9-gpu-8", "gpusPerNode": 8, "cpuPerNode": "96",
         "memoryPerNode": "600Gi", "accelerator": "nvidia-x", "spot": True, "maxNodes": 2},
        {"name": "a100", "machineType": "a2-highgpu-8g", "spot": True, "maxNodes": 2},
    ])  # fmt: skip
    s = GANTrainingJobSpec.model_validate(
        {"framework": "pytorch", "model": {"name": "dcgan"}, "resources": {"gpus": 8}}
    )
    p = plan(s, build_inventory([]), GCP, pools)
    assert p.pool == "a100" and p.unpriced == ()


# ---- the job says so: CostKnown, its event and gauge -----------------------------------------


def test_an_unpriced_gang_sets_cost_known_false_with_a_warning_once() -> None:
    unpriced = Plan(**{**PLAN.__dict__, "unpriced": ("g2-standard-8",)})
    w = JobWorld(gan_job(), plan=unpriced)
    d = w.step()
    cond = w.condition(ConditionType.cost_known)
    assert (cond["status"], cond["reason"]) == ("False", Reason.no_price)
    assert "g2-standard-8" in cond["message"]
    warnings = [e for e in d.events if e[1] == Reason.no_price]
    assert len(warnings) == 1 and warnings[0][0] == "Warning"
    assert "g2-standard-8" in warnings[0][2]
    metrics.observe_job("ml", "g", w.status, w.now)
    labels = {contract.JOB_LABEL: "g", contract.NAMESPACE_LABEL: "ml"}
    assert metrics.REGISTRY.get_sample_value(contract.JOB_COST_UNPRICED, labels) == 1
    metrics.forget_job("ml", "g")


def test_a_priced_gang_sets_cost_known_true() -> None:
    w = JobWorld(gan_job())
    d = w.step()
    cond = w.condition(ConditionType.cost_known)
    assert (cond["status"], cond["reason"]) == ("True", Reason.priced)
    assert not any(e[1] == Reason.no_price for e in d.events)
    metrics.observe_job("ml", "g2", w.status, w.now)
    labels = {contract.JOB_LABEL: "g2", contract.NAMESPACE_LABEL: "ml"}
    assert metrics.REGISTRY.get_sample_value(contract.JOB_COST_UNPRICED, labels) == 0
    metrics.forget_job("ml", "g2")


# ---- kubegan plan and kubegan run say it in one line ---------------------------------------


def test_kubegan_plan_warns_in_one_line_naming_the_unpriced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = gke_node("l4-0", "g2-standard-8", 1, accelerator="nvidia-l4", pool="l4-spot", spot=True,
                 cpu="8", memory="32Gi")  # fmt: skip
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(n))
    azure = Path(__file__).resolve().parents[2] / "charts/kubegan/files/prices/azure-eastus.yaml"
    job = str(EXAMPLES / "acgan-gke-l4-spot.yaml")
    assert cli.main(["plan", "--nodes", str(nodes), "--prices", str(azure), job]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["unpriced"] == ["g2-standard-8"]
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kubegan plan: warning: no price for")
    assert "g2-standard-8" in lines[0]
    # Priced by the default (GCP) table: no warning.
    assert cli.main(["plan", "--nodes", str(nodes), job]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["unpriced"] == [] and err == ""


def test_kubegan_run_warns_when_this_machine_s_gpus_have_no_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kubegan_trainer.launch import local_run

    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: kubegan.io/v1alpha1\nkind: GANTrainingJob\nmetadata: {name: j}\n"
        "spec:\n  framework: pytorch\n  model: {name: dcgan}\n  data: {source: digits}\n"
        "  resources: {workers: 1, gpusPerWorker: 1, cpu: '2', memory: 8Gi}\n"
    )
    monkeypatch.setattr(cli, "local_gpu_count", lambda: 1)
    monkeypatch.setattr(local_run, "run_local", lambda config, **kw: 0)
    assert cli.main(["run", str(job), "--output", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().err.splitlines()
    warned = [line for line in lines if line.startswith("kubegan run: warning: no price for")]
    assert len(warned) == 1 and "GPU without an accelerator label" in warned[0]
    # With the job's own price per GPU, everything is priced.
    text = job.read_text() + "  cost: {acceleratorHourlyPrice: 1.5}\n"
    job.write_text(text)
    assert cli.main(["run", str(job), "--output", str(tmp_path / "out2")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_default_table_is_the_gcp_us_central1_catalogue() -> None:
    assert DEFAULT_PRICES is GCP and (GCP.cloud, GCP.region) == ("gcp", "us-central1")
