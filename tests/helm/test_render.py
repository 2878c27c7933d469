"""`helm template` output validates against the Kubernetes 1.36 schemas, and the
chart holds what DESIGN §4/§6 ask of it (one Recreate replica, probes, restricted
security context, price table, images, monitors that match the worker pods)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubegan_api.contract import (
    ENV_TRAINER_IMAGE_TF,
    ENV_TRAINER_IMAGE_TORCH,
    JOB_NAME_LABEL,
    WORKER_INDEX_LABEL,
)
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.api.loading import load_prices
from kubegan_operator.api.pricing import DEFAULT_PRICES, catalogue
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.planner import static_plan

from tests.helm.chart import (
    AZURE_MANAGED_API,
    EVERYTHING,
    GOOGLE_MANAGED_API,
    PROMETHEUS_OPERATOR_API,
    VALUES,
    by_kind,
    one,
    template,
    values_args,
)

K8S_SCHEMA_VERSION = "1.36.0"
MONITORING = "monitoring.coreos.com/v1"
CASES = [(p, e) for p in sorted(VALUES) for e in (False, True)]
IDS = [f"{p}-{'everything' if e else 'as-is'}" for p, e in CASES]


def render(preset: str, everything: bool = False, *extra: str) -> list[dict[str, Any]]:
    apis = PROMETHEUS_OPERATOR_API if everything else []
    return template(*values_args(preset), *(EVERYTHING if everything else []), *apis, *extra)


def deployment_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def args_of(container: dict[str, Any]) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for arg in container["args"][1:]:
        key, _, value = arg.partition("=")
        parsed.setdefault(key, []).append(value)
    return parsed


@pytest.mark.parametrize(("preset", "everything"), CASES, ids=IDS)
def test_every_object_validates(preset: str, everything: bool) -> None:
    docs = render(preset, everything)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Service",
    } <= kinds
    for doc in docs:
        if doc["apiVersion"] == MONITORING:
            check_monitoring_object(doc)  # a CRD's type: not in the Kubernetes schemas
        else:
            kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True)
    if everything:
        assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "PersistentVolumeClaim"} <= kinds


def check_monitoring_object(doc: dict[str, Any]) -> None:
    """The fields prometheus-operator requires, with the types its CRDs declare."""
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    meta, spec = doc["metadata"], doc["spec"]
    assert meta["name"] and meta["namespace"]
    assert all(isinstance(v, str) for v in meta["labels"].values())
    if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
        endpoints = spec["endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
        assert set(spec) <= {
            "selector",
            "namespaceSelector",
            "endpoints",
            "podMetricsEndpoints",
            "jobLabel",
        }
        assert spec["selector"]["matchLabels"]
        for ep in endpoints:
            assert set(ep) <= {
                "port",
                "path",
                "interval",
                "scrapeTimeout",
                "honorLabels",
                "relabelings",
                "metricRelabelings",
            }
            assert isinstance(ep["port"], str) and ep["path"].startswith("/")
            assert ep["interval"].endswith("s") and ep["honorLabels"] is True
            for r in ep.get("relabelings", []):
                assert set(r) <= {
                    "sourceLabels",
                    "targetLabel",
                    "action",
                    "regex",
                    "replacement",
                    "separator",
                }
    elif doc["kind"] == "PrometheusRule":
        assert set(spec) == {"groups"}
        for group in spec["groups"]:
            assert set(group) == {"name", "rules"} and group["rules"]
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule)
                assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}
                assert isinstance(rule["expr"], str | int)
    else:
        raise AssertionError(f"unexpected monitoring kind {doc['kind']}")


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_operator_deployment(preset: str) -> None:
    docs = render(preset)
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    # Replicas elect a leader through a Lease, so a rollout may overlap old and new pods.
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = dep["spec"]["template"]["spec"]
    c = deployment_container(docs)
    args = args_of(c)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(args["--health-port"][0]) == ports["health"]
    assert int(args["--metrics-port"][0]) == ports["metrics"]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    # DESIGN §4's restricted profile, for the operator too.
    psc, csc = pod["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["allowPrivilegeEscalation"] is False and csc["privileged"] is False
    assert csc["readOnlyRootFilesystem"] is True and csc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert "--leader-elect" in args and args["--leader-election-name"] == [dep["metadata"]["name"]]


def test_two_replicas_share_one_leader_lease() -> None:
    docs = render("default", False, "--set", "operator.replicas=2")
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    args = args_of(deployment_container(docs))
    namespace = dep["metadata"]["namespace"]
    assert args["--leader-election-namespace"] == [namespace]
    # The Lease rules: a Role in the release namespace only, nothing cluster-wide.
    leader = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader"))
    assert leader["metadata"]["namespace"] == namespace
    lease = args["--leader-election-name"][0]
    assert leader["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        },
    ]
    assert not any("leases" in rule["resources"] for rule in one(docs, "ClusterRole")["rules"])


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_price_table_reaches_the_operator(preset: str, tmp_path) -> None:
    docs = render(preset)
    c = deployment_container(docs)
    prices_path = args_of(c)["--prices"][0]
    mount = next(m for m in c["volumeMounts"] if prices_path.startswith(m["mountPath"] + "/"))
    volume = next(
        v
        for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == mount["name"]
    )
    cm = next(
        d
        for d in by_kind(docs, "ConfigMap")
        if d["metadata"]["name"] == volume["configMap"]["name"]
    )
    key = prices_path[len(mount["mountPath"]) + 1 :]
    (tmp_path / "prices.yaml").write_text(cm["data"][key])
    table = load_prices(tmp_path / "prices.yaml")  # exactly what --prices reads
    values = yaml.safe_load(VALUES[preset][0].read_text())["prices"] if VALUES[preset] else None
    if values is None:
        # The chart's default table is the operator's built-in one.
        assert table == DEFAULT_PRICES
    else:
        # A preset names its cloud's catalogue: the chart ships the package's files.
        assert table == catalogue(values["catalogue"])
        assert table.cloud == {"aks": "azure", "gke": "gcp"}[preset]
    # The pod restarts when the table changes.
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    changed = render(
        preset,
        False,
        "--set",
        "prices.accelerators.x.onDemand=1",
        "--set",
        "prices.accelerators.x.spot=1",
    )
    assert (
        one(changed, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/prices"]
        != annotations["checksum/prices"]
    )


def rendered_table(*values: str, tmp_path: Any) -> Any:
    """The price table the chart renders with `values`, read as --prices reads it."""
    cm = next(
        d
        for d in by_kind(render("default", False, *values), "ConfigMap")
        if d["metadata"]["name"].endswith("-prices")
    )
    path = tmp_path / "rendered-prices.yaml"
    path.write_text(cm["data"]["prices.yaml"])
    return load_prices(path)


def test_a_catalogue_or_a_table_of_ones_own_is_the_price_table(tmp_path) -> None:
    assert rendered_table("--set", "prices.catalogue=gcp-europe-west4", tmp_path=tmp_path) == (
        catalogue("gcp-europe-west4")
    )
    own = {
        "cloud": "gcp",
        "region": "us-west1",
        "source": "mine",
        "asOf": "2026-11-27",
        "machineTypes": {"g2-standard-8": {"onDemand": 0.9, "spot": 0.3}},
    }
    table = rendered_table("--set-json", f"prices.table={json.dumps(own)}", tmp_path=tmp_path)
    assert (table.region, table.source) == ("us-west1", "mine")
    assert table.machine_types["g2-standard-8"].of(spot=True) == 0.3
    # The older form (a table's keys directly under prices) replaces the catalogue too.
    older = rendered_table(
        "--set", "prices.source=old", "--set", "prices.accelerators.x.onDemand=1",
        "--set", "prices.accelerators.x.spot=1", tmp_path=tmp_path,
    )  # fmt: skip
    assert (older.source, set(older.accelerators), older.machine_types) == ("old", {"x"}, {})


def test_trainer_images_are_passed_to_the_operator() -> None:
    env = {e["name"]: e.get("value") for e in deployment_container(render("default"))["env"]}
    # Always set: the chart's appVersion, not the operator package's, names the default
    # (tests/helm/test_release.py: exactly what the release workflow pushes).
    assert env[ENV_TRAINER_IMAGE_TORCH].startswith("ghcr.io/kubegan/trainer-torch:")
    moved = render("default", False, "--set", "image.repository=reg.example/k/operator")
    env = {e["name"]: e.get("value") for e in deployment_container(moved)["env"]}
    assert env[ENV_TRAINER_IMAGE_TF].startswith("reg.example/k/trainer-tf:")  # follows image
    env = {e["name"]: e.get("value") for e in deployment_container(render("default", True))["env"]}
    assert env[ENV_TRAINER_IMAGE_TORCH] == "registry.example/trainer-torch:1"
    assert env[ENV_TRAINER_IMAGE_TF] == "registry.example/trainer-tf:1"


def test_image_digest_wins_over_tag() -> None:
    digest = "sha256:" + "a" * 64
    c = deployment_container(render("default", False, "--set", f"image.digest={digest}"))
    assert c["image"] == f"ghcr.io/kubegan/operator@{digest}"
    assert deployment_container(render("default"))["image"] == "ghcr.io/kubegan/operator:0.1.0"


def test_watch_namespaces_narrow_the_rbac() -> None:
    docs = render("default", False, "--set", "operator.watchNamespaces={ml,research}")
    assert args_of(deployment_container(docs))["--namespace"] == ["ml", "research"]
    cluster_rules = one(docs, "ClusterRole")["rules"]
    assert cluster_rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ml", "research"]
    bindings = [
        b for b in by_kind(docs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader")
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["ml", "research"]
    pm = one(render("default", True, "--set", "operator.watchNamespaces={ml}"), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}


def _worker(index: int) -> dict[str, Any]:
    job = GANTrainingJob.model_validate(
        yaml.safe_load((VALUES["gke"][0].parents[2] / "examples" / "digits-local.yaml").read_text())
    )
    return render_pod(job, static_plan(job.spec), index)


def test_pod_monitor_selects_worker_zero_metrics_port() -> None:
    pm = one(render("default", True), "PodMonitor")
    selector = pm["spec"]["selector"]["matchLabels"]
    # The labels and port name the operator's renderer gives trainer pods (DESIGN §4).
    w0, w1 = _worker(0), _worker(1)
    assert selector["app.kubernetes.io/name"] == "kubegan-trainer"
    assert selector.items() <= w0["metadata"]["labels"].items()
    assert not selector.items() <= w1["metadata"]["labels"].items()  # only rank 0 serves
    port_names = {p["name"] for p in w0["spec"]["containers"][0]["ports"]}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in port_names
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    relabel = pm["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
    label = JOB_NAME_LABEL
    assert label in w0["metadata"]["labels"]
    assert relabel["sourceLabels"] == ["__meta_kubernetes_pod_label_kubegan_io_job_name"]
    assert relabel["targetLabel"] == "ganjob"


def test_service_monitor_selects_the_metrics_service() -> None:
    docs = render("default", True)
    sm, svc = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["kubegan-system"]}
    port = svc["spec"]["ports"][0]
    assert sm["spec"]["endpoints"][0]["port"] == port["name"]
    container_ports = {p["name"] for p in deployment_container(docs)["ports"]}
    assert port["targetPort"] in container_ports
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_monitors_are_off_by_default_and_take_extra_labels() -> None:
    kinds = {d["kind"] for d in render("default")}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    docs = render(
        "default",
        True,
        "--set",
        "monitoring.labels.release=kps",
        "--set",
        "monitoring.podMonitor.labels.team=ml",
    )
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kps"
    assert one(docs, "PodMonitor")["metadata"]["labels"]["team"] == "ml"
    assert "team" not in one(docs, "ServiceMonitor")["metadata"]["labels"]
    # The presets turn them on for kube-prometheus-stack.
    for preset in ("gke", "aks"):
        labels = one(render(preset, False, *PROMETHEUS_OPERATOR_API), "PodMonitor")["metadata"]
        assert labels["labels"]["release"] == "kube-prometheus-stack"


MONITORING_KINDS = {
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
    "PodMonitoring",
    "ClusterPodMonitoring",
    "ClusterRules",
}


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_monitoring_renders_only_where_its_api_exists(preset: str) -> None:
    """Every monitor switched on, but a cluster without any monitoring API: none renders
    (so `helm install` works there: tests/cluster/test_helm_install_no_monitoring.py)."""
    everything_on = [
        *EVERYTHING,
        "--set",
        "monitoring.googleManagedPrometheus.enabled=true",
        "--set",
        "monitoring.azureManagedPrometheus.enabled=true",
    ]
    kinds = {d["kind"] for d in render(preset, False, *everything_on)}
    assert not kinds & MONITORING_KINDS
    assert "ConfigMap" in kinds  # the dashboard is a plain ConfigMap: always there


def test_google_managed_prometheus_objects() -> None:
    """values-gke turns GMP on: with its API, PodMonitoring (operator), ClusterPodMonitoring
    (trainers) and ClusterRules with the same alert groups as the PrometheusRule."""
    docs = render("gke", False, *GOOGLE_MANAGED_API)
    assert {d["apiVersion"] for d in docs if d["kind"] in MONITORING_KINDS} == {
        "monitoring.googleapis.com/v1"
    }
    operator = one(docs, "PodMonitoring")
    assert operator["metadata"]["namespace"] == "kubegan-system"
    assert operator["spec"]["endpoints"][0]["port"] == "metrics"
    trainers = one(docs, "ClusterPodMonitoring")
    assert "namespace" not in trainers["metadata"]
    assert trainers["spec"]["selector"]["matchLabels"][WORKER_INDEX_LABEL] == "0"
    rules = one(docs, "ClusterRules")["spec"]["groups"]
    po = one(render("gke", False, *PROMETHEUS_OPERATOR_API), "PrometheusRule")["spec"]["groups"]
    assert rules == po and any(
        r.get("alert") == "KubeganJobFailed" for g in rules for r in g["rules"]
    )
    # Off in the default values, and without rules when asked.
    assert not {d["kind"] for d in render("default", False, *GOOGLE_MANAGED_API)} & MONITORING_KINDS
    no_rules = render(
        "gke", False, *GOOGLE_MANAGED_API, "--set", "monitoring.googleManagedPrometheus.rules=false"
    )
    assert not by_kind(no_rules, "ClusterRules") and one(no_rules, "ClusterPodMonitoring")


def test_azure_managed_prometheus_monitors() -> None:
    """values-aks turns Azure Managed Prometheus on: the same monitors under
    azmonitoring.coreos.com/v1, beside prometheus-operator's when both APIs exist."""
    docs = render("aks", False, *AZURE_MANAGED_API)
    monitors = [d for d in docs if d["kind"] in MONITORING_KINDS]
    assert sorted((d["apiVersion"], d["kind"]) for d in monitors) == [
        ("azmonitoring.coreos.com/v1", "PodMonitor"),
        ("azmonitoring.coreos.com/v1", "ServiceMonitor"),
    ]
    both = render("aks", False, *AZURE_MANAGED_API, *PROMETHEUS_OPERATOR_API)
    pms = by_kind(both, "PodMonitor")
    assert {d["apiVersion"] for d in pms} == {"azmonitoring.coreos.com/v1", MONITORING}
    assert pms[0]["spec"] == pms[1]["spec"]


@pytest.mark.parametrize(
    ("preset", "storage_class"), [("gke", "standard-rwx"), ("aks", "azurefile-csi")]
)
def test_presets_give_rwx_checkpoint_storage(preset: str, storage_class: str) -> None:
    pvc = one(render(preset), "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == storage_class
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The operator is kept off spot and accelerator nodes.
    pod = one(render(preset), "Deployment")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert any("spot" in k or "scalesetpriority" in k for k in keys)


def test_dashboard_configmap() -> None:
    import json

    cm = next(
        d
        for d in by_kind(render("default"), "ConfigMap")
        if d["metadata"]["name"].endswith("-dashboard")
    )
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["kubegan.json"])
    titles = {p["title"] for p in dash["panels"]}
    assert {
        "Epoch time",
        "Samples/s",
        "Losses",
        "Cost per epoch",
        "Cumulative cost",
        "Preemptions and restarts",
        "Time to running",
    } <= titles
    assert all(t["expr"] for p in dash["panels"] for t in p["targets"])
    ns = render("default", False, "--set", "monitoring.dashboard.namespace=monitoring")
    assert any(d["metadata"]["namespace"] == "monitoring" for d in by_kind(ns, "ConfigMap"))


def test_trainer_progress_reading_can_be_turned_off() -> None:
    assert "--no-trainer-progress" not in args_of(deployment_container(render("default")))
    docs = render("default", False, "--set", "operator.readTrainerProgress=false")
    assert "--no-trainer-progress" in args_of(deployment_container(docs))


def test_progress_interval_reaches_the_operator() -> None:
    assert args_of(deployment_container(render("default")))["--progress-interval"] == ["15"]
    docs = render("default", False, "--set", "operator.progressIntervalSeconds=5")
    assert args_of(deployment_container(docs))["--progress-interval"] == ["5"]
