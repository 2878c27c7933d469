"""The spec's rules between fields: each one a pydantic check here and a CEL rule in the
CRD (kubegan_operator.api.crd), written from the same tables so the two cannot drift. And
the fields a started job can no longer change."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubegan_api import cel
from kubegan_api.contract import PEER_PORTS
from kubegan_api.resources import MAX_TPU_CHIPS
from kubegan_api.sections import (
    MODELS_BY_FRAMEWORK,
    SOURCES_BY_MODEL,
    DataSource,
    Framework,
    ModelName,
    Strategy,
)


@dataclass(frozen=True)
class CrossFieldRule:
    """One rule between fields, enforced by pydantic here and by CEL in the apiserver."""

    field_path: str  # relative to spec, as CEL's fieldPath (".resources")
    message: str
    cel: str  # evaluated with self = spec
    # Given the spec (kubegan_api.spec.GANTrainingJobSpec, which is built from these rules).
    holds: Callable[[Any], bool]


def _exactly_one_shape(s: Any) -> bool:
    r = s.resources
    return sum(x is not None for x in (r.gpus, r.workers, r.tpu)) == 1


def _listed(values: Iterable[object], last: str) -> str:
    """`a`, `a and b`, `a, b and c` (or "or")."""
    words = [str(v) for v in values]
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else "".join(words)


# The strategies that run on a TPU slice.
TPU_STRATEGIES = (Strategy.tpu, Strategy.auto)
# Why a source does not suit a model, where the table's sets need saying.
_SOURCE_WHY = {DataSource.digits: "digits are 8x8 images; "}


def framework_rules(
    table: Mapping[Framework, frozenset[ModelName]] = MODELS_BY_FRAMEWORK,
) -> tuple[CrossFieldRule, ...]:
    """spec.model.name: one rule per set of frameworks that run some models but not all of
    them, written from the table (`MODELS_BY_FRAMEWORK`)."""
    groups: dict[tuple[Framework, ...], list[ModelName]] = {}
    for model in ModelName:
        frameworks = tuple(f for f in Framework if model in table[f])
        if len(frameworks) < len(Framework):
            groups.setdefault(frameworks, []).append(model)
    return tuple(
        CrossFieldRule(
            ".model.name",
            f"{_listed(models, 'and')} {'is' if len(models) == 1 else 'are'} only available "
            f"with framework {_listed(frameworks, 'or')}",
            f"{cel.none_of('self.model.name', models)} || "
            f"{cel.one_of('self.framework', frameworks)}",
            lambda s, models=models, frameworks=frameworks: (
                s.model.name not in models or s.framework in frameworks
            ),
        )
        for frameworks, models in groups.items()
    )


def source_rules(
    table: Mapping[ModelName, frozenset[DataSource]] = SOURCES_BY_MODEL,
) -> tuple[CrossFieldRule, ...]:
    """spec.data.source: one rule per source and the sources of the models that cannot train
    on it, written from the table (`SOURCES_BY_MODEL`)."""
    groups: dict[tuple[DataSource, tuple[DataSource, ...]], list[ModelName]] = {}
    for source in DataSource:
        for model in ModelName:
            if source not in table[model]:
                sources = tuple(s for s in DataSource if s in table[model])
                groups.setdefault((source, sources), []).append(model)
    return tuple(
        CrossFieldRule(
            ".data.source",
            f"{_SOURCE_WHY.get(source, '')}{_listed(models, 'and')} "
            f"need{'s' if len(models) == 1 else ''} source {_listed(sources, 'or')}",
            f"{cel.none_of('self.data.source', [source])} || "
            f"{cel.none_of('self.model.name', models)}",
            lambda s, source=source, models=models: (
                s.data.source != source or s.model.name not in models
            ),
        )
        for (source, sources), models in groups.items()
    )


# spec.data.uri: a dataset read from a bucket instead of a volume, with the
# checkpoint bucket's endpoint and Secret semantics. A pod has one set of the clouds'
# credential variables, so data and checkpoints name the same Secret when both name one.
DATA_BUCKET_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        ".data.uri",
        "path and uri cannot both be set: data is read from a volume or from a bucket",
        "self.data.path == '' || self.data.uri == ''",
        lambda s: s.data.path == "" or s.data.uri == "",
    ),
    CrossFieldRule(
        ".data.uri",
        f"uri is only for data source {DataSource.files}",
        f"self.data.uri == '' || self.data.source == '{DataSource.files}'",
        lambda s: s.data.uri == "" or s.data.source == DataSource.files,
    ),
    CrossFieldRule(
        ".data.claimName",
        "claimName mounts the volume of a path; a uri is read from the bucket",
        "self.data.claimName == '' || self.data.uri == ''",
        lambda s: s.data.claim_name == "" or s.data.uri == "",
    ),
    CrossFieldRule(
        ".data.endpoint",
        "endpoint is only for s3:// URIs",
        "self.data.endpoint == '' || self.data.uri.startsWith('s3://')",
        lambda s: s.data.endpoint == "" or s.data.uri.startswith("s3://"),
    ),
    CrossFieldRule(
        ".data.credentialsSecret",
        "credentialsSecret is only for a bucket (data.uri)",
        "self.data.credentialsSecret == '' || self.data.uri != ''",
        lambda s: s.data.credentials_secret == "" or s.data.uri != "",
    ),
    CrossFieldRule(
        ".data.credentialsSecret",
        "data and checkpoint credentialsSecret must name the same Secret: a pod has one set "
        "of bucket credentials",
        "self.data.credentialsSecret == '' || self.checkpoint.credentialsSecret == '' || "
        "self.data.credentialsSecret == self.checkpoint.credentialsSecret",
        lambda s: (
            s.data.credentials_secret == ""
            or s.checkpoint.credentials_secret == ""
            or s.data.credentials_secret == s.checkpoint.credentials_secret
        ),
    ),
)

# spec.data.resize/crop (kubegan_api.image_frame): images read from files; how they fit the
# model's networks depends on its options, checked in Python (image_frame.frame_problems).
FRAME_RULES: tuple[CrossFieldRule, ...] = tuple(
    rule
    for field in ("resize", "crop")
    for rule in (
        CrossFieldRule(
            f".data.{field}",
            f"{field} is only for data source {DataSource.files}",
            f"!has(self.data.{field}) || self.data.source == '{DataSource.files}'",
            lambda s, field=field: (
                getattr(s.data, field) is None or s.data.source == DataSource.files
            ),
        ),
        CrossFieldRule(
            f".data.{field}",
            f"{field} is for images; {ModelName.gan3d} trains on 51x51x25 showers",
            f"!has(self.data.{field}) || self.model.name != '{ModelName.gan3d}'",
            lambda s, field=field: (
                getattr(s.data, field) is None or s.model.name != ModelName.gan3d
            ),
        ),
    )
)


_E = "self.resources.elastic"
# spec.resources.elastic: which bounds go with which shape, and the target inside them.
ELASTIC_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        ".resources.elastic",
        "elastic is not for tpu: a slice is one failure unit",
        f"!has({_E}) || !has(self.resources.tpu)",
        lambda s: s.resources.elastic is None or s.resources.tpu is None,
    ),
    CrossFieldRule(
        ".resources.elastic.minWorkers",
        "minWorkers and maxWorkers are only valid together with workers",
        # Not said again for a tpu slice, which the rule above refuses in one line.
        f"!has({_E}) || (!has({_E}.minWorkers) && !has({_E}.maxWorkers)) || "
        "has(self.resources.workers) || has(self.resources.tpu)",
        lambda s: (
            s.resources.elastic is None
            or (s.resources.elastic.min_workers is None and s.resources.elastic.max_workers is None)
            or s.resources.workers is not None
            or s.resources.tpu is not None
        ),
    ),
    CrossFieldRule(
        ".resources.elastic.minWorkers",
        "elastic with workers needs minWorkers",
        f"!has({_E}) || !has(self.resources.workers) || has({_E}.minWorkers)",
        lambda s: (
            s.resources.elastic is None
            or s.resources.workers is None
            or s.resources.elastic.min_workers is not None
        ),
    ),
    CrossFieldRule(
        ".resources.elastic",
        "elastic needs minWorkers <= workers <= maxWorkers",
        f"!has({_E}) || !has(self.resources.workers) || "
        f"((!has({_E}.minWorkers) || {_E}.minWorkers <= self.resources.workers) && "
        f"(!has({_E}.maxWorkers) || self.resources.workers <= {_E}.maxWorkers))",
        lambda s: (
            s.resources.elastic is None
            or s.resources.workers is None
            or (s.resources.elastic.min_workers or 0)
            <= s.resources.workers
            <= (s.resources.elastic.max_workers or s.resources.workers)
        ),
    ),
    CrossFieldRule(
        ".resources.elastic.minGpus",
        "minGpus is only valid together with gpus",
        f"!has({_E}) || !has({_E}.minGpus) || has(self.resources.gpus) || has(self.resources.tpu)",
        lambda s: (
            s.resources.elastic is None
            or s.resources.elastic.min_gpus is None
            or s.resources.gpus is not None
            or s.resources.tpu is not None
        ),
    ),
    CrossFieldRule(
        ".resources.elastic.minGpus",
        "elastic with gpus needs minGpus",
        f"!has({_E}) || !has(self.resources.gpus) || has({_E}.minGpus)",
        lambda s: (
            s.resources.elastic is None
            or s.resources.gpus is None
            or s.resources.elastic.min_gpus is not None
        ),
    ),
    CrossFieldRule(
        ".resources.elastic.minGpus",
        "minGpus must be at most gpus",
        f"!has({_E}) || !has({_E}.minGpus) || !has(self.resources.gpus) || "
        f"{_E}.minGpus <= self.resources.gpus",
        lambda s: (
            s.resources.elastic is None
            or s.resources.elastic.min_gpus is None
            or s.resources.gpus is None
            or s.resources.elastic.min_gpus <= s.resources.gpus
        ),
    ),
)


# Spec fields a job cannot change once it has started (status.startTime set): a running gang
# was planned, configured and checkpointed from them, so a changed model, dataset or
# checkpoint location would silently resume another job's state or none. The apiserver
# refuses such an edit (CEL transition rules, api/crd.py); suspend, deadlines, placement,
# resources and cost stay changeable.
FROZEN_ONCE_STARTED: tuple[str, ...] = (
    "framework",
    "strategy",
    "model",
    "data",
    "training",
    "checkpoint",
)

CROSS_FIELD_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        ".resources",
        "exactly one of gpus, workers or tpu must be set",
        "[has(self.resources.gpus), has(self.resources.workers), has(self.resources.tpu)]"
        ".filter(x, x).size() == 1",
        _exactly_one_shape,
    ),
    CrossFieldRule(
        ".resources.gpusPerWorker",
        "gpusPerWorker is only valid together with workers",
        "!has(self.resources.gpusPerWorker) || has(self.resources.workers)",
        lambda s: s.resources.gpus_per_worker is None or s.resources.workers is not None,
    ),
    CrossFieldRule(
        ".resources.gpusPerWorker",
        "gpusPerWorker is required with workers (0 for CPU-only workers)",
        "!has(self.resources.workers) || has(self.resources.gpusPerWorker)",
        lambda s: s.resources.workers is None or s.resources.gpus_per_worker is not None,
    ),
    CrossFieldRule(
        ".resources.accelerator",
        "accelerator selects GPUs and cannot be combined with tpu or gpusPerWorker 0",
        "self.resources.accelerator == '' || (!has(self.resources.tpu) && "
        "!(has(self.resources.gpusPerWorker) && self.resources.gpusPerWorker == 0))",
        lambda s: (
            s.resources.accelerator == ""
            or (s.resources.tpu is None and s.resources.gpus_per_worker != 0)
        ),
    ),
    CrossFieldRule(
        ".resources.tpu",
        f"tpu requires framework {Framework.tensorflow}",
        f"!has(self.resources.tpu) || self.framework == '{Framework.tensorflow}'",
        lambda s: s.resources.tpu is None or s.framework == Framework.tensorflow,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.tpu} requires resources.tpu",
        f"self.strategy != '{Strategy.tpu}' || has(self.resources.tpu)",
        lambda s: s.strategy != Strategy.tpu or s.resources.tpu is not None,
    ),
    CrossFieldRule(
        ".strategy",
        f"resources.tpu requires strategy {_listed(TPU_STRATEGIES, 'or')}",
        f"!has(self.resources.tpu) || {cel.one_of('self.strategy', TPU_STRATEGIES)}",
        lambda s: s.resources.tpu is None or s.strategy in TPU_STRATEGIES,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.tpu} requires framework {Framework.tensorflow}",
        f"self.strategy != '{Strategy.tpu}' || self.framework == '{Framework.tensorflow}'",
        lambda s: s.strategy != Strategy.tpu or s.framework == Framework.tensorflow,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.mirrored} runs one worker; use {Strategy.multi_worker} or "
        f"{Strategy.auto} for several",
        f"self.strategy != '{Strategy.mirrored}' || !has(self.resources.workers) || "
        "self.resources.workers == 1",
        lambda s: (
            s.strategy != Strategy.mirrored
            or s.resources.workers is None
            or s.resources.workers == 1
        ),
    ),
    CrossFieldRule(
        ".checkpoint.uri",
        "claimName and uri cannot both be set: checkpoints go to a volume or to a bucket",
        "self.checkpoint.claimName == '' || self.checkpoint.uri == ''",
        lambda s: s.checkpoint.claim_name == "" or s.checkpoint.uri == "",
    ),
    CrossFieldRule(
        ".checkpoint.credentialsSecret",
        "credentialsSecret is only for a bucket (checkpoint.uri)",
        "self.checkpoint.credentialsSecret == '' || self.checkpoint.uri != ''",
        lambda s: s.checkpoint.credentials_secret == "" or s.checkpoint.uri != "",
    ),
    CrossFieldRule(
        ".checkpoint.endpoint",
        "endpoint is only for s3:// URIs",
        "self.checkpoint.endpoint == '' || self.checkpoint.uri.startsWith('s3://')",
        lambda s: s.checkpoint.endpoint == "" or s.checkpoint.uri.startswith("s3://"),
    ),
    CrossFieldRule(
        ".training.zero",
        f"zero requires framework {Framework.pytorch}",
        f"!self.training.zero || self.framework == '{Framework.pytorch}'",
        lambda s: not s.training.zero or s.framework == Framework.pytorch,
    ),
    CrossFieldRule(
        ".training.augment",
        f"augment transforms images; {ModelName.gan3d}'s showers are energies whose place "
        "and sum are the physics",
        f"!has(self.training.augment) || self.model.name != '{ModelName.gan3d}'",
        lambda s: s.training.augment is None or s.model.name != ModelName.gan3d,
    ),
    *framework_rules(),
    CrossFieldRule(
        ".model.entrypoint",
        f"entrypoint is required for model {ModelName.custom}",
        f"self.model.name != '{ModelName.custom}' || self.model.entrypoint != ''",
        lambda s: s.model.name != ModelName.custom or s.model.entrypoint != "",
    ),
    CrossFieldRule(
        ".model.entrypoint",
        f"entrypoint is only used by model {ModelName.custom}",
        f"self.model.name == '{ModelName.custom}' || self.model.entrypoint == ''",
        lambda s: s.model.name == ModelName.custom or s.model.entrypoint == "",
    ),
    CrossFieldRule(
        ".monitoring.metricsPort",
        f"metricsPort must differ from the workers' peer ports {_listed(PEER_PORTS, 'and')}",
        cel.none_of("self.monitoring.metricsPort", PEER_PORTS),
        lambda s: s.monitoring.metrics_port not in PEER_PORTS,
    ),
    CrossFieldRule(
        ".resources.tpu.topology",
        f"a slice of at most {MAX_TPU_CHIPS} chips",
        "!has(self.resources.tpu) || (self.resources.tpu.topology.split('x').size() == 2 ? "
        "int(self.resources.tpu.topology.split('x')[0]) * "
        "int(self.resources.tpu.topology.split('x')[1]) : "
        "int(self.resources.tpu.topology.split('x')[0]) * "
        "int(self.resources.tpu.topology.split('x')[1]) * "
        f"int(self.resources.tpu.topology.split('x')[2])) <= {MAX_TPU_CHIPS}",
        lambda s: (
            s.resources.tpu is None
            or math.prod(int(x) for x in s.resources.tpu.topology.split("x")) <= MAX_TPU_CHIPS
        ),
    ),
    CrossFieldRule(
        ".data.path",
        f"path or uri is required for data source {DataSource.files}",
        f"self.data.source != '{DataSource.files}' || self.data.path != '' || self.data.uri != ''",
        lambda s: s.data.source != DataSource.files or s.data.path != "" or s.data.uri != "",
    ),
    *DATA_BUCKET_RULES,
    *FRAME_RULES,
    *ELASTIC_RULES,
    *source_rules(),
)
