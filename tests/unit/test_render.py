"""Rendered manifests (DESIGN §4): schema-valid for the targeted Kubernetes, every item present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubegan_api import contract
from kubegan_operator.api.loading import load_job
from kubegan_operator.api.pricing import DEFAULT_PRICES
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.manifests.pods import render_all
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan

from tests.support.world import node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# The Kubernetes minor the project targets (hack/ builds this release's control plane).
K8S_SCHEMA_VERSION = "1.36.0"
UID = "6b1f6a3e-8c59-4d0e-9a51-3a8f0f6f2a10"


def spot_v100(n: int = 4) -> list[dict[str, Any]]:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    return [node(f"v100-{i}", 8, spot=True, pool="v100-spot", taints=[taint]) for i in range(n)]


def tpu_nodes() -> list[dict[str, Any]]:
    return [
        node(
            f"tpu-{i}",
            0,
            pool="tpu-v5e",
            tpu_chips=4,
            labels={
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "4x4",
            },
        )
        for i in range(4)
    ]


def rendered(example: str, nodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    job = load_job(EXAMPLES / example)
    from kubegan_operator.placement.planner import static_plan

    p = plan(job.spec, build_inventory(nodes)) if nodes is not None else static_plan(job.spec)
    assert p.feasible, p.reason
    return render_all(job, p, uid=UID, attempt=2)


CASES = {
    "gan3d": ("gan3d-gke-v100-spot.yaml", spot_v100()),
    "digits": ("digits-local.yaml", None),
    "tpu": ("acgan-gke-tpu-v5e.yaml", tpu_nodes()),
    "pix2pix": (
        "pix2pix-aks-spot.yaml",
        [
            node(
                f"aks-{i}",
                4,
                accelerator="nvidia",
                pool="",
                spot=False,
                labels={
                    "kubernetes.azure.com/agentpool": "gpuspot",
                    "kubernetes.azure.com/scalesetpriority": "spot",
                    "kubernetes.azure.com/accelerator": "nvidia",
                },
            )
            for i in range(2)
        ],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_manifests_validate_against_kubernetes_schemas(case: str) -> None:
    objs = rendered(*CASES[case])
    # the Service, the ConfigMap and at least one worker: the loop below must validate them
    assert {o["kind"] for o in objs} >= {"Service", "ConfigMap", "Pod"}
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_service_configmap_and_ownership() -> None:
    objs = rendered(*CASES["gan3d"])
    assert [o["kind"] for o in objs] == ["Service", "ConfigMap"] + ["Pod"] * 4
    svc = objs[0]
    assert svc["metadata"]["name"] == "gan3d-v100"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {contract.JOB_NAME_LABEL: "gan3d-v100"}
    config = json.loads(objs[1]["data"][contract.CONFIG_FILE])
    assert config["jobName"] == "gan3d-v100" and config["model"]["name"] == "gan3d"
    for o in objs:
        ref = o["metadata"]["ownerReferences"][0]
        assert ref == {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "name": "gan3d-v100",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = o["metadata"]["labels"]
        assert labels[contract.JOB_NAME_LABEL] == "gan3d-v100"
        assert labels["app.kubernetes.io/part-of"] == "kubegan"
        assert labels["app.kubernetes.io/managed-by"] == "kubegan-operator"


def test_only_a_gang_of_more_than_one_is_gated() -> None:
    """Workers start together or not at all: a gang of several is created gated and
    released once all exist; a gang of one is whole when created, so it carries no gate
    (lifting it cost a round trip on every single-node job)."""
    for case in CASES.values():
        pods = by_kind(rendered(*case), "Pod")
        for p in pods:
            gated = bool(p["spec"].get("schedulingGates"))
            assert gated == (len(pods) > 1), (case[0], len(pods))
    assert any(len(by_kind(rendered(*c), "Pod")) > 1 for c in CASES.values())
    job = load_job(EXAMPLES / CASES["gan3d"][0])
    one = Plan(True, workers=1, gpus_per_worker=8, strategy="mirrored", nodes=("n0",))
    (pod,) = by_kind(render_all(job, one, uid=UID), "Pod")
    assert "schedulingGates" not in pod["spec"]


def test_pods_identity_gang_and_scheduling() -> None:
    pods = by_kind(rendered(*CASES["gan3d"]), "Pod")
    assert len(pods) == 4
    for i, p in enumerate(pods):
        spec = p["spec"]
        assert p["metadata"]["name"] == f"gan3d-v100-worker-{i}"
        assert p["metadata"]["labels"][contract.WORKER_INDEX_LABEL] == str(i)
        assert p["metadata"]["labels"][contract.ATTEMPT_LABEL] == "2"
        assert (spec["hostname"], spec["subdomain"]) == (f"gan3d-v100-worker-{i}", "gan3d-v100")
        assert spec["schedulingGates"] == [{"name": contract.GANG_GATE}]
        assert spec["restartPolicy"] == "Never"
        assert spec["terminationGracePeriodSeconds"] >= 30
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti == [
            {
                "labelSelector": {"matchLabels": {contract.JOB_NAME_LABEL: "gan3d-v100"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
        required = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        terms = required["nodeSelectorTerms"]
        # spot: required -> one OR-ed term per spot label, each pinned to the planned pool
        assert len(terms) == 5
        for t in terms:
            assert {
                "key": "cloud.google.com/gke-nodepool",
                "operator": "In",
                "values": ["v100-spot"],
            } in t["matchExpressions"]
        assert {"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]} in terms[
            0
        ]["matchExpressions"]
        pref = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert pref[0]["preference"]["matchExpressions"][0]["values"] == [
            "v100-0",
            "v100-1",
            "v100-2",
            "v100-3",
        ]
        tol_keys = {t["key"] for t in spec["tolerations"]}
        assert {
            "nvidia.com/gpu",
            "cloud.google.com/gke-spot",
            "kubernetes.azure.com/scalesetpriority",
        } <= tol_keys
        c = spec["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert c["resources"]["requests"] == {"cpu": "32", "memory": "200Gi", "nvidia.com/gpu": "8"}
        assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
            "peer": contract.TF_WORKER_PORT,
            "metrics": contract.METRICS_PORT,
        }


def test_security_context() -> None:
    checked = 0
    for case in CASES:
        for p in by_kind(rendered(*CASES[case]), "Pod"):
            checked += 1
            spec = p["spec"]
            psc = spec["securityContext"]
            assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
            assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert spec["automountServiceAccountToken"] is False
            c = spec["containers"][0]
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert "privileged" not in sc
            writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert {"/tmp", contract.CHECKPOINT_ROOT, "/dev/shm"} <= writable
            config_mount = {"name": "config", "mountPath": contract.CONFIG_DIR, "readOnly": True}
            assert config_mount in c["volumeMounts"]
    assert checked == sum(len(by_kind(rendered(*case), "Pod")) for case in CASES.values()) > 4


def test_tensorflow_env() -> None:
    pods = by_kind(rendered(*CASES["gan3d"]), "Pod")
    assert len(pods) == 4
    for i, p in enumerate(pods):
        env = env_of(p)
        assert env[contract.ENV_JOB_NAME] == "gan3d-v100"
        assert env[contract.ENV_NAMESPACE] == "default"
        assert env[contract.ENV_WORKER_INDEX] == str(i)
        assert env[contract.ENV_NUM_WORKERS] == "4"
        assert env[contract.ENV_CONFIG] == contract.CONFIG_PATH
        assert (
            env[contract.ENV_CHECKPOINT_DIR]
            == f"{contract.CHECKPOINT_ROOT}/gan3d-v100/{contract.CHECKPOINT_SUBDIR}"
        )
        assert env[contract.ENV_METRICS_PORT] == str(contract.METRICS_PORT)
        # 32 V100s on spot, and 4 workers' 32 vCPUs and 200 GiB each at the spot prices of
        # the default table (the test nodes have no machine type: priced per resource).
        t = DEFAULT_PRICES
        assert t.cpu is not None and t.memory is not None and t.cpu.spot and t.memory.spot
        cpu_and_memory = 4 * (32 * t.cpu.spot + 200 * t.memory.spot)
        assert float(env[contract.ENV_COST_RATE_PER_HOUR]) == pytest.approx(
            32 * t.accelerators["nvidia-tesla-v100"].spot + cpu_and_memory
        )
        tf_config = json.loads(env[contract.ENV_TF_CONFIG])
        assert tf_config == {
            "cluster": {
                "worker": [
                    f"gan3d-v100-worker-{j}.gan3d-v100.default.svc:{contract.TF_WORKER_PORT}"
                    for j in range(4)
                ]
            },
            "task": {"type": "worker", "index": i},
        }
        assert contract.ENV_MASTER_ADDR not in env


def test_pytorch_env() -> None:
    pods = by_kind(rendered(*CASES["pix2pix"]), "Pod")
    assert len(pods) == 2
    for i, p in enumerate(pods):
        env = env_of(p)
        assert env[contract.ENV_MASTER_ADDR] == "pix2pix-aks-worker-0.pix2pix-aks.default.svc"
        assert env[contract.ENV_MASTER_PORT] == str(contract.TORCH_MASTER_PORT)
        ranks = (
            env[contract.ENV_NNODES],
            env[contract.ENV_NODE_RANK],
            env[contract.ENV_NPROC_PER_NODE],
        )
        assert ranks == ("2", str(i), "4")
        assert contract.ENV_TF_CONFIG not in env
        mounts = p["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "data", "mountPath": contract.DATA_ROOT, "readOnly": True} in mounts
        vols = {v["name"]: v for v in p["spec"]["volumes"]}
        assert vols["data"]["persistentVolumeClaim"] == {"claimName": "facades", "readOnly": True}
        assert vols["checkpoints"]["persistentVolumeClaim"] == {"claimName": "pix2pix-checkpoints"}
        assert p["spec"]["nodeSelector"] == {"kubernetes.azure.com/agentpool": "gpuspot"}


def test_cpu_workers_have_no_gpu_request() -> None:
    pods = by_kind(rendered(*CASES["digits"]), "Pod")
    assert len(pods) == 2
    for p in pods:
        c = p["spec"]["containers"][0]
        assert "nvidia.com/gpu" not in json.dumps(c["resources"])
        assert env_of(p)[contract.ENV_NPROC_PER_NODE] == "1"
        assert not any(t["key"] == "nvidia.com/gpu" for t in p["spec"]["tolerations"])
        vols = {v["name"]: v for v in p["spec"]["volumes"]}
        assert vols["checkpoints"] == {"name": "checkpoints", "emptyDir": {}}


def test_tpu_env_and_resources() -> None:
    pods = by_kind(rendered(*CASES["tpu"]), "Pod")
    assert len(pods) == 4
    hosts = ",".join(f"acgan-tpu-worker-{j}.acgan-tpu.default.svc" for j in range(4))
    for i, p in enumerate(pods):
        env = env_of(p)
        assert env[contract.ENV_TPU_WORKER_ID] == str(i)
        assert env[contract.ENV_TPU_WORKER_HOSTNAMES] == hosts
        c = p["spec"]["containers"][0]
        # The example names its memory (so its workers are not BestEffort): limited at it.
        assert c["resources"]["limits"] == {"google.com/tpu": "4", "memory": "128Gi"}
        assert any(t["key"] == "google.com/tpu" for t in p["spec"]["tolerations"])
        terms = p["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        exprs = terms[0]["matchExpressions"]
        assert {
            "key": "cloud.google.com/gke-tpu-topology",
            "operator": "In",
            "values": ["4x4"],
        } in exprs


def test_spot_never_excludes_spot_labels() -> None:
    job = load_job(EXAMPLES / "digits-local.yaml")
    job.spec.placement.spot = job.spec.placement.spot.__class__("never")
    from kubegan_operator.placement.planner import static_plan

    pod = render_all(job, static_plan(job.spec))[2]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]} in exprs
    assert not any("spot" in t["key"] for t in pod["spec"]["tolerations"])


def test_cli_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all(spot_v100()))
    assert main(["render", "--nodes", str(nodes), str(EXAMPLES / "gan3d-gke-v100-spot.yaml")]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    shared = ["Service", "ConfigMap", "NetworkPolicy"]
    assert [d["kind"] for d in docs] == shared + ["Pod"] * 4
    for d in docs:
        kubernetes_validate.validate(d, K8S_SCHEMA_VERSION, strict=True)
    assert all(d["spec"]["schedulingGates"] for d in docs[3:])  # --gang gates, the default
    # --gang native: the attempt's PodGroup first, every worker its member and ungated
    job = str(EXAMPLES / "gan3d-gke-v100-spot.yaml")
    assert main(["render", "--nodes", str(nodes), "--gang", "native", job]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == [*shared, "PodGroup"] + ["Pod"] * 4
    group = docs[3]
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    for pod in docs[4:]:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
        assert "schedulingGates" not in pod["spec"]
    # gpus without nodes cannot choose a shape: one line, non-zero
    assert main(["render", str(EXAMPLES / "gan3d-gke-v100-spot.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kubegan render: spec.resources.gpus: the shape depends on the nodes; pass --nodes"
    ]
