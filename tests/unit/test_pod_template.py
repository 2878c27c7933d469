"""spec.podTemplate: what a team adds reaches every worker, and nothing it adds
overrides kubegan's names or widens what a worker may do. `kubegan validate` refuses each
forbidden use with the field's path; tests/support/cel_cases.py holds the CRD (and, in the
cluster tier, the real apiserver) to the same paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubegan_api import contract
from kubegan_api.reserved import KUBEGAN_MOUNTS, RESERVED_ENV, TUNABLE_ENV
from kubegan_api.spec import decode_job
from kubegan_operator.decide.reconcile import reconcile
from kubegan_operator.entry.cli import main
from kubegan_operator.manifests.pods import render_all
from kubegan_operator.placement.planner import static_plan

from tests.support.cel_cases import merge_patch
from tests.support.world import JobWorld, gan_job

WARNING = "kubegan validate: warning: "

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "examples" / "digits-local.yaml").read_text())
K8S_SCHEMA_VERSION = "1.36.0"

EVERYTHING: dict[str, Any] = {
    "metadata": {
        "labels": {"team": "gan", "app.kubernetes.io/name": "mine"},
        "annotations": {"gke-gcsfuse/volumes": "true"},
    },
    "spec": {
        "serviceAccountName": "gan-trainer",
        "imagePullSecrets": [{"name": "registry"}],
        "priorityClassName": "batch-high",
        "volumes": [
            {"name": "settings", "configMap": {"name": "nccl-settings"}},
            {"name": "gcs", "csi": {"driver": "gcsfuse.csi.storage.gke.io", "readOnly": True}},
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "audience": "sts.example"}}
                    ]
                },
            },
        ],
        "env": [
            {"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "p", "key": "url"}}},
            {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        ],
        "volumeMounts": [
            {"name": "settings", "mountPath": "/etc/nccl", "readOnly": True},
            {"name": "gcs", "mountPath": "/mnt/gcs", "subPath": "runs/a"},
            {"name": "token", "mountPath": "/var/run/identity", "readOnly": True},
        ],
        "securityContext": {
            "runAsUser": 2000,
            "runAsGroup": 2000,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/gan.json"},
            "capabilities": {"drop": ["NET_RAW", "ALL"]},
        },
    },
}


def job_with(template: dict[str, Any]) -> dict[str, Any]:
    return merge_patch(BASE, {"spec": {"podTemplate": template}})


def pods(template: dict[str, Any]) -> list[dict[str, Any]]:
    job = decode_job(job_with(template))
    objs = render_all(job, static_plan(job.spec), uid="u-1", attempt=1)
    return [o for o in objs if o["kind"] == "Pod"]


def test_every_field_reaches_every_worker() -> None:
    workers = pods(EVERYTHING)
    assert len(workers) == 2
    want = EVERYTHING["spec"]
    for pod in workers:
        kubernetes_validate.validate(pod, K8S_SCHEMA_VERSION, strict=True)
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["team"] == "gan"
        # kubegan's own labels win over the template's.
        assert meta["labels"]["app.kubernetes.io/name"] == "kubegan-trainer"
        assert meta["annotations"]["gke-gcsfuse/volumes"] == "true"
        assert contract.PLANNED_NODES_ANNOTATION in meta["annotations"]
        assert spec["serviceAccountName"] == "gan-trainer"
        assert spec["automountServiceAccountToken"] is False
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
        assert spec["priorityClassName"] == "batch-high"
        names = [v["name"] for v in spec["volumes"]]
        assert names[: len(names) - 3] == [v for v in KUBEGAN_MOUNTS if v != "data"]
        assert spec["volumes"][-3:] == want["volumes"]
        (trainer,) = spec["containers"]
        env = [e["name"] for e in trainer["env"]]
        # The template's variables come after kubegan's, which they cannot name.
        assert env[-3:] == ["NCCL_DEBUG", "HTTPS_PROXY", "NODE_IP"]
        assert contract.ENV_JOB_NAME in env[:-3]
        assert trainer["env"][-3:] == want["env"]
        assert trainer["volumeMounts"][-3:] == want["volumeMounts"]
        sc = trainer["securityContext"]
        assert sc["runAsUser"] == sc["runAsGroup"] == 2000
        assert sc["seccompProfile"] == want["securityContext"]["seccompProfile"]
        assert sc["capabilities"] == {"drop": ["ALL", "NET_RAW"]}
        assert "privileged" not in sc
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True


def test_a_template_of_only_labels_leaves_the_rest_as_kubegan_has_it() -> None:
    (plain, *_) = pods({})
    (labelled, *_) = pods({"metadata": {"labels": {"team": "gan"}}})
    assert labelled["spec"] == plain["spec"]
    assert labelled["metadata"]["labels"] == {**plain["metadata"]["labels"], "team": "gan"}


def _validate(tmp_path: Path, template: dict[str, Any], capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_with(template)))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    # A job without cpu/memory is warned about (test_worker_requests): not these tests' matter.
    return code, out.strip(), [line for line in err.splitlines() if not line.startswith(WARNING)]


P = "spec.podTemplate.spec"
FORBIDDEN = {
    "privileged": (
        {"spec": {"securityContext": {"privileged": True}}},
        f"{P}.securityContext.privileged: privileged can only be false",
    ),
    "hostPath": (
        {"spec": {"volumes": [{"name": "host", "hostPath": {"path": "/var/lib"}}]}},
        f"{P}.volumes[0].hostPath: hostPath volumes are refused by this operator",
    ),
    "kubegan variable": (
        {
            "spec": {
                "env": [{"name": "x", "value": "1"}, {"name": contract.ENV_CONFIG, "value": "/x"}]
            }
        },
        f"{P}.env[1].name: variables under {contract.ENV_PREFIX}",
    ),
    "framework variable": (
        {"spec": {"env": [{"name": contract.ENV_MASTER_PORT, "value": "1"}]}},
        f"{P}.env[0].name: variables under {contract.ENV_PREFIX}",
    ),
    "colliding volume": (
        {"spec": {"volumes": [{"name": "dshm", "emptyDir": {}}]}},
        f"{P}.volumes[0].name: config, tmp, dshm, checkpoints, data are kubegan's own volumes",
    ),
    "mount over /checkpoints": (
        {
            "spec": {
                "volumes": [{"name": "c", "emptyDir": {}}],
                "volumeMounts": [{"name": "c", "mountPath": contract.CHECKPOINT_ROOT}],
            }
        },
        f"{P}.volumeMounts[0].mountPath: /etc/kubegan, /tmp, /dev/shm, /checkpoints, /data",
    ),
    "added capability": (
        {"spec": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}},
        f"{P}.securityContext.capabilities.add: capabilities can only be dropped",
    ),
    "root": (
        {"spec": {"securityContext": {"runAsUser": 0}}},
        f"{P}.securityContext.runAsUser: input should be greater than or equal to 1",
    ),
    "kubegan label": (
        {"metadata": {"labels": {contract.ATTEMPT_LABEL: "0"}}},
        "spec.podTemplate.metadata.labels: keys under kubegan.io/",
    ),
    "secret through the downward API": (
        {"spec": {"env": [{"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "spec.x"}}}]}},
        f"{P}.env[0].valueFrom.fieldRef.fieldPath: ",
    ),
    "unknown volume source": (
        {"spec": {"volumes": [{"name": "n", "nfs": {"server": "a", "path": "/"}}]}},
        f"{P}.volumes[0].nfs: unknown field",
    ),
}


@pytest.mark.parametrize("what", FORBIDDEN)
def test_validate_refuses_with_the_field_path(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(contract.ENV_ALLOW_HOST_PATH, raising=False)
    template, line = FORBIDDEN[what]
    code, out, lines = _validate(tmp_path, template, capsys)
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_host_path_only_where_the_operator_allows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    template = FORBIDDEN["hostPath"][0]
    monkeypatch.setenv(contract.ENV_ALLOW_HOST_PATH, "true")
    assert _validate(tmp_path, template, capsys) == (0, "valid", [])
    monkeypatch.setenv(contract.ENV_ALLOW_HOST_PATH, "yes")
    assert _validate(tmp_path, template, capsys)[0] == 2


def test_the_operator_fails_a_host_path_job_unless_it_allows_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CRD cannot know the chart's value: the operator itself refuses such a job.
    j = gan_job()
    j["spec"]["podTemplate"] = FORBIDDEN["hostPath"][0]
    monkeypatch.delenv(contract.ENV_ALLOW_HOST_PATH, raising=False)
    d = reconcile(JobWorld(j).snapshot())
    assert d.status is not None and d.status["phase"] == "Failed"
    said = [c["message"] for c in d.status["conditions"] if c["reason"] == "InvalidSpec"]
    assert said and all(m.startswith(FORBIDDEN["hostPath"][1]) for m in said), said
    monkeypatch.setenv(contract.ENV_ALLOW_HOST_PATH, "true")
    d = reconcile(JobWorld(j).snapshot())
    assert d.status is None or d.status["phase"] != "Failed"
    assert d.create and any(o["kind"] == "Pod" for o in d.create)


def test_reserved_names_are_what_a_worker_has() -> None:
    # Read off the rendered workers: every variable and volume kubegan sets is refused.
    job = decode_job(merge_patch(BASE, {"spec": {"data": {"claimName": "d"}, "podTemplate": {}}}))
    (pod, *_) = [o for o in render_all(job, static_plan(job.spec)) if o["kind"] == "Pod"]
    env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    ours = {n for n in env if not n.startswith(contract.ENV_PREFIX)}
    assert ours <= set(RESERVED_ENV) | set(TUNABLE_ENV)
    assert not set(RESERVED_ENV) & set(TUNABLE_ENV)
    assert {v["name"] for v in pod["spec"]["volumes"]} == set(KUBEGAN_MOUNTS)
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == set(KUBEGAN_MOUNTS.values())


def _trainer_env(spec_patch: dict[str, Any]) -> list[dict[str, Any]]:
    job = decode_job(merge_patch(BASE, {"spec": spec_patch}))
    (pod, *_) = [o for o in render_all(job, static_plan(job.spec)) if o["kind"] == "Pod"]
    return pod["spec"]["containers"][0]["env"]


@pytest.mark.parametrize(
    ("cpu", "threads"), [("500m", "1"), ("1", "1"), ("2500m", "2"), ("4", "4"), ("16", "16")]
)
def test_a_worker_runs_a_thread_per_whole_cpu_it_requests(cpu: str, threads: str) -> None:
    env = _trainer_env({"resources": {"cpu": cpu}})
    assert [e["value"] for e in env if e["name"] == contract.ENV_CPU_THREADS] == [threads]


def test_a_pod_templates_threads_replace_kubegans_and_nothing_else_does() -> None:
    theirs = [{"name": contract.ENV_CPU_THREADS, "value": "3"}, {"name": "TEAM", "value": "gan"}]
    env = _trainer_env({"resources": {"cpu": "4"}, "podTemplate": {"spec": {"env": theirs}}})
    named = [e["name"] for e in env]
    assert named.count(contract.ENV_CPU_THREADS) == 1, named
    assert {"name": contract.ENV_CPU_THREADS, "value": "3"} in env
    assert {"name": "TEAM", "value": "gan"} in env
    assert len(named) == len(set(named)), named


@pytest.mark.parametrize(("framework", "threads"), [("pytorch", "4"), ("tensorflow", "16")])
def test_a_torch_worker_splits_its_threads_between_its_gpu_processes(
    framework: str, threads: str
) -> None:
    """A torch worker runs one process per GPU, a TensorFlow worker one for all of them."""
    env = _trainer_env({"framework": framework, "resources": {"cpu": "16", "gpusPerWorker": 4}})
    assert [e["value"] for e in env if e["name"] == contract.ENV_CPU_THREADS] == [threads]
