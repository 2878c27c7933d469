"""What `kubegan validate` refuses before a cluster, a kubelet or Kueue would (docs/security.md,
"What kubegan refuses"): each class of hostile value, over several values and fields, is one
line per problem naming the field, exit 2, never a traceback, never the value's credentials
or raw control characters."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api import contract
from kubegan_api.reserved import RESERVED_ENV, TUNABLE_ENV, owned_label_key
from kubegan_api.spec import decode_job
from kubegan_api.text import control_problem
from kubegan_api.urls import CREDENTIALS_MESSAGE, endpoint_problems
from kubegan_operator.entry.cli import build_parser, main
from kubegan_operator.manifests.pods import render_all
from kubegan_operator.placement.planner import static_plan
from kubegan_trainer.storage import objstore

from tests.support.cel_cases import merge_patch

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "examples" / "digits-local.yaml").read_text())
WARNING = "kubegan validate: warning: "
# Any C0 or C1 control, DEL: none may reach a terminal from a message.
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _validate(
    tmp_path: Path, patch: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(merge_patch(BASE, patch), sort_keys=False), encoding="utf-8")
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert not RAW_CONTROL.search(err), repr(err)
    return code, [line for line in err.splitlines() if not line.startswith(WARNING)]


def _spec(**fields: Any) -> dict[str, Any]:
    return {"spec": fields}


def _checkpoint(**fields: Any) -> dict[str, Any]:
    return _spec(checkpoint={"uri": "s3://bucket/runs", **fields})


def _data(**fields: Any) -> dict[str, Any]:
    return _spec(
        model={"name": "dcgan"}, data={"source": "files", "uri": "s3://bucket/d", **fields}
    )


def _pod(**fields: Any) -> dict[str, Any]:
    return _spec(podTemplate={"spec": fields})


def _refused_alone(code: int, lines: list[str], field: str) -> str:
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{field}: "), lines
    return lines[0]


# ---- credentials in a URI or endpoint ------------------------------------------------------

SECRETS = ("wJalrXUtnFEMIbPxRfiCY", "hunter2hunter", "p%40ss:w0rd", "AKIAIOSFODNN7EXAMPLE")
URL_FIELDS = {
    "spec.checkpoint.uri": lambda v: _checkpoint(uri=v),
    "spec.checkpoint.endpoint": lambda v: _checkpoint(endpoint=v),
    "spec.data.uri": lambda v: _data(uri=v),
    "spec.data.endpoint": lambda v: _data(endpoint=v),
}


def _with_credentials(field: str, secret: str) -> str:
    if field.endswith(".uri"):
        return f"s3://KEYID:{secret}@bucket/x"
    return f"https://KEYID:{secret}@minio.example:9000"


def _no_part_of(secret: str, text: str) -> None:
    """Not the secret, nor any 4 characters of it in a row."""
    parts = {secret[i : i + 4] for i in range(len(secret) - 3)}
    assert not [p for p in parts if p in text], text


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("field", sorted(URL_FIELDS))
def test_credentials_in_a_url_are_refused_pointing_to_the_secret(
    field: str, secret: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(tmp_path, URL_FIELDS[field](_with_credentials(field, secret)), capsys)
    assert _refused_alone(code, lines, field) == f"{field}: {CREDENTIALS_MESSAGE}"
    _no_part_of(secret, "\n".join(lines))


@pytest.mark.parametrize("command", ["render", "run", "plan"])
def test_no_command_takes_a_url_with_credentials(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = SECRETS[0]
    path = tmp_path / "job.yaml"
    job = merge_patch(BASE, _checkpoint(endpoint=f"https://k:{secret}@minio:9000"))
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("[]", encoding="utf-8")
    extra = ["--nodes", str(nodes)] if command == "plan" else ["--output", str(tmp_path / "o")]
    assert main([command, str(path), *(extra if command != "render" else [])]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == f"spec.checkpoint.endpoint: {CREDENTIALS_MESSAGE}"
    _no_part_of(secret, out + err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "uri", ["s3://user@bucket/x", "gs://a:b@bucket", "az://tok@container/p", "s3://:pw@bucket"]
)
def test_the_trainer_refuses_a_uri_with_credentials_without_repeating_them(uri: str) -> None:
    with pytest.raises(objstore.StoreError) as err:
        objstore.parse_uri(uri, "spec.checkpoint.uri")
    assert str(err.value) == f"spec.checkpoint.uri: {CREDENTIALS_MESSAGE}"


# ---- malformed endpoints --------------------------------------------------------------------

BAD_ENDPOINTS = {
    "http://": "must name a host after the scheme",
    "https://:9000": "must name a host after the scheme",
    "http:///bucket": "must name a host after the scheme",
    "http://minio:0": "the port must be a number from 1 to 65535",
    "http://minio:65536": "the port must be a number from 1 to 65535",
    "http://minio:99999999999": "the port must be a number from 1 to 65535",
    "http://minio:nine": "the port must be a number from 1 to 65535",
    "http://minio:-1": "the port must be a number from 1 to 65535",
    "ftp://minio:21": "must start with http:// or https://",
    "minio:9000": "must start with http:// or https://",
    "file:///etc/passwd": "must start with http:// or https://",
    "http://mi nio:9000": "must not contain spaces or control characters",
    " http://minio": "must not contain spaces or control characters",
    "http://minio\t:9000": "must not contain spaces or control characters",
}
GOOD_ENDPOINTS = (
    "http://minio:9000",
    "https://s3.example.com",
    "http://[::1]:9000/p",
    "http://h:1",
)


@pytest.mark.parametrize("endpoint", sorted(BAD_ENDPOINTS))
def test_a_malformed_endpoint_is_refused_by_validate_and_the_trainer(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(tmp_path, _checkpoint(endpoint=endpoint), capsys)
    line = _refused_alone(code, lines, "spec.checkpoint.endpoint")
    assert line == f"spec.checkpoint.endpoint: {BAD_ENDPOINTS[endpoint]}"
    with pytest.raises(objstore.StoreError) as err:  # a trainer started by hand: the same words
        objstore.check_endpoint(endpoint, objstore.ENV_CHECKPOINT_ENDPOINT)
    assert str(err.value) == f"{objstore.ENV_CHECKPOINT_ENDPOINT}: {BAD_ENDPOINTS[endpoint]}"


@pytest.mark.parametrize("endpoint", GOOD_ENDPOINTS)
def test_a_well_formed_endpoint_is_taken(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, _checkpoint(endpoint=endpoint), capsys) == (0, [])
    assert endpoint_problems(endpoint) == []


# ---- control characters ----------------------------------------------------------------------

CONTROLS = ("\x00", "\x1b[2J", "\x07", "\x7f", "\x85", "\x9b31m", "\r", "\x08")
TEXT_FIELDS = {
    "metadata.name": lambda c: {"metadata": {"name": f"job{c}"}},
    "metadata.namespace": lambda c: {"metadata": {"namespace": f"ns{c}"}},
    "metadata.labels": lambda c: {"metadata": {"labels": {"team": f"a{c}"}}},
    "metadata.annotations": lambda c: {"metadata": {"annotations": {"note": f"a{c}"}}},
    "spec.image": lambda c: _spec(image=f"registry.example/trainer{c}:1"),
    "spec.model.entrypoint": lambda c: _spec(
        model={"name": "custom", "entrypoint": f"lab.models:build{c}"}
    ),
    "spec.data.path": lambda c: _spec(
        model={"name": "dcgan"}, data={"source": "files", "path": f"/data/x{c}"}
    ),
    "spec.checkpoint.uri": lambda c: _checkpoint(uri=f"s3://bucket/x{c}"),
    "spec.checkpoint.endpoint": lambda c: _checkpoint(endpoint=f"http://minio{c}"),
    "spec.podTemplate.metadata.annotations.note": lambda c: _spec(
        podTemplate={"metadata": {"annotations": {"note": f"a{c}"}}}
    ),
    "spec.podTemplate.spec.env[0].value": lambda c: _pod(env=[{"name": "A", "value": f"a{c}"}]),
    "spec.podTemplate.spec.volumes[0].csi": lambda c: _pod(
        volumes=[{"name": "v", "csi": {"driver": "d", "volumeAttributes": {"b": f"a{c}"}}}]
    ),
    "spec.podTemplate.spec.securityContext.seccompProfile.localhostProfile": lambda c: _pod(
        securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": f"p{c}"}}
    ),
}


@pytest.mark.parametrize("control", CONTROLS, ids=ascii)
@pytest.mark.parametrize("field", sorted(TEXT_FIELDS))
def test_control_characters_are_refused_naming_the_field_never_printed(
    field: str, control: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(tmp_path, TEXT_FIELDS[field](control), capsys)
    assert code == 2 and lines, lines
    assert all(line.startswith(field) for line in lines), lines


@pytest.mark.parametrize("text", ["line one\nline two", "a\tb", "x" * 100])
def test_annotation_and_env_values_keep_tabs_and_newlines(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = _spec(
        podTemplate={
            "metadata": {"annotations": {"note": text}},
            "spec": {"env": [{"name": "PEM", "value": text}]},
        }
    )
    assert _validate(tmp_path, patch, capsys) == (0, [])


def test_a_control_character_is_named_escaped() -> None:
    assert control_problem("ab\x1b[2J") == (
        "holds a control character (\\x1b at position 2); names, paths, URIs and values must "
        "be printable text"
    )
    assert control_problem("a\nb", multiline=True) is None
    assert control_problem("a\nb") is not None


# ---- what the apiserver, the kubelet or Kueue would refuse at pod creation -------------------


@pytest.mark.parametrize(
    ("annotations", "ok"),
    [
        ({f"a{i}": "x" * 60_000 for i in range(3)}, False),
        ({"big": "x" * 65_536, "big2": "y" * 65_536}, False),
        ({f"a{i}": "x" * 1_900 for i in range(64)}, True),
        ({"one": "x" * 65_000}, True),
    ],
    ids=["3x60k", "2x64k", "64x1.9k", "1x65k"],
)
def test_the_templates_annotations_fit_what_the_apiserver_takes_for_a_pod(
    annotations: dict[str, str], ok: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = _spec(podTemplate={"metadata": {"annotations": annotations}})
    code, lines = _validate(tmp_path, patch, capsys)
    if ok:
        assert (code, lines) == (0, [])
    else:
        line = _refused_alone(code, lines, "spec.podTemplate.metadata.annotations")
        assert "bytes in all" in line and "256 KiB" in line


@pytest.mark.parametrize(
    ("profile", "ok"),
    [
        ("../../etc/profile.json", False),
        ("/var/lib/kubelet/seccomp/p.json", False),
        ("profiles/../../x.json", False),
        ("./p.json", False),
        ("..", False),
        ("profiles//p.json", False),
        ("profiles/audit.json", True),
        ("p.json", True),
        ("my-team/v2/strict.json", True),
    ],
)
def test_a_seccomp_profile_stays_in_the_kubelets_directory(
    profile: str, ok: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = _pod(
        securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": profile}}
    )
    code, lines = _validate(tmp_path, patch, capsys)
    if ok:
        assert (code, lines) == (0, [])
    else:
        field = "spec.podTemplate.spec.securityContext.seccompProfile.localhostProfile"
        assert "relative" in _refused_alone(code, lines, field)


@pytest.mark.parametrize("label", [contract.KUEUE_QUEUE_LABEL, contract.KUEUE_PRIORITY_CLASS_LABEL])
@pytest.mark.parametrize(
    ("value", "ok"),
    [("Team_A", False), ("team_a", False), ("Q", False), ("a..b", False), ("team-a", True),
     ("q.1", True), ("a" * 63, True)],
)  # fmt: skip
def test_kueue_names_in_labels_are_object_names(
    label: str, value: str, ok: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(tmp_path, {"metadata": {"labels": {label: value}}}, capsys)
    if ok:
        assert (code, lines) == (0, [])
    else:
        assert "not a Kueue object name" in _refused_alone(code, lines, "metadata.labels")


NOT_FINITE = (".inf", "-.inf", ".nan", ".NaN", "+.Inf")
NUMBER_FIELDS = {
    "spec.podTemplate.spec.volumes[0].emptyDir": "{spec: {podTemplate: {spec: {volumes: "
    "[{name: s, emptyDir: {sizeLimit: V}}]}}}}",
    "spec.podTemplate.spec.volumes[0].csi": "{spec: {podTemplate: {spec: {volumes: "
    "[{name: s, csi: {driver: d, volumeAttributes: {size: V}}}]}}}}",
    "spec.resources.cpu": "{spec: {resources: {cpu: V}}}",
    "spec.resources.memory": "{spec: {resources: {memory: V}}}",
    "spec.cost.acceleratorHourlyPrice": "{spec: {cost: {acceleratorHourlyPrice: V}}}",
    "spec.training.generator.learningRate": "{spec: {training: {generator: {learningRate: V}}}}",
    "spec.checkpoint.intervalMinutes": "{spec: {checkpoint: {intervalMinutes: V}}}",
    "spec.model.options": "{spec: {model: {name: custom, entrypoint: 'a.b:c', options: {x: V}}}}",
}


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("field", sorted(NUMBER_FIELDS))
def test_numbers_that_are_not_finite_are_refused_never_rendered_as_null(
    field: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = yaml.safe_load(NUMBER_FIELDS[field].replace("V", value))
    code, lines = _validate(tmp_path, patch, capsys)
    assert code == 2 and lines and all(line.startswith(field) for line in lines), lines


# ---- priority classes ------------------------------------------------------------------------

SYSTEM_CLASSES = ("system-node-critical", "system-cluster-critical", "system-anything")


@pytest.mark.parametrize("name", SYSTEM_CLASSES)
def test_a_system_priority_class_is_refused_unless_the_operator_allows_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(contract.ENV_ALLOWED_PRIORITY_CLASSES, raising=False)
    code, lines = _validate(tmp_path, _pod(priorityClassName=name), capsys)
    line = _refused_alone(code, lines, "spec.podTemplate.spec.priorityClassName")
    assert "allowedPriorityClasses" in line
    monkeypatch.setenv(contract.ENV_ALLOWED_PRIORITY_CLASSES, f"other,{name}")
    assert _validate(tmp_path, _pod(priorityClassName=name), capsys) == (0, [])


@pytest.mark.parametrize("name", ["batch-high", "systemic", "team-system-low"])
def test_other_priority_classes_need_no_allowing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(contract.ENV_ALLOWED_PRIORITY_CLASSES, raising=False)
    assert _validate(tmp_path, _pod(priorityClassName=name), capsys) == (0, [])


@pytest.mark.parametrize("flag", ["System-Node-Critical", "a b", "", "x" * 254])
def test_the_operator_refuses_a_malformed_allowed_priority_class(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["operator", f"--allow-priority-class={flag}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--allow-priority-class" in err and "PriorityClass name" in err


# ---- operator flags naming keys Kubernetes, Kueue or kubegan own -----------------------------

OWNED_KEYS = (
    contract.KUEUE_QUEUE_LABEL,
    contract.KUEUE_PRIORITY_CLASS_LABEL,
    "kubegan.io/job",
    "sub.kubegan.io/x",
    "kubernetes.io/hostname",
    "node.kubernetes.io/instance-type",
    "k8s.io/x",
    "node-role.k8s.io/y",
)


@pytest.mark.parametrize("key", OWNED_KEYS)
def test_a_worker_identity_label_with_an_owned_key_is_refused_at_start(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["operator", "--worker-identity=ml=sa", f"--worker-identity-label=ml={key}=v"]
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--worker-identity-label" in err and "keep for themselves" in err


@pytest.mark.parametrize(
    "key", ["azure.workload.identity/use", "app.kubernetes.io/name", "team", "example.com/k8s.io"]
)
def test_other_worker_identity_labels_are_taken(key: str) -> None:
    assert owned_label_key(key) is None
    args = build_parser().parse_args(
        ["operator", "--worker-identity=ml=sa", f"--worker-identity-label=ml={key}=true"]
    )
    assert args.worker_identity_label == [("ml", key, "true")]


# ---- podTemplate env cannot override what kubegan sets ---------------------------------------


def _jobs() -> list[dict[str, Any]]:
    """A job of each kind of worker (pytorch, tensorflow, a TPU slice), with bucket
    credentials from a Secret: every variable kubegan can set is set on one of them."""
    bucket = {"uri": "s3://bucket/ck", "credentialsSecret": "store", "claimName": None}
    tf = {"framework": "tensorflow", "model": {"name": "dcgan"}, "checkpoint": bucket}
    tpu = yaml.safe_load((ROOT / "examples" / "acgan-gke-tpu-v5e.yaml").read_text())
    return [
        merge_patch(BASE, _spec(checkpoint=bucket)),
        merge_patch(BASE, {"spec": tf}),
        merge_patch(tpu, _spec(checkpoint=bucket)),
    ]


def test_every_variable_a_rendered_worker_gets_is_reserved_or_a_tunable_default() -> None:
    seen: set[str] = set()
    for obj in _jobs():
        job = decode_job(obj)
        for pod in (o for o in render_all(job, static_plan(job.spec)) if o["kind"] == "Pod"):
            seen |= {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    kinds = {contract.ENV_TF_CONFIG, contract.ENV_MASTER_ADDR, contract.ENV_TPU_WORKER_ID}
    assert {*kinds, *contract.BUCKET_CREDENTIAL_KEYS} <= seen
    assert set(TUNABLE_ENV) <= seen
    known = {*RESERVED_ENV, *TUNABLE_ENV}
    loose = {n for n in seen if n not in known and not n.startswith(contract.ENV_PREFIX)}
    assert loose == set()


@pytest.mark.parametrize(
    "name",
    [*contract.BUCKET_CREDENTIAL_KEYS, "HOME", contract.ENV_TF_CONFIG,
     contract.ENV_CHECKPOINT_URI],
)  # fmt: skip
@pytest.mark.parametrize("how", ["value", "valueFrom"])
def test_the_template_cannot_set_a_variable_kubegan_sets(
    name: str, how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = {"secretKeyRef": {"name": "mine", "key": "k"}}
    var = {"name": name, how: "literal" if how == "value" else source}
    patch = merge_patch(_checkpoint(credentialsSecret="store"), _pod(env=[var]))
    code, lines = _validate(tmp_path, patch, capsys)
    line = _refused_alone(code, lines, "spec.podTemplate.spec.env[0].name")
    assert "credentialsSecret" in line and "literal" not in line
