"""spec.podTemplate: what a team may add to every worker pod (DESIGN §9).

Shaped like a Kubernetes pod template, but only the parts that cannot widen what a worker
may do: labels and annotations, a service account, pull secrets, a priority class, extra
volumes of a bounded set of sources, and, for the trainer container, env, volumeMounts and a
securityContext that can only tighten kubegan's. Names kubegan uses itself (its variables,
volumes, mount paths, label prefixes) are refused by field path, by `kubegan validate` and
by the CRD's CEL alike: every rule here is one `Rule`, which is both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from kubegan_api import cel
from kubegan_api.base import ApiModel
from kubegan_api.cel import Rule, cel_rules, check
from kubegan_api.contract import ENV_PREFIX
from kubegan_api.reserved import (
    KUBEGAN_MOUNTS,
    RESERVED_ENV,
    RESERVED_KEY_PREFIXES,
    VOLUME_SOURCES,
    host_path_allowed,
    priority_class_problem,
)
from kubegan_api.sections import json_data_problem
from kubegan_api.text import TEXT_PATTERN, data_control_problem


def _has_prefix(keys: Iterable[str]) -> bool:
    return any(k.startswith(RESERVED_KEY_PREFIXES) for k in keys)


def _no_reserved_keys(field: str) -> Rule:
    prefixes = " and ".join(RESERVED_KEY_PREFIXES)
    tests = " && ".join(f"!k.startsWith({cel.literal(p)})" for p in RESERVED_KEY_PREFIXES)
    return Rule(
        f".{field}",
        f"keys under {prefixes} are kubegan's and Kueue's own (a job joins a Kueue queue by "
        "its own metadata.labels)",
        f"!has(self.{field}) || self.{field}.all(k, {tests})",
        lambda m: not _has_prefix(getattr(m, field) or {}),
    )


# ---- the models ------------------------------------------------------------------------------

DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# Path segments never start with '.', so '.' and '..' cannot climb out of a mount.
_SEGMENT = r"[A-Za-z0-9_@+=:,~-][-._A-Za-z0-9@+=:,~]*"
MOUNT_PATH_PATTERN = rf"^(/{_SEGMENT})+$"
SUB_PATH_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
# The downward API fields a worker may read (no secrets: those go through secretKeyRef).
FIELD_PATH_PATTERN = (
    r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[-._a-zA-Z0-9/]+'\]"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN)]
LabelKey = Annotated[str, Field(max_length=253, pattern=_LABEL_KEY)]
# What the template's annotations may take of the apiserver's 256 KiB for all of a pod's
# annotations together: kubegan's own (the planned nodes among them) and Kueue's take the rest.
TEMPLATE_ANNOTATIONS_BYTES = 128 * 1024
# How deep a volume source's own fields may nest (the pod API's are a few levels deep).
MAX_SOURCE_DEPTH = 16


META_RULES = (_no_reserved_keys("labels"), _no_reserved_keys("annotations"))


class PodTemplateMetadata(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*META_RULES)

    labels: dict[LabelKey, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=64, description="Added to every worker."
    )
    annotations: dict[LabelKey, Annotated[str, Field(max_length=65536, pattern=TEXT_PATTERN)]] = (
        Field(
            default_factory=dict,
            max_length=64,
            description='Added to every worker (e.g. gke-gcsfuse/volumes: "true"); at most '
            f"{TEMPLATE_ANNOTATIONS_BYTES // 1024} KiB in all.",
        )
    )

    @field_validator("annotations")
    @classmethod
    def _annotations_size(cls, annotations: dict[str, str]) -> dict[str, str]:
        # The apiserver refuses a pod whose annotations exceed 256 KiB: refused here, before
        # any worker is created.
        total = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if total > TEMPLATE_ANNOTATIONS_BYTES:
            raise ValueError(
                f"{total} bytes in all; a worker's annotations may take at most "
                f"{TEMPLATE_ANNOTATIONS_BYTES // 1024} KiB from the template (the apiserver "
                "takes 256 KiB per pod, kubegan's and Kueue's own included)"
            )
        return annotations

    @model_validator(mode="after")
    def _rules(self) -> PodTemplateMetadata:
        check(self, META_RULES)
        return self


class LocalObjectReference(ApiModel):
    name: Name


class KeySelector(ApiModel):
    """secretKeyRef and configMapKeyRef."""

    name: Name
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    optional: bool | None = None


class FieldSelector(ApiModel):
    field_path: str = Field(max_length=253, pattern=FIELD_PATH_PATTERN)
    api_version: str | None = Field(default=None, pattern=r"^v1$")


_REFS = ("secretKeyRef", "configMapKeyRef", "fieldRef")
ONE_REF = Rule(
    "",
    "exactly one of secretKeyRef, configMapKeyRef or fieldRef must be set",
    f"[{', '.join(f'has(self.{r})' for r in _REFS)}].filter(x, x).size() == 1",
    lambda s: (
        sum(x is not None for x in (s.secret_key_ref, s.config_map_key_ref, s.field_ref)) == 1
    ),
)


class EnvVarSource(ApiModel):
    model_config = ApiModel.model_config | cel_rules(ONE_REF)

    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: FieldSelector | None = None

    @model_validator(mode="after")
    def _rules(self) -> EnvVarSource:
        check(self, (ONE_REF,))
        return self


ENV_RULES = (
    Rule(
        ".name",
        f"variables under {ENV_PREFIX} and {', '.join(RESERVED_ENV)} are set by kubegan "
        "(bucket credentials from the Secret that credentialsSecret names)",
        f"{cel.none_of('self.name', RESERVED_ENV)} && "
        f"!self.name.startsWith({cel.literal(ENV_PREFIX)})",
        lambda e: e.name not in RESERVED_ENV and not e.name.startswith(ENV_PREFIX),
    ),
    Rule(
        "",
        "value and valueFrom cannot both be set",
        "!has(self.value) || !has(self.valueFrom)",
        lambda e: e.value is None or e.value_from is None,
    ),
)


class EnvVar(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*ENV_RULES)

    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)
    value: str | None = Field(default=None, max_length=32768, pattern=TEXT_PATTERN)
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _rules(self) -> EnvVar:
        check(self, ENV_RULES)
        return self


# A volume source's own fields are the pod API's: the apiserver checks them when the worker
# is created. Which sources may be used is decided here.
Source = dict[str, Any] | None

VOLUME_RULES = (
    Rule(
        "",
        f"exactly one source must be set: {', '.join(VOLUME_SOURCES)}",
        f"[{', '.join(f'has(self.{s})' for s in VOLUME_SOURCES)}].filter(x, x).size() == 1",
        lambda v: sum(getattr(v, _snake(s)) is not None for s in VOLUME_SOURCES) == 1,
    ),
    Rule(
        ".name",
        f"{', '.join(KUBEGAN_MOUNTS)} are kubegan's own volumes",
        cel.none_of("self.name", KUBEGAN_MOUNTS),
        lambda v: v.name not in KUBEGAN_MOUNTS,
    ),
)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


class Volume(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*VOLUME_RULES)

    name: str = Field(min_length=1, max_length=63, pattern=DNS_1123_LABEL)
    config_map: Source = None
    secret: Source = None
    empty_dir: Source = None
    persistent_volume_claim: Source = None
    csi: Source = Field(default=None, description="e.g. the GCS FUSE driver.")
    projected: Source = Field(
        default=None, description="e.g. a workload-identity token (serviceAccountToken)."
    )
    ephemeral: Source = None
    host_path: Source = Field(
        default=None, description="Refused unless the chart sets workers.allowHostPath."
    )

    @field_validator(*(_snake(s) for s in VOLUME_SOURCES))
    @classmethod
    def _source_data(cls, value: Source) -> Source:
        # Free-form, so checked as data: `sizeLimit: .inf` would be rendered as null, and a
        # control character would reach the pod spec.
        if value is None:
            return value
        problem = json_data_problem(value, MAX_SOURCE_DEPTH) or data_control_problem(
            value, MAX_SOURCE_DEPTH
        )
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("host_path")
    @classmethod
    def _host_path(cls, value: Source) -> Source:
        if value is not None and not host_path_allowed():
            raise ValueError(
                "hostPath volumes are refused by this operator (the chart's "
                "workers.allowHostPath is off)"
            )
        return value

    @model_validator(mode="after")
    def _rules(self) -> Volume:
        check(self, VOLUME_RULES)
        return self


_KUBEGAN_PATHS = tuple(KUBEGAN_MOUNTS.values())
MOUNT_RULES = (
    Rule(
        ".mountPath",
        f"{', '.join(_KUBEGAN_PATHS)} and what lies under them are kubegan's own mounts",
        f"{cel.none_of('self.mountPath', _KUBEGAN_PATHS)} && "
        f"![{', '.join(cel.literal(p + '/') for p in _KUBEGAN_PATHS)}]"
        ".exists(p, self.mountPath.startsWith(p))",
        lambda m: (
            not any(m.mount_path == p or m.mount_path.startswith(p + "/") for p in _KUBEGAN_PATHS)
        ),
    ),
)


class VolumeMount(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*MOUNT_RULES)

    name: str = Field(min_length=1, max_length=63, pattern=DNS_1123_LABEL)
    mount_path: str = Field(max_length=1024, pattern=MOUNT_PATH_PATTERN)
    read_only: bool | None = None
    sub_path: str | None = Field(default=None, max_length=1024, pattern=SUB_PATH_PATTERN)

    @model_validator(mode="after")
    def _rules(self) -> VolumeMount:
        check(self, MOUNT_RULES)
        return self


SECCOMP_RULE = Rule(
    ".localhostProfile",
    "localhostProfile is set with type Localhost, and only then",
    "(self.type == 'Localhost') == has(self.localhostProfile)",
    lambda s: (s.type == "Localhost") == (s.localhost_profile is not None),
)


class SeccompProfile(ApiModel):
    model_config = ApiModel.model_config | cel_rules(SECCOMP_RULE)

    type: str = Field(pattern=r"^(RuntimeDefault|Localhost)$")
    localhost_profile: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=SUB_PATH_PATTERN,
        description="Relative to the kubelet's seccomp directory: no '..' part, not absolute.",
    )

    @model_validator(mode="after")
    def _rules(self) -> SeccompProfile:
        check(self, (SECCOMP_RULE,))
        return self


_WIDENS = "would widen what a worker may do"
ADD_RULE = Rule(
    ".add",
    f"capabilities can only be dropped: adding one {_WIDENS}",
    "!has(self.add) || self.add.size() == 0",
    lambda c: not c.add,
)
Capability = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z_]+$")]


class Capabilities(ApiModel):
    model_config = ApiModel.model_config | cel_rules(ADD_RULE)

    drop: list[Capability] = Field(default_factory=list, max_length=64)
    add: list[Capability] | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _rules(self) -> Capabilities:
        check(self, (ADD_RULE,))
        return self


def _must_be(field: str, value: bool) -> Rule:
    snake = _snake(field)
    return Rule(
        f".{field}",
        f"{field} can only be {str(value).lower()}: {str(not value).lower()} {_WIDENS}",
        f"!has(self.{field}) || self.{field} == {cel.literal(value)}",
        lambda s: getattr(s, snake) in (None, value),
    )


SECURITY_RULES = (
    _must_be("privileged", False),
    _must_be("allowPrivilegeEscalation", False),
    _must_be("runAsNonRoot", True),
    _must_be("readOnlyRootFilesystem", True),
)
UserId = Annotated[int, Field(ge=1, le=2**31 - 1)]


class SecurityContext(ApiModel):
    """The trainer container's; merged over kubegan's (render), so it can only tighten."""

    model_config = ApiModel.model_config | cel_rules(*SECURITY_RULES)

    run_as_user: UserId | None = Field(default=None, description="Non-zero.")
    run_as_group: UserId | None = Field(default=None, description="Non-zero.")
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None
    allow_privilege_escalation: bool | None = None
    privileged: bool | None = None
    seccomp_profile: SeccompProfile | None = None
    capabilities: Capabilities | None = None

    @model_validator(mode="after")
    def _rules(self) -> SecurityContext:
        check(self, SECURITY_RULES)
        return self


def _names(items: Iterable[Any]) -> list[str]:
    return [i.name for i in items]


POD_RULES = (
    Rule(
        ".volumes",
        "volume names must be unique",
        "!has(self.volumes) || self.volumes.all(v, self.volumes.exists_one(w, w.name == v.name))",
        lambda s: len(set(_names(s.volumes))) == len(s.volumes),
    ),
    Rule(
        ".volumeMounts",
        "every volumeMount names one of spec.podTemplate.spec.volumes",
        "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
        "self.volumes.exists(v, v.name == m.name))",
        lambda s: set(_names(s.volume_mounts)) <= set(_names(s.volumes)),
    ),
)


class WorkerPodSpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*POD_RULES)

    service_account_name: Name | None = Field(
        default=None,
        description="The workers' service account. Its token is still not mounted: a "
        "workload-identity token comes through a projected volume in volumes.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list, max_length=16)
    priority_class_name: Name | None = Field(
        default=None,
        description="system-* classes only where the chart's workers.allowedPriorityClasses "
        "lists them.",
    )
    volumes: list[Volume] = Field(default_factory=list, max_length=32)
    env: list[EnvVar] = Field(
        default_factory=list, max_length=128, description="The trainer's, after kubegan's."
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=32, description="The trainer's, of volumes above."
    )
    security_context: SecurityContext | None = None

    @field_validator("priority_class_name")
    @classmethod
    def _priority(cls, name: str | None) -> str | None:
        problem = None if name is None else priority_class_problem(name)
        if problem is not None:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _rules(self) -> WorkerPodSpec:
        check(self, POD_RULES)
        return self


class PodTemplateSpec(ApiModel):
    """Added to every worker pod; kubegan's own fields win."""

    metadata: PodTemplateMetadata = Field(default_factory=PodTemplateMetadata)
    spec: WorkerPodSpec = Field(default_factory=WorkerPodSpec)


# Every rule above, for the tests that hold the CRD to them.
ALL_RULES = (
    *META_RULES,
    ONE_REF,
    *ENV_RULES,
    *VOLUME_RULES,
    *MOUNT_RULES,
    SECCOMP_RULE,
    ADD_RULE,
    *SECURITY_RULES,
    *POD_RULES,
)
