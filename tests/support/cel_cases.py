"""Every CEL rule of the CRD with a job it refuses and a job it accepts.

One table, `CASES`: a rule is named by where the problem is reported and the rule's message
(`spec.resources`, "exactly one of gpus, workers or tpu must be set"), and each example is a
whole GANTrainingJob: an example file of examples/ with a small JSON merge patch (RFC 7386:
null removes a field, a list replaces the list). The unit tier checks that the table names
every rule of the generated CRD, and that `kubegan validate` refuses and accepts the same
jobs with the same paths (tests/unit/test_cel_cases.py); the cluster tier checks that the
real apiserver does too (tests/cluster/test_cel_agreement.py).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from kubegan_api.contract import (
    CHECKPOINT_ROOT,
    ENV_JOB_NAME,
    ENV_MASTER_ADDR,
    JOB_NAME_LABEL,
    KUEUE_QUEUE_LABEL,
    PLANNED_NODE_ANNOTATION,
    TF_WORKER_PORT,
    TORCH_MASTER_PORT,
    TPU_WORKER_PORT,
)
from kubegan_api.model_options import unknown_reason
from kubegan_api.podtemplate import ENV_RULES, MOUNT_RULES, VOLUME_RULES
from kubegan_api.urls import BUCKET_OR_PATH_RULES, BUCKET_URI_RULES, ENDPOINT_RULES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

GAN3D = "gan3d-gke-v100-spot.yaml"  # tensorflow, gan3d, synthetic, gpus: 32 of a v100 pool
DIGITS = "digits-local.yaml"  # pytorch, acgan, digits, workers: 2, gpusPerWorker: 0
TPU = "acgan-gke-tpu-v5e.yaml"  # tensorflow, strategy tpu, acgan, a 4x4 v5e slice

Patch = dict[str, Any]
RuleId = tuple[str, str]  # (path with [] for list items, message)


@dataclass(frozen=True)
class CelCase:
    """One rule: `field` is where validate and the apiserver name the problem (with the list
    index a refused example has), `message` the rule's. A refused example breaks this rule,
    and the rules in `also` (some rules cannot be broken alone), and nothing else."""

    field: str
    message: str
    refused: tuple[Patch, ...]
    accepted: tuple[Patch, ...]
    base: str = GAN3D
    also: tuple[tuple[str, str], ...] = ()
    same_words: bool = True  # validate gives the rule's message word for word

    @property
    def rule(self) -> RuleId:
        return rule_id(self.field, self.message)


def rule_id(field: str, message: str) -> RuleId:
    return re.sub(r"\[\d+\]", "[]", field), message


def _spec(**fields: Any) -> Patch:
    return {"spec": fields}


def _model(name: str, **options: Any) -> Patch:
    """spec.model for `name` with `options`, under pytorch (which runs every model)."""
    model: dict[str, Any] = {"name": name, "options": options}
    if name == "custom":
        model["entrypoint"] = "mylab.models:build"
    return _spec(framework="pytorch", model=model)


def _unknown_option(model: str, option: str, value: Any, reader: str) -> CelCase:
    """`model` does not read `option`; `reader` does."""
    return CelCase(
        f"spec.model.options.{option}",
        unknown_reason(model),
        refused=(_model(model, **{option: value}),),
        accepted=(_model(reader, **{option: value}), _model(model)),
    )


def _toleration(**fields: Any) -> Patch:
    return _spec(placement={"tolerations": [{"key": "example.com/pool", **fields}]})


def _pod(**fields: Any) -> Patch:
    """spec.podTemplate.spec with `fields`."""
    return _spec(podTemplate={"spec": fields})


def _meta(**fields: Any) -> Patch:
    return _spec(podTemplate={"metadata": fields})


def _env(**var: Any) -> Patch:
    return _pod(env=[var])


def _volume(**volume: Any) -> Patch:
    return _pod(volumes=[volume])


def _mount(path: str) -> Patch:
    return _pod(
        volumes=[{"name": "gcs", "csi": _GCS}], volumeMounts=[{"name": "gcs", "mountPath": path}]
    )


def _security(**fields: Any) -> Patch:
    return _pod(securityContext=fields)


_GCS = {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}}
_KEYS = (
    "keys under kubegan.io/ and kueue.x-k8s.io/ are kubegan's and Kueue's own (a job joins "
    "a Kueue queue by its own metadata.labels)"
)
_WIDENS = "would widen what a worker may do"
_SECRET = {"secretKeyRef": {"name": "proxy", "key": "url"}}
_POD = "spec.podTemplate.spec"

# spec.podTemplate: kubegan's own names and anything that widens a worker.
POD_TEMPLATE_CASES: tuple[CelCase, ...] = (
    CelCase(
        "spec.podTemplate.metadata.labels",
        _KEYS,
        refused=(
            _meta(labels={JOB_NAME_LABEL: "x"}),
            _meta(labels={KUEUE_QUEUE_LABEL: "q"}),
        ),
        accepted=(_meta(labels={"team": "gan", "example.com/cost-center": "ml"}),),
    ),
    CelCase(
        "spec.podTemplate.metadata.annotations",
        _KEYS,
        refused=(_meta(annotations={PLANNED_NODE_ANNOTATION: "node-a"}),),
        accepted=(_meta(annotations={"gke-gcsfuse/volumes": "true"}),),
    ),
    CelCase(
        "spec.podTemplate.metadata.labels",
        "keys must be Kubernetes label keys",
        refused=(_meta(labels={"-team": "a"}),),
        accepted=(_meta(labels={"example.com/team": "a"}),),
        same_words=False,
    ),
    CelCase(
        "spec.podTemplate.metadata.annotations",
        "keys must be Kubernetes label keys",
        refused=(_meta(annotations={"a/b/c": "x"}),),
        accepted=(_meta(annotations={"example.com/note": "x"}),),
        same_words=False,
    ),
    CelCase(
        f"{_POD}.env[0].name",
        ENV_RULES[0].message,
        refused=(
            _env(name=ENV_JOB_NAME, value="other"),
            _env(name="KUBEGAN_ANYTHING", value="1"),
            _env(name=ENV_MASTER_ADDR, value="10.0.0.1"),
            _env(name="HOME", value="/mnt"),
        ),
        accepted=(
            _env(name="NCCL_DEBUG", value="INFO"),
            _env(name="HTTPS_PROXY", valueFrom=_SECRET),
        ),
    ),
    CelCase(
        f"{_POD}.env[0]",
        "value and valueFrom cannot both be set",
        refused=(_env(name="A", value="x", valueFrom=_SECRET),),
        accepted=(_env(name="A", value="x"), _env(name="A", valueFrom=_SECRET)),
    ),
    CelCase(
        f"{_POD}.env[0].valueFrom",
        "exactly one of secretKeyRef, configMapKeyRef or fieldRef must be set",
        refused=(
            _env(name="A", valueFrom={}),
            _env(name="A", valueFrom={**_SECRET, "fieldRef": {"fieldPath": "metadata.name"}}),
        ),
        accepted=(
            _env(name="A", valueFrom={"fieldRef": {"fieldPath": "status.hostIP"}}),
            _env(name="A", valueFrom={"configMapKeyRef": {"name": "nccl", "key": "ifname"}}),
        ),
    ),
    CelCase(
        f"{_POD}.volumes[0]",
        VOLUME_RULES[0].message,
        refused=(_volume(name="x"), _volume(name="x", emptyDir={}, secret={"secretName": "s"})),
        accepted=(_volume(name="x", secret={"secretName": "s"}), _volume(name="x", csi=_GCS)),
    ),
    CelCase(
        f"{_POD}.volumes[0].name",
        VOLUME_RULES[1].message,
        refused=(_volume(name="checkpoints", emptyDir={}), _volume(name="config", emptyDir={})),
        accepted=(_volume(name="scratch", emptyDir={}),),
    ),
    CelCase(
        f"{_POD}.volumes",
        "volume names must be unique",
        refused=(_pod(volumes=[{"name": "a", "emptyDir": {}}, {"name": "a", "csi": _GCS}]),),
        accepted=(_pod(volumes=[{"name": "a", "emptyDir": {}}, {"name": "b", "csi": _GCS}]),),
    ),
    CelCase(
        f"{_POD}.volumeMounts",
        "every volumeMount names one of spec.podTemplate.spec.volumes",
        refused=(_pod(volumeMounts=[{"name": "gcs", "mountPath": "/mnt/gcs"}]),),
        accepted=(_mount("/mnt/gcs"),),
    ),
    CelCase(
        f"{_POD}.volumeMounts[0].mountPath",
        MOUNT_RULES[0].message,
        refused=(_mount(CHECKPOINT_ROOT), _mount(f"{CHECKPOINT_ROOT}/gcs"), _mount("/tmp")),
        accepted=(_mount("/checkpoints2"), _mount("/mnt/gcs")),
    ),
    CelCase(
        f"{_POD}.securityContext.seccompProfile.localhostProfile",
        "localhostProfile is set with type Localhost, and only then",
        refused=(
            _security(seccompProfile={"type": "Localhost"}),
            _security(seccompProfile={"type": "RuntimeDefault", "localhostProfile": "p.json"}),
        ),
        accepted=(_security(seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),),
    ),
    CelCase(
        f"{_POD}.securityContext.capabilities.add",
        f"capabilities can only be dropped: adding one {_WIDENS}",
        refused=(_security(capabilities={"add": ["NET_ADMIN"]}),),
        accepted=(
            _security(capabilities={"drop": ["NET_RAW"]}),
            _security(capabilities={"add": []}),
        ),
    ),
    *(
        CelCase(
            f"{_POD}.securityContext.{field}",
            f"{field} can only be {ok}: {bad} {_WIDENS}",
            refused=(_security(**{field: bad == "true"}),),
            accepted=(_security(**{field: ok == "true"}), _security(runAsUser=2000)),
        )
        for field, ok, bad in (
            ("privileged", "false", "true"),
            ("allowPrivilegeEscalation", "false", "true"),
            ("runAsNonRoot", "true", "false"),
            ("readOnlyRootFilesystem", "true", "false"),
        )
    ),
)


# GAN3D's resources turned into a TPU slice.
# spec.{checkpoint,data}.{uri,endpoint}: the rules on the string itself (kubegan_api.urls),
# in the order of the rule tables, each with values that break it alone and values it takes.
_URI_VALUES = (
    (("s3://KEY:SECRET@bucket/x", "gs://user@bucket"), ("s3://bucket/x", "gs://bucket/a@b")),
    (("s3://bucket/a b", "s3://bucket/x\x1b[2J"), ("s3://bucket/a-b",)),
    (("http://bucket/x", "S3://bucket"), ("az://container/x",)),
    (("s3://ab/x", "s3://Bucket/x"), ("s3://abc/x",)),
    (
        ("s3://bucket//x", "s3://bucket/a/../b", "s3://bucket/a//"),
        ("s3://bucket/a/", "s3://b-1/..a"),
    ),
)
_ENDPOINT_VALUES = (
    (("https://KEY:SECRET@minio:9000", "http://k@minio"), ("https://minio:9000",)),
    (("http://minio :9000", "http://minio\x7f"), ("http://minio:9000",)),
    (("ftp://minio", "minio:9000"), ("http://minio",)),
    (("http://", "http://:9000"), ("http://10.0.0.1:9000",)),
    (("http://minio:0", "http://minio:65536", "http://minio:x"), ("http://[::1]:80/p",)),
)


def _bucket(section: str, field: str, value: str) -> Patch:
    """spec.<section>.<field> = value, in a job where nothing else is wrong with it."""
    fields = {"uri": "s3://bucket/x", field: value}
    if section == "checkpoint":
        return _spec(checkpoint={**fields, "claimName": None})
    return _spec(data={**fields, "source": "files"})


URL_CASES: tuple[CelCase, ...] = tuple(
    CelCase(
        f"spec.{section}.{field}",
        rule.message,
        refused=tuple(_bucket(section, field, v) for v in refused),
        accepted=tuple(_bucket(section, field, v) for v in accepted),
    )
    for section in ("checkpoint", "data")
    for field, rules, values in (
        ("uri", BUCKET_URI_RULES, _URI_VALUES),
        ("endpoint", ENDPOINT_RULES, _ENDPOINT_VALUES),
    )
    for rule, (refused, accepted) in zip(rules, values, strict=True)
)

# spec.tracking.mlflow.uri (the endpoint rules) and spec.quality.featureWeights (a bucket URI
# or a path): each rule with values that break it alone and values it takes.
_WEIGHTS_VALUES = (
    (("s3://KEY:SECRET@bucket/w.safetensors",), ("s3://bucket/w.safetensors", "/w@1/x")),
    (("/data/my weights.safetensors", "/data/x\x1b[2J"), ("/data/inception.safetensors",)),
    (("https://host/w.safetensors", "file:///w"), ("gs://bucket/w.safetensors", "w.pth")),
    (("s3://ab/w",), ("s3://abc/w",)),
    (("s3://bucket//w", "gs://bucket/a/../w"), ("az://container/a/w",)),
)
TRACKING_URL_CASES: tuple[CelCase, ...] = tuple(
    CelCase(
        field,
        rule.message,
        refused=tuple(patch(v) for v in refused),
        accepted=tuple(patch(v) for v in accepted),
    )
    for field, rules, values, patch in (
        (
            "spec.tracking.mlflow.uri",
            ENDPOINT_RULES,
            _ENDPOINT_VALUES,
            lambda v: _spec(tracking={"mlflow": {"uri": v}}),
        ),
        (
            "spec.quality.featureWeights",
            BUCKET_OR_PATH_RULES,
            _WEIGHTS_VALUES,
            lambda v: _spec(quality={"featureWeights": v}),
        ),
    )
    for rule, (refused, accepted) in zip(rules, values, strict=True)
)

_SLICE = {
    "gpus": None,
    "accelerator": None,
    "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
}


# spec.data.resize/crop (kubegan_api.image_frame): on the digits job, its square imageSize
# removed (the frame gives the shape), reading a folder of images.
_SHAPE = {"height": 24, "width": 40}
_FILES = {"source": "files", "path": "/data/images"}


def _framed(**data: Any) -> Patch:
    return _spec(model={"options": {"imageSize": None}}, data=data)


FRAME_CASES: tuple[CelCase, ...] = (
    *(
        CelCase(
            f"spec.data.{field}",
            f"{field} is only for data source files",
            refused=(_framed(**{field: _SHAPE}),),
            accepted=(_framed(**_FILES, **{field: _SHAPE}),),
            base=DIGITS,
        )
        for field in ("resize", "crop")
    ),
    *(
        CelCase(
            f"spec.data.{field}",
            f"{field} is for images; gan3d trains on 51x51x25 showers",
            refused=(_spec(data={**_FILES, field: _SHAPE}),),
            accepted=(_spec(data={**_FILES, "path": "/data/showers.h5"}),),
        )
        for field in ("resize", "crop")
    ),
    *(
        CelCase(
            f"spec.data.{field}",
            "height and width must be even (the networks halve them at least once)",
            refused=(_framed(**_FILES, **{field: {"height": 24, "width": 41}}),),
            accepted=(_framed(**_FILES, **{field: {"height": 24, "width": 42}}),),
            base=DIGITS,
        )
        for field in ("resize", "crop")
    ),
    CelCase(
        "spec.data.crop",
        "crop must fit inside resize (height and width at most resize's)",
        refused=(_framed(**_FILES, resize=_SHAPE, crop={"height": 24, "width": 42}),),
        accepted=(_framed(**_FILES, resize=_SHAPE, crop={"height": 16, "width": 40}),),
        base=DIGITS,
    ),
)

CASES: tuple[CelCase, ...] = (
    # ---- the object ---------------------------------------------------------------------------
    CelCase(
        "metadata.name",
        "metadata.name must be a DNS-1035 label of at most 52 characters so that "
        "'<name>-worker-<index>' is a valid pod name",
        # Both are DNS-1123 subdomains, the apiserver's own rule for every object's name.
        refused=({"metadata": {"name": "9lives"}}, {"metadata": {"name": "a" * 53}}),
        accepted=({"metadata": {"name": "a" * 52}}, {"metadata": {"name": "x-9"}}),
        same_words=False,
    ),
    # ---- spec.resources ------------------------------------------------------------------------
    CelCase(
        "spec.resources",
        "exactly one of gpus, workers or tpu must be set",
        refused=(
            _spec(resources={"workers": 4, "gpusPerWorker": 8}),
            _spec(resources={"gpus": None, "accelerator": None}),
        ),
        accepted=(_spec(resources={"gpus": None, "workers": 4, "gpusPerWorker": 8}), {}),
    ),
    CelCase(
        "spec.resources.gpusPerWorker",
        "gpusPerWorker is only valid together with workers",
        refused=(_spec(resources={"gpusPerWorker": 8}),),
        accepted=(_spec(resources={"gpus": None, "workers": 4, "gpusPerWorker": 8}),),
    ),
    CelCase(
        "spec.resources.gpusPerWorker",
        "gpusPerWorker is required with workers (0 for CPU-only workers)",
        refused=(_spec(resources={"gpus": None, "workers": 4}),),
        accepted=(
            _spec(resources={"gpus": None, "workers": 4, "gpusPerWorker": 0, "accelerator": None}),
        ),
    ),
    CelCase(
        "spec.resources.accelerator",
        "accelerator selects GPUs and cannot be combined with tpu or gpusPerWorker 0",
        refused=(
            _spec(resources={"gpus": None, "workers": 2, "gpusPerWorker": 0}),
            _spec(resources={**_SLICE, "accelerator": "nvidia-tesla-v100"}),
        ),
        accepted=({}, _spec(resources={"gpus": None, "workers": 2, "gpusPerWorker": 1})),
    ),
    CelCase(
        "spec.resources.tpu",
        "tpu requires framework tensorflow",
        refused=(_spec(framework="pytorch", strategy="auto"),),
        accepted=({}, _spec(strategy="auto")),
        base=TPU,
    ),
    CelCase(
        "spec.resources.tpu.topology",
        "a slice of at most 4000 chips",
        refused=(
            _spec(resources={"tpu": {"topology": "64x64"}}),
            _spec(resources={"tpu": {"topology": "16x16x16"}}),
        ),
        accepted=(
            _spec(resources={"tpu": {"topology": "16x16"}}),
            _spec(resources={"tpu": {"topology": "8x8x8"}}),
        ),
        base=TPU,
    ),
    # ---- spec.resources.elastic ----------------------------------------------------------------
    CelCase(
        "spec.resources.elastic",
        "elastic is not for tpu: a slice is one failure unit",
        refused=(
            _spec(resources={"elastic": {}}),
            _spec(resources={"elastic": {"minWorkers": 1, "maxWorkers": 2, "minGpus": 1}}),
        ),
        accepted=({},),
        base=TPU,
    ),
    CelCase(
        "spec.resources.elastic.minWorkers",
        "minWorkers and maxWorkers are only valid together with workers",
        refused=(_spec(resources={"elastic": {"minGpus": 8, "maxWorkers": 4}}),),
        accepted=(_spec(resources={"elastic": {"minGpus": 8}}),),
    ),
    CelCase(
        "spec.resources.elastic.minWorkers",
        "elastic with workers needs minWorkers",
        refused=(_spec(resources={"elastic": {"maxWorkers": 4}}),),
        accepted=(
            _spec(resources={"elastic": {"minWorkers": 1}}),
            _spec(resources={"elastic": {"minWorkers": 1, "maxWorkers": 4}}),
        ),
        base=DIGITS,
    ),
    CelCase(
        "spec.resources.elastic",
        "elastic needs minWorkers <= workers <= maxWorkers",
        refused=(
            _spec(resources={"elastic": {"minWorkers": 3}}),
            _spec(resources={"elastic": {"minWorkers": 1, "maxWorkers": 1}}),
            _spec(resources={"elastic": {"minWorkers": 2, "maxWorkers": 1}}),
        ),
        accepted=(_spec(resources={"elastic": {"minWorkers": 2, "maxWorkers": 2}}),),
        base=DIGITS,
    ),
    CelCase(
        "spec.resources.elastic.minGpus",
        "minGpus is only valid together with gpus",
        refused=(_spec(resources={"elastic": {"minWorkers": 1, "minGpus": 1}}),),
        accepted=(_spec(resources={"elastic": {"minWorkers": 1}}),),
        base=DIGITS,
    ),
    CelCase(
        "spec.resources.elastic.minGpus",
        "elastic with gpus needs minGpus",
        refused=(_spec(resources={"elastic": {}}),),
        accepted=(_spec(resources={"elastic": {"minGpus": 32}}),),
    ),
    CelCase(
        "spec.resources.elastic.minGpus",
        "minGpus must be at most gpus",
        refused=(_spec(resources={"elastic": {"minGpus": 33}}),),
        accepted=(_spec(resources={"elastic": {"minGpus": 1}}),),
    ),
    # ---- spec.strategy -------------------------------------------------------------------------
    CelCase(
        "spec.strategy",
        "strategy tpu requires resources.tpu",
        refused=(_spec(strategy="tpu"),),
        accepted=(_spec(strategy="tpu", resources=_SLICE),),
    ),
    CelCase(
        "spec.strategy",
        "resources.tpu requires strategy tpu or auto",
        refused=(_spec(strategy="multi-worker"), _spec(strategy="mirrored")),
        accepted=(_spec(strategy="auto"), _spec(strategy="tpu")),
        base=TPU,
    ),
    CelCase(
        "spec.strategy",
        "strategy tpu requires framework tensorflow",
        # Never alone: without resources.tpu the rule above breaks too, with it the tpu one.
        refused=(_spec(strategy="tpu", framework="pytorch"),),
        accepted=(_spec(strategy="tpu", resources=_SLICE),),
        also=(("spec.strategy", "strategy tpu requires resources.tpu"),),
    ),
    CelCase(
        "spec.strategy",
        "strategy mirrored runs one worker; use multi-worker or auto for several",
        refused=(_spec(strategy="mirrored"),),
        accepted=(
            _spec(strategy="mirrored", resources={"workers": 1}),
            _spec(strategy="multi-worker"),
        ),
        base=DIGITS,
    ),
    # ---- spec.training, spec.model, spec.data, spec.monitoring --------------------------------
    CelCase(
        "spec.checkpoint.uri",
        "claimName and uri cannot both be set: checkpoints go to a volume or to a bucket",
        refused=(_spec(checkpoint={"claimName": "ckpts", "uri": "s3://bucket/job"}),),
        accepted=(
            _spec(checkpoint={"claimName": None, "uri": "gs://bucket/job"}),
            _spec(checkpoint={"claimName": "ckpts", "uri": ""}),
        ),
    ),
    CelCase(
        "spec.checkpoint.credentialsSecret",
        "credentialsSecret is only for a bucket (checkpoint.uri)",
        refused=(_spec(checkpoint={"credentialsSecret": "bucket-keys"}),),
        accepted=(
            _spec(
                checkpoint={
                    "claimName": None,
                    "uri": "s3://bucket/p",
                    "credentialsSecret": "bucket-keys",
                }
            ),
        ),
    ),
    CelCase(
        "spec.checkpoint.endpoint",
        "endpoint is only for s3:// URIs",
        refused=(
            _spec(
                checkpoint={"claimName": None, "uri": "gs://bucket/p", "endpoint": "http://x:9000"}
            ),
        ),
        accepted=(
            _spec(
                checkpoint={"claimName": None, "uri": "s3://bucket/p", "endpoint": "http://x:9000"}
            ),
        ),
    ),
    CelCase(
        "spec.training.zero",
        "zero requires framework pytorch",
        refused=(_spec(training={"zero": True}),),
        accepted=(_spec(framework="pytorch", training={"zero": True}),),
    ),
    *(
        case
        for net in ("generator", "discriminator")
        for case in (
            CelCase(
                f"spec.training.{net}.weightDecay",
                "weightDecay is only for optimizer adamw (decoupled weight decay)",
                refused=(
                    _spec(training={net: {"weightDecay": 0.01}}),
                    _spec(training={net: {"optimizer": "adam", "weightDecay": 1}}),
                ),
                accepted=(
                    _spec(training={net: {"optimizer": "adamw", "weightDecay": 0.01}}),
                    _spec(training={net: {"optimizer": "adam", "weightDecay": 0}}),
                ),
            ),
            CelCase(
                f"spec.training.{net}.warmupSteps",
                "warmupSteps is only for schedule linear-warmup or cosine",
                refused=(_spec(training={net: {"warmupSteps": 100}}),),
                accepted=(
                    _spec(training={net: {"schedule": "cosine", "warmupSteps": 100}}),
                    _spec(training={net: {"schedule": "cosine"}}),
                ),
            ),
            CelCase(
                f"spec.training.{net}.warmupSteps",
                "schedule linear-warmup needs warmupSteps of at least 1",
                refused=(_spec(training={net: {"schedule": "linear-warmup"}}),),
                accepted=(_spec(training={net: {"schedule": "linear-warmup", "warmupSteps": 1}}),),
            ),
        )
    ),
    CelCase(
        "spec.training.augment",
        "augment transforms images; gan3d's showers are energies whose place and sum are the "
        "physics",
        refused=(_spec(training={"augment": {}}), _spec(training={"augment": {"policy": "color"}})),
        accepted=(
            _spec(model={"name": "dcgan"}, training={"augment": {"policy": "color,cutout"}}),
            _spec(training={"ema": {"halfLifeKimg": 2}, "r1": {"gamma": 1}}),
        ),
    ),
    CelCase(
        "spec.model.name",
        "pix2pix is only available with framework pytorch",
        refused=(_spec(model={"name": "pix2pix"}),),
        accepted=(
            _spec(framework="pytorch", model={"name": "pix2pix"}),
            _spec(model={"name": "dcgan"}),
        ),
    ),
    CelCase(
        "spec.model.entrypoint",
        "entrypoint is required for model custom",
        refused=(_spec(model={"name": "custom"}),),
        accepted=(_spec(model={"name": "custom", "entrypoint": "mylab.models:build"}),),
    ),
    CelCase(
        "spec.model.entrypoint",
        "entrypoint is only used by model custom",
        refused=(_spec(model={"entrypoint": "mylab.models:build"}),),
        accepted=(_spec(model={"name": "custom", "entrypoint": "mylab.models:build"}),),
    ),
    CelCase(
        "spec.data.path",
        "path or uri is required for data source files",
        refused=(_spec(data={"source": "files"}),),
        accepted=(
            _spec(data={"source": "files", "path": "/data/showers.h5"}),
            _spec(data={"source": "files", "uri": "s3://bucket/showers"}),
        ),
    ),
    CelCase(
        "spec.data.uri",
        "path and uri cannot both be set: data is read from a volume or from a bucket",
        refused=(
            _spec(data={"source": "files", "path": "/data/a.h5", "uri": "gs://bucket/showers"}),
        ),
        accepted=(_spec(data={"source": "files", "uri": "gs://bucket/showers"}),),
    ),
    CelCase(
        "spec.data.uri",
        "uri is only for data source files",
        refused=(_spec(data={"source": "synthetic", "uri": "az://data/showers"}),),
        accepted=(_spec(data={"source": "files", "uri": "az://data/showers"}),),
    ),
    CelCase(
        "spec.data.claimName",
        "claimName mounts the volume of a path; a uri is read from the bucket",
        refused=(_spec(data={"source": "files", "uri": "s3://bucket/d", "claimName": "data"}),),
        accepted=(_spec(data={"source": "files", "path": "/data/d", "claimName": "data"}),),
    ),
    CelCase(
        "spec.data.endpoint",
        "endpoint is only for s3:// URIs",
        refused=(
            _spec(data={"source": "files", "uri": "gs://bucket/d", "endpoint": "http://x:9000"}),
        ),
        accepted=(
            _spec(data={"source": "files", "uri": "s3://bucket/d", "endpoint": "http://x:9000"}),
        ),
    ),
    CelCase(
        "spec.data.credentialsSecret",
        "credentialsSecret is only for a bucket (data.uri)",
        refused=(_spec(data={"credentialsSecret": "bucket-keys"}),),
        accepted=(
            _spec(data={"source": "files", "uri": "s3://bucket/d", "credentialsSecret": "keys"}),
        ),
    ),
    CelCase(
        "spec.data.credentialsSecret",
        "data and checkpoint credentialsSecret must name the same Secret: a pod has one set "
        "of bucket credentials",
        refused=(
            _spec(
                data={"source": "files", "uri": "s3://bucket/d", "credentialsSecret": "keys-a"},
                checkpoint={
                    "claimName": None,
                    "uri": "s3://ckpts/c",
                    "credentialsSecret": "keys-b",
                },
            ),
        ),
        accepted=(
            _spec(
                data={"source": "files", "uri": "s3://bucket/d", "credentialsSecret": "keys-a"},
                checkpoint={
                    "claimName": None,
                    "uri": "s3://ckpts/c",
                    "credentialsSecret": "keys-a",
                },
            ),
        ),
    ),
    CelCase(
        "spec.data.source",
        "digits are 8x8 images; gan3d and pix2pix need source synthetic or files",
        refused=(
            _spec(data={"source": "digits"}),
            _spec(framework="pytorch", model={"name": "pix2pix"}, data={"source": "digits"}),
        ),
        accepted=({}, _spec(model={"name": "dcgan"}, data={"source": "digits"})),
    ),
    CelCase(
        "spec.monitoring.metricsPort",
        "metricsPort must differ from the workers' peer ports "
        f"{TF_WORKER_PORT}, {TPU_WORKER_PORT} and {TORCH_MASTER_PORT}",
        refused=(
            _spec(monitoring={"metricsPort": TF_WORKER_PORT}),
            _spec(monitoring={"metricsPort": TORCH_MASTER_PORT}),
        ),
        accepted=(_spec(monitoring={"metricsPort": 9091}),),
    ),
    # ---- spec.placement ------------------------------------------------------------------------
    CelCase(
        "spec.placement.nodeSelector",
        "keys must be Kubernetes label keys",
        refused=(
            _spec(placement={"nodeSelector": {"-pool": "a"}}),
            _spec(placement={"nodeSelector": {"a" * 250 + ".io/pool": "a"}}),
        ),
        accepted=(_spec(placement={"nodeSelector": {"cloud.google.com/gke-nodepool": "a"}}),),
        same_words=False,
    ),
    CelCase(
        "spec.placement.tolerations[0]",
        "value must be empty with operator Exists",
        refused=(_toleration(operator="Exists", value="spot"),),
        accepted=(_toleration(operator="Exists"), _toleration(operator="Equal", value="spot")),
    ),
    CelCase(
        "spec.placement.tolerations[0]",
        "an empty key needs operator Exists",
        refused=(_toleration(key="", value="spot"),),
        accepted=(_toleration(key="", operator="Exists"),),
    ),
    CelCase(
        "spec.placement.tolerations[0]",
        "tolerationSeconds needs effect NoExecute",
        refused=(_toleration(operator="Exists", effect="NoSchedule", tolerationSeconds=30),),
        accepted=(_toleration(operator="Exists", effect="NoExecute", tolerationSeconds=30),),
    ),
    # ---- spec.model.options: each model's own names and ranges ---------------------------------
    CelCase(
        "spec.model.options.imageSize",
        "must be a power of two from 8 to 256",
        refused=(_model("dcgan", imageSize=512), _model("acgan", imageSize=512)),
        accepted=(_model("dcgan", imageSize=256), _model("pix2pix", imageSize=512)),
    ),
    CelCase(
        "spec.model.options.latentDim",
        "must be an integer from 1 to 1024",
        refused=(_model("dcgan", latentDim=1025), _model("acgan", latentDim=65536)),
        accepted=(_model("acgan", latentDim=1), _model("custom", latentDim=65536)),
    ),
    CelCase(
        "spec.model.options.latentDim",
        "must be an integer from 3 to 1024",
        refused=(_model("gan3d", latentDim=2), _model("gan3d", latentDim=2048)),
        accepted=(_model("gan3d", latentDim=3), _model("dcgan", latentDim=2)),
    ),
    _unknown_option("gan3d", "imageSize", 64, reader="dcgan"),
    _unknown_option("pix2pix", "latentDim", 100, reader="acgan"),
    _unknown_option("pix2pix", "channels", 3, reader="dcgan"),
    _unknown_option("gan3d", "channels", 1, reader="custom"),
    _unknown_option("dcgan", "direction", "BtoA", reader="pix2pix"),
    _unknown_option("acgan", "direction", "AtoB", reader="custom"),
    _unknown_option("gan3d", "direction", "BtoA", reader="pix2pix"),
    _unknown_option("dcgan", "heldOutPath", "/data/val", reader="pix2pix"),
    _unknown_option("acgan", "heldOutPath", "/data/val", reader="custom"),
    _unknown_option("gan3d", "heldOutPath", "/data/val", reader="pix2pix"),
    _unknown_option("dcgan", "angleKey", "theta", reader="gan3d"),
    _unknown_option("acgan", "angleKey", "phi", reader="gan3d"),
    _unknown_option("pix2pix", "angleKey", "theta", reader="custom"),
    _unknown_option("dcgan", "dataKind", "images", reader="custom"),
    _unknown_option("acgan", "dataKind", "images", reader="custom"),
    _unknown_option("pix2pix", "dataKind", "paired", reader="custom"),
    _unknown_option("gan3d", "dataKind", "showers", reader="custom"),
    *FRAME_CASES,
    *POD_TEMPLATE_CASES,
    *URL_CASES,
    *TRACKING_URL_CASES,
)


# ---- the jobs -------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: mappings merge, null removes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


@cache
def _example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Example:
    case: CelCase
    refused: bool
    name: str  # metadata.name, unique over all examples
    job: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.name}: {self.case.field}: {self.case.message[:40]}"

    def expected(self) -> set[tuple[str, str]]:
        """(path, message) of every rule a refused example breaks; empty when accepted."""
        if not self.refused:
            return set()
        return {(self.case.field, self.case.message), *self.case.also}


def examples() -> Iterator[Example]:
    for i, case in enumerate(CASES):
        for refused, patches in ((True, case.refused), (False, case.accepted)):
            for j, patch in enumerate(patches):
                name = f"cel-{i:02d}-{'refused' if refused else 'accepted'}-{j}"
                job = merge_patch(_example(case.base), {"metadata": {"name": name}})
                job = merge_patch(job, patch)
                yield Example(case, refused, job["metadata"]["name"], job)


# ---- the rules ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrdRule:
    field: str  # where the apiserver reports it: the rule's place, then its fieldPath
    message: str
    rule: str

    @property
    def id(self) -> RuleId:
        return self.field, self.message


def crd_rules(crd: dict[str, Any]) -> list[CrdRule]:
    """Every x-kubernetes-validations entry of the CRD's (only) version, wherever it is."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return list(_rules(schema, ""))


def _rules(node: dict[str, Any], path: str) -> Iterator[CrdRule]:
    for rule in node.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            # A transition rule judges an update, not one object: kubegan validate has no old
            # object to compare. tests/cluster/test_frozen_fields.py applies those.
            continue
        field = (path + rule.get("fieldPath", "")).lstrip(".") or "<nil>"
        yield CrdRule(field, rule.get("message", rule["rule"]), rule["rule"])
    for name, child in node.get("properties", {}).items():
        yield from _rules(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _rules(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _rules(node["additionalProperties"], f"{path}[*]")
