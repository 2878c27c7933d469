"""The operator against a real control plane: validation, placement, preemption, failures,
restarts of the operator itself, and garbage collection."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    ENV_TPU_WORKER_ID,
    JOB_COST_RATE,
    JOB_COST_UNPRICED,
    JOB_NAME_LABEL,
    RECONCILE_DURATION,
    TORCH_MASTER_PORT,
)
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.api.pricing import DEFAULT_PRICES
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.planner import plan

from tests.support.kube import Kubectl, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(300)

V100 = "nodes-gke-v100-spot.yaml"
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io=true"
COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io=true"


def gan3d_job(name: str = "gan3d-v100", **changes: Any) -> dict[str, Any]:
    # No checkpoint PVC: fake nodes have no storage; the condition says so.
    return load_example(
        "gan3d-gke-v100-spot.yaml", metadata__name=name, spec__checkpoint__claimName=None, **changes
    )


def job_status(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    job = k.get("ganjob", name, namespace=ns)
    return (job or {}).get("status") or {}


def workers(k: Kubectl, ns: str, name: str) -> list[dict[str, Any]]:
    pods = k.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def wait_phase(k: Kubectl, ns: str, name: str, phase: str, timeout: float = 60) -> dict:
    return wait_for(
        f"{name} phase {phase}",
        lambda: (s := job_status(k, ns, name)).get("phase") == phase and s,
        timeout=timeout,
    )


def wait_unschedulable(k: Kubectl, ns: str, name: str, timeout: float = 60) -> dict:
    return wait_for(
        f"{name} Unschedulable",
        lambda: (
            condition(s := job_status(k, ns, name), "Unschedulable").get("status") == "True" and s
        ),
        timeout=timeout,
    )


def run_gan3d(k: Kubectl, ns: str, **changes: Any) -> list[dict[str, Any]]:
    k.apply(gan3d_job(**changes), namespace=ns)
    wait_phase(k, ns, "gan3d-v100", "Running")
    return workers(k, ns, "gan3d-v100")


def test_invalid_job_is_refused_by_the_apiserver(cluster: Kubectl, namespace: str) -> None:
    bad = gan3d_job()
    bad["spec"]["training"]["epochs"] = 0
    result = cluster.apply(bad, namespace=namespace, check=False)
    assert result.returncode != 0
    assert "spec.training.epochs" in result.stderr
    # a CEL cross-field rule, reported at the field it names
    bad = gan3d_job()
    bad["spec"]["resources"]["workers"] = 2
    result = cluster.apply(bad, namespace=namespace, check=False)
    assert result.returncode != 0
    assert "spec.resources" in result.stderr
    assert "exactly one of gpus, workers or tpu must be set" in result.stderr
    # an unknown field is refused too (kubectl's strict field validation + pruning schema)
    bad = gan3d_job()
    bad["spec"]["trainng"] = {}
    result = cluster.apply(bad, namespace=namespace, check=False)
    assert result.returncode != 0 and 'unknown field "spec.trainng"' in result.stderr
    # rules pydantic checks in Python and the CRD checks with CEL, alike
    for change, message in (
        ({"placement": {"nodeSelector": {"bad key!": "x"}}}, "keys must be Kubernetes label keys"),
        (
            {"placement": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}},
            "value must be empty with operator Exists",
        ),
        ({"monitoring": {"metricsPort": TORCH_MASTER_PORT}}, "metricsPort must differ"),
        ({"resources": {"cpu": "-1"}}, "spec.resources.cpu"),
    ):
        bad = gan3d_job()
        for key, value in change.items():
            bad["spec"][key] = {**bad["spec"].get(key, {}), **value}
        result = cluster.apply(bad, namespace=namespace, check=False)
        assert result.returncode != 0 and message in result.stderr, (change, result.stderr)
    bad = gan3d_job(name="x" * 60)
    result = cluster.apply(bad, namespace=namespace, check=False)
    assert result.returncode != 0 and "52 characters" in result.stderr


def test_32_gpus_on_v100_pool(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    pool = nodes(V100)
    pods = run_gan3d(cluster, namespace)
    assert len(pods) == 4
    bound = [p["spec"]["nodeName"] for p in pods]
    assert sorted(bound) == sorted(pool)  # the real scheduler: 4 distinct nodes
    for p in pods:
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
        assert not p["spec"].get("schedulingGates")
        assert p["status"]["phase"] == "Running"
    status = job_status(cluster, namespace, "gan3d-v100")
    assert status["placement"]["workers"] == 4 and status["placement"]["gpusPerWorker"] == 8
    # The nodes are GKE N1 (n1-standard-96), billed per resource: each of the 4 workers' 8
    # attached V100s, 32 vCPUs and 200 GiB at the default table's spot prices; all priced.
    t = DEFAULT_PRICES
    assert t.cpu is not None and t.memory is not None
    v100, cpu, memory = t.accelerators["nvidia-tesla-v100"].spot, t.cpu.spot, t.memory.spot
    assert v100 and cpu and memory
    each = 8 * v100 + 32 * cpu + 200 * memory
    assert status["cost"]["ratePerHour"] == pytest.approx(4 * each)
    assert condition(status, "CostKnown")["status"] == "True"
    assert condition(status, "CheckpointsPersistent")["status"] == "False"
    table = cluster.run("get", "ganjob", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "PHASE",
        "SCHEDULING",
        "WORKERS",
        "PER-WORKER",
        "EPOCH",
        "EPOCH-TIME",
        "PREEMPTIONS",
        "COST",
        "AGE",
    ]
    # No epoch finished yet (fake nodes run no trainer): 0 of the job's 60.
    assert table[1].split()[:6] == ["gan3d-v100", "Running", "Scheduled", "4", "8xGPU", "0/60"]
    short = cluster.run("get", "ganjobs", "-n", namespace, "-o", "name").stdout.strip()
    assert short == "gantrainingjob.kubegan.io/gan3d-v100"
    events = cluster.run(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=gan3d-v100"
    ).stdout
    assert "WorkersCreated" in events and "Running" in events
    # the service and config map exist, owned by the job
    for kind, name in (("service", "gan3d-v100"), ("configmap", "gan3d-v100-config")):
        obj = cluster.get(kind, name, namespace=namespace)
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "GANTrainingJob"
    metrics = operator.metrics()
    assert f'{JOB_COST_RATE}{{ganjob="gan3d-v100",namespace="{namespace}"}}' in metrics
    assert f'{JOB_COST_UNPRICED}{{ganjob="gan3d-v100",namespace="{namespace}"}} 0.0' in metrics
    assert f"{RECONCILE_DURATION}_count" in metrics


def test_node_loss_is_a_preemption(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    pool = nodes(V100)
    pods = run_gan3d(cluster, namespace)
    lost = pods[1]["spec"]["nodeName"]
    old_uids = {p["metadata"]["uid"] for p in pods}
    started = time.monotonic()
    cluster.run("delete", "node", lost)
    # only 3 nodes are left for 4 x 8 GPUs: the job waits, Unschedulable, with no restart
    status = wait_for(
        "one preemption recorded",
        lambda: (s := job_status(cluster, namespace, "gan3d-v100")).get("preemptions") == 1 and s,
        timeout=60,
    )
    assert status["restarts"] == 0
    wait_for(
        "the old workers gone",
        lambda: (
            not any(
                p["metadata"]["uid"] in old_uids for p in workers(cluster, namespace, "gan3d-v100")
            )
        ),
        timeout=60,
    )
    assert time.monotonic() - started < 60
    status = wait_unschedulable(cluster, namespace, "gan3d-v100", timeout=30)
    assert status["phase"] in ("Restarting", "Pending")
    assert "32 GPUs" in condition(status, "Unschedulable")["message"]
    # a replacement node arrives: the job runs again, away from the lost node
    assert lost in pool
    nodes(V100)  # re-applies the fixture: the lost node comes back as a fresh node
    status = wait_phase(cluster, namespace, "gan3d-v100", "Running", timeout=90)
    assert status["preemptions"] == 1 and status["restarts"] == 0 and status["attempt"] == 1
    new = live(workers(cluster, namespace, "gan3d-v100"))
    assert len(new) == 4 and not ({p["metadata"]["uid"] for p in new} & old_uids)
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in new} == {"1"}


def test_node_loss_with_spare_capacity_rebinds_elsewhere(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    pods = run_gan3d(cluster, namespace, spec__resources__gpus=16)
    assert len(pods) == 2
    lost = pods[0]["spec"]["nodeName"]
    cluster.run("delete", "node", lost)
    status = wait_for(
        "running again after the preemption",
        lambda: (
            (s := job_status(cluster, namespace, "gan3d-v100")).get("preemptions") == 1
            and s.get("phase") == "Running"
            and s
        ),
        timeout=60,
    )
    assert status["restarts"] == 0
    new = live(workers(cluster, namespace, "gan3d-v100"))
    assert len(new) == 2 and lost not in {p["spec"]["nodeName"] for p in new}


def test_application_failures_hit_backoff_limit(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    run_gan3d(
        cluster,
        namespace,
        spec__runPolicy__backoffLimit=1,
        spec__runPolicy__cleanPodPolicy="Running",
    )
    cluster.run("label", "pod", "gan3d-v100-worker-2", FAIL_LABEL, "-n", namespace)
    status = wait_for(
        "restart counted",
        lambda: (s := job_status(cluster, namespace, "gan3d-v100")).get("restarts") == 1 and s,
        timeout=60,
    )
    assert status["preemptions"] == 0
    status = wait_phase(cluster, namespace, "gan3d-v100", "Running", timeout=60)
    assert status["attempt"] == 1
    cluster.run("label", "pod", "gan3d-v100-worker-0", FAIL_LABEL, "-n", namespace)
    status = wait_phase(cluster, namespace, "gan3d-v100", "Failed", timeout=60)
    failed = condition(status, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "gan3d-v100-worker-0: exit code 1" in failed["message"]
    assert status["restarts"] == 2 and status["completionTime"]
    # cleanPodPolicy Running: nothing left running; the failed worker is kept for its logs
    wait_for(
        "running workers cleaned",
        lambda: all(
            p["status"].get("phase") in ("Failed", "Succeeded")
            for p in live(workers(cluster, namespace, "gan3d-v100"))
        ),
        timeout=60,
    )
    events = cluster.run("get", "events", "-n", namespace).stdout
    assert "BackoffLimitExceeded" in events


def test_success_when_worker_0_completes(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    run_gan3d(cluster, namespace, spec__runPolicy__cleanPodPolicy="All")
    cluster.run("label", "pod", "gan3d-v100-worker-0", COMPLETE_LABEL, "-n", namespace)
    status = wait_phase(cluster, namespace, "gan3d-v100", "Succeeded")
    assert status["completionTime"] and condition(status, "Succeeded")["status"] == "True"
    wait_for(
        "all pods cleaned", lambda: not live(workers(cluster, namespace, "gan3d-v100")), timeout=60
    )


def test_infeasible_job_waits_then_starts(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    job = load_example("acgan-gke-tpu-v5e.yaml", spec__checkpoint__claimName=None)
    cluster.apply(job, namespace=namespace)
    status = wait_unschedulable(cluster, namespace, "acgan-tpu")
    assert status["phase"] == "Pending"
    assert (
        "no free TPU slice tpu-v5-lite-podslice 4x4"
        in condition(status, "Unschedulable")["message"]
    )
    assert workers(cluster, namespace, "acgan-tpu") == []
    nodes("nodes-gke-tpu-v5e.yaml")
    status = wait_phase(cluster, namespace, "acgan-tpu", "Running", timeout=60)
    pods = workers(cluster, namespace, "acgan-tpu")
    assert len(pods) == 4
    assert condition(status, "Unschedulable")["status"] == "False"
    for i, p in enumerate(pods):
        env = {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}
        assert env[ENV_TPU_WORKER_ID] == str(i)
        assert p["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"


def test_operator_restart_keeps_pods_and_status(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    pods = run_gan3d(cluster, namespace)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    status_before = job_status(cluster, namespace, "gan3d-v100")
    operator.kill()
    operator.start()
    time.sleep(12)  # longer than one resync period: the restarted operator has looked
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in workers(cluster, namespace, "gan3d-v100")
    }
    assert after == before
    status = job_status(cluster, namespace, "gan3d-v100")
    for key in ("phase", "attempt", "restarts", "preemptions", "startTime", "placement"):
        assert status.get(key) == status_before.get(key), key


def test_operator_killed_while_creating_a_gang(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    """The operator wrote the plan to status and created one worker of four, then died.
    Restarted, it completes the same gang: no duplicate, no orphan, no re-plan."""
    nodes(V100)
    operator.kill()
    cluster.apply(gan3d_job(), namespace=namespace)
    raw = cluster.get("ganjob", "gan3d-v100", namespace=namespace)
    job = GANTrainingJob.model_validate(raw)
    inventory = build_inventory(cluster.get("nodes"), cluster.get("pods", namespace=namespace))
    p = plan(job.spec, inventory)
    assert p.feasible
    status = {"phase": "Pending", "attempt": 0, "plan": p.to_json()}
    cluster.run(
        "patch",
        "ganjob",
        "gan3d-v100",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    pod0 = render_pod(job, p, 0, uid=raw["metadata"]["uid"], attempt=0)
    cluster.apply(pod0, namespace=namespace)
    uid0 = cluster.get("pod", "gan3d-v100-worker-0", namespace=namespace)["metadata"]["uid"]
    operator.start()
    wait_phase(cluster, namespace, "gan3d-v100", "Running", timeout=60)
    pods = workers(cluster, namespace, "gan3d-v100")
    assert [p["metadata"]["name"] for p in pods] == [f"gan3d-v100-worker-{i}" for i in range(4)]
    assert pods[0]["metadata"]["uid"] == uid0


def test_deleting_the_job_removes_everything(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    run_gan3d(cluster, namespace)
    cluster.run("delete", "ganjob", "gan3d-v100", "-n", namespace)
    wait_for(
        "pods, service and config map garbage-collected",
        lambda: (
            not live(workers(cluster, namespace, "gan3d-v100"))
            and cluster.get("service", "gan3d-v100", namespace=namespace) is None
            and cluster.get("configmap", "gan3d-v100-config", namespace=namespace) is None
        ),
        timeout=60,
    )


def test_suspend_and_resume(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    run_gan3d(cluster, namespace)
    cluster.run(
        "patch",
        "ganjob",
        "gan3d-v100",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": true}}}',
    )
    wait_phase(cluster, namespace, "gan3d-v100", "Suspended")
    wait_for(
        "workers deleted", lambda: not live(workers(cluster, namespace, "gan3d-v100")), timeout=60
    )
    cluster.run(
        "patch",
        "ganjob",
        "gan3d-v100",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": false}}}',
    )
    wait_phase(cluster, namespace, "gan3d-v100", "Running", timeout=60)


def test_a_bad_object_does_not_stop_the_operator(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    # A job whose operator bookkeeping was corrupted by hand: reconciling it fails.
    cluster.apply(
        gan3d_job(name="broken", spec__resources__gpus=8, spec__runPolicy__suspend=True),
        namespace=namespace,
    )
    wait_phase(cluster, namespace, "broken", "Suspended")
    cluster.run(
        "patch",
        "ganjob",
        "broken",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Pending", "plan": {"workers": "many"}}}),
    )
    cluster.run(
        "patch",
        "ganjob",
        "broken",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": false}}}',
    )
    wait_for(
        "a ReconcileError event",
        lambda: (
            "ReconcileError"
            in cluster.run(
                "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=broken"
            ).stdout
        ),
        timeout=60,
    )
    # ... and every other job is still served
    run_gan3d(cluster, namespace, spec__resources__gpus=16)
    assert operator.healthy()


def test_two_jobs_planned_at_once_share_the_pool(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    # Applied together: the second is planned while the first's workers are still gated.
    cluster.apply(gan3d_job(name="first", spec__resources__gpus=16), namespace=namespace)
    cluster.apply(gan3d_job(name="second", spec__resources__gpus=16), namespace=namespace)
    for name in ("first", "second"):
        wait_phase(cluster, namespace, name, "Running", timeout=90)
    first = {p["spec"]["nodeName"] for p in workers(cluster, namespace, "first")}
    second = {p["spec"]["nodeName"] for p in workers(cluster, namespace, "second")}
    assert len(first) == len(second) == 2 and not first & second
