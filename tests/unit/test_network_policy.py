"""A job's NetworkPolicy (`<name>-workers`): its workers take connections from the same job's
workers on every port and, on the metrics port only, from the namespaces named to scrape it;
nothing else. The operator creates it with the job's Service and ConfigMap, makes it again
when it is deleted, sets it back when it is changed, and makes none with --no-network-policy;
`kubegan render` prints it."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import kopf
import kubernetes_validate
import pytest
import yaml
from kubegan_api import contract
from kubegan_operator.api.loading import load_job
from kubegan_operator.entry.cli import main
from kubegan_operator.manifests.network_policy import (
    MONITORING_NAMESPACES,
    OPERATOR_NAMESPACE,
    EgressAllow,
    EgressError,
    NetworkPolicySettings,
    render_network_policy,
)
from kubegan_operator.runtime import kopf_handlers

from tests.support.world import NAMESPACE, RecordingKube, World, job_body, node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
K8S_SCHEMA_VERSION = "1.36.0"
UID = "0d9c1c7e-4a54-4a8e-9f0e-2b6f4c1e7a11"
SCRAPERS = ("kubegan-system", "monitoring")
SETTINGS = NetworkPolicySettings(metrics_namespaces=SCRAPERS)
SPEC: dict[str, Any] = {
    "framework": "pytorch",
    "model": {"name": "dcgan"},
    "data": {"source": "synthetic"},
    "resources": {"gpus": 16, "cpu": "8", "memory": "64Gi"},
}


def namespaces_of(rule: dict[str, Any]) -> list[str]:
    (peer,) = rule["from"]
    (expr,) = peer["namespaceSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("kubernetes.io/metadata.name", "In")
    return list(expr["values"])


def test_peers_from_the_same_job_metrics_from_the_named_namespaces_only() -> None:
    job = load_job(EXAMPLES / "gan3d-gke-v100-spot.yaml")
    policy = render_network_policy(job, SETTINGS, UID)
    kubernetes_validate.validate(policy, K8S_SCHEMA_VERSION, strict=True)
    name = job.metadata.name
    assert policy["metadata"]["name"] == contract.network_policy_name(name) == f"{name}-workers"
    assert policy["metadata"]["namespace"] == job.metadata.namespace
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID  # deleted with the job
    own = {"matchLabels": {contract.JOB_NAME_LABEL: name}}
    spec = policy["spec"]
    assert spec["podSelector"] == own
    # Ingress only: everything no rule admits is refused; egress is left alone.
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    peers, scrapers = spec["ingress"]
    # The same job's workers, from this namespace only (no namespaceSelector), on any port:
    # NCCL's and gloo's data ports are ephemeral.
    assert peers == {"from": [{"podSelector": own}]}
    assert namespaces_of(scrapers) == sorted(SCRAPERS)
    assert scrapers["ports"] == [{"protocol": "TCP", "port": job.spec.monitoring.metrics_port}]
    assert job.spec.monitoring.metrics_port == contract.METRICS_PORT
    # The peer port the workers rendezvous on is not among what other namespaces reach.
    assert all(p["port"] not in contract.PEER_PORTS for p in scrapers["ports"])


def test_a_job_with_its_own_metrics_port_gets_that_port() -> None:
    job = load_job(EXAMPLES / "gan3d-gke-v100-spot.yaml")
    job.spec.monitoring.metrics_port = 9400
    _, scrapers = render_network_policy(job, SETTINGS)["spec"]["ingress"]
    assert scrapers["ports"] == [{"protocol": "TCP", "port": 9400}]


def test_restricted_egress_admits_peers_dns_and_the_listed_cidrs() -> None:
    job = load_job(EXAMPLES / "gan3d-gke-v100-spot.yaml")
    allowed = (EgressAllow.parse("0.0.0.0/0:443"), EgressAllow.parse("10.8.0.0/16"))
    settings = NetworkPolicySettings(SCRAPERS, restrict_egress=True, egress=allowed)
    policy = render_network_policy(job, settings)
    kubernetes_validate.validate(policy, K8S_SCHEMA_VERSION, strict=True)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    own = {"matchLabels": {contract.JOB_NAME_LABEL: job.metadata.name}}
    assert spec["egress"] == [
        {"to": [{"podSelector": own}]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]},
        {"to": [{"ipBlock": {"cidr": "10.8.0.0/16"}}]},
    ]


@pytest.mark.parametrize(
    ("text", "cidr", "ports"),
    [
        ("10.0.0.0/8", "10.0.0.0/8", ()),
        ("0.0.0.0/0:443", "0.0.0.0/0", (443,)),
        ("169.254.169.252/32:988,80", "169.254.169.252/32", (988, 80)),
        ("2001:db8::/32:443", "2001:db8::/32", (443,)),
    ],
)
def test_egress_entries(text: str, cidr: str, ports: tuple[int, ...]) -> None:
    assert EgressAllow.parse(text) == EgressAllow(cidr, ports)


@pytest.mark.parametrize(
    "text", ["10.0.0.1/8", "10.0.0.0", "10.0.0.0/33", "0.0.0.0/0:0", "0.0.0.0/0:http", "x/8"]
)
def test_bad_egress_entries_are_one_line(text: str) -> None:
    with pytest.raises(EgressError) as err:
        EgressAllow.parse(text)
    assert "\n" not in str(err.value) and repr(text) in str(err.value)


# ---- kubegan render ----------------------------------------------------------------------


def render(capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict[str, Any]]:
    job = str(EXAMPLES / "digits-local.yaml")
    assert main(["render", *flags, job]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_render_prints_the_policy_the_operator_makes(capsys: pytest.CaptureFixture[str]) -> None:
    docs = render(capsys)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    _, scrapers = policy["spec"]["ingress"]
    assert namespaces_of(scrapers) == sorted({OPERATOR_NAMESPACE, *MONITORING_NAMESPACES})
    docs = render(capsys, "--metrics-namespace", "prometheus")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert namespaces_of(policy["spec"]["ingress"][1]) == ["kubegan-system", "prometheus"]
    # --no-network-policy, the chart's networkPolicy.enabled: false: no policy at all.
    assert "NetworkPolicy" not in {d["kind"] for d in render(capsys, "--no-network-policy")}


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            ["--egress-allow", "0.0.0.0/0:443"],
            "kubegan render: --egress-allow needs --restrict-egress",
        ),
        (
            ["--no-network-policy", "--restrict-egress"],
            "kubegan render: --restrict-egress needs --network-policy",
        ),
    ],
)
def test_flags_that_would_be_ignored_are_refused(
    flags: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", *flags, str(EXAMPLES / "digits-local.yaml")]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_bad_egress_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    job = str(EXAMPLES / "digits-local.yaml")
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["render", "--restrict-egress", "--egress-allow", "10.0.0.1/8", job])
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--egress-allow" in err[0] and "not a CIDR" in err[0]


# ---- the operator ------------------------------------------------------------------------


def world() -> World:
    w = World()
    for i in range(3):
        w.add_node(node(f"n{i}"))
    w.add_job(job_body("g", spec=copy.deepcopy(SPEC)))
    return w


def sync(w: World, settings: NetworkPolicySettings | None) -> RecordingKube:
    kube = RecordingKube(w)
    ctl = w.controller(kube, network_policy=settings)

    async def run() -> None:
        await ctl.sync((NAMESPACE, "g"))
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
    return kube


def made_policies(kube: RecordingKube) -> list[dict[str, Any]]:
    return [o for o in kube.made if o["kind"] == "NetworkPolicy"]


def shown_policy(spec: dict[str, Any], rv: str = "7") -> dict[str, Any]:
    meta = {
        "name": "g-workers",
        "namespace": NAMESPACE,
        "resourceVersion": rv,
        "labels": {contract.JOB_NAME_LABEL: "g"},
        "ownerReferences": [{"uid": "uid-g"}],
    }
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
            "spec": spec}  # fmt: skip


def test_the_operator_creates_the_policy_with_the_service_and_config_map() -> None:
    kube = sync(world(), SETTINGS)
    created = [n for c, n in kube.calls if c == "create"]
    assert created[:3] == ["g", "g-config", "g-workers"]  # before any worker
    (policy,) = made_policies(kube)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-g"
    assert namespaces_of(policy["spec"]["ingress"][1]) == sorted(SCRAPERS)


def test_no_policy_without_the_setting() -> None:
    kube = sync(world(), None)
    assert made_policies(kube) == [] and ("create", "g-workers") not in kube.calls


def test_a_policy_as_rendered_is_left_alone() -> None:
    w = world()
    rendered = made_policies(sync(world(), SETTINGS))[0]
    w.add_owned(shown_policy(rendered["spec"]))
    kube = sync(w, SETTINGS)
    assert [c for c in kube.calls if c[1] == "g-workers"] == []


def test_a_changed_policy_is_set_back_once() -> None:
    w = world()
    rendered = made_policies(sync(world(), SETTINGS))[0]
    opened = copy.deepcopy(rendered["spec"])
    opened["ingress"].append({})  # an allow-all rule added by hand
    policy = w.add_owned(shown_policy(opened, rv="7"))
    kube = RecordingKube(w)
    ctl = w.controller(kube, network_policy=SETTINGS)

    def sync_again() -> list[tuple[str, str]]:
        kube.calls.clear()
        asyncio.run(ctl.sync((NAMESPACE, "g")))
        return [c for c in kube.calls if c[1] == "g-workers"]

    # The sync creates and releases the gang: two decisions, one patch, over the version seen.
    assert sync_again() == [("patch", "g-workers")]
    assert kube.made[-1]["spec"] == rendered["spec"]
    assert kube.made[-1]["metadata"]["resourceVersion"] == "7"
    for pod in [o for o in kube.made if o["kind"] == "Pod"]:
        pod["spec"].pop("schedulingGates", None)
        w.add_pod(pod)  # the watch shows the new gang, not yet the policy set back:
    assert sync_again() == []  # not patched again
    w.idx.network_policies.put(shown_policy(rendered["spec"], rv="8"))  # now it does
    assert sync_again() == []
    w.idx.network_policies.put(shown_policy(opened, rv="9"))  # opened again by hand
    assert sync_again() == [("patch", "g-workers")]
    ctl.threads.shutdown(wait=True)
    assert policy["metadata"]["resourceVersion"] == "7"


def test_a_deleted_policy_queues_its_job_and_is_made_again() -> None:
    w = world()
    rendered = made_policies(sync(world(), SETTINGS))[0]
    policy = w.add_owned(shown_policy(rendered["spec"]))
    ctl = w.controller(RecordingKube(w), network_policy=SETTINGS)
    w.queued()
    w.idx.network_policies.drop(policy)  # the watch shows it gone
    asyncio.run(
        kopf_handlers._on_network_policy(
            event={"type": "DELETED", "object": policy},
            body=policy,
            memo=kopf.Memo(controller=ctl),
        )
    )
    assert w.queued() == {"g"}
    kube = sync(w, SETTINGS)
    assert ("create", "g-workers") in kube.calls
