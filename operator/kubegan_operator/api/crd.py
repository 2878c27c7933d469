"""Generate the GANTrainingJob CRD from the pydantic models (DESIGN §2).

The output is a structural OpenAPI v3 schema: every `$ref` inlined, JSON Schema 2020 idioms
rewritten to what the apiserver accepts, defaults kept, and the cross-field rules attached as
CEL `x-kubernetes-validations` so the apiserver refuses what `kubegan validate` refuses.
"""

from __future__ import annotations

from typing import Any

import yaml
from kubegan_api import cel
from kubegan_api.base import DNS_1035_PATTERN, INT64_MAX, INT64_MIN
from kubegan_api.conditions import ConditionType
from kubegan_api.model_options import MODELS, Kind, Option, unknown_reason
from kubegan_api.rules import CROSS_FIELD_RULES, FROZEN_ONCE_STARTED
from kubegan_api.spec import (
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    GANTrainingJobSpec,
)
from kubegan_api.status import GANTrainingJobStatus

# JSON Schema keywords the apiserver's structural schema does not take.
_DROPPED_KEYS = {"title", "additionalProperties", "$defs", "examples"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Scheduling",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{ConditionType.unschedulable}")].reason',
        "description": "Why the gang waits (NoFit, WaitingForCapacity, QueuedByKueue, ...) "
        "or that it was placed (Planned, Scheduled)",
    },
    {
        "name": "Workers",
        "type": "string",
        "jsonPath": ".status.placement.size",
        "description": 'Workers now; "2/4" while an elastic job runs on 2 of its 4',
    },
    {
        "name": "Per-Worker",
        "type": "string",
        "jsonPath": ".status.placement.perWorker",
        "description": "What one worker holds: GPUs, TPU chips or CPU",
    },
    {
        "name": "Epoch",
        "type": "string",
        "jsonPath": ".status.progress.summary",
        "description": "Last finished epoch of the total",
    },
    {
        "name": "Epoch-Time",
        "type": "number",
        "jsonPath": ".status.progress.lastEpochSeconds",
        "description": "Seconds the last epoch took",
    },
    {
        "name": "Preemptions",
        "type": "integer",
        "jsonPath": ".status.preemptions",
        "description": "Infrastructure disruptions (spot reclaims, lost nodes)",
    },
    {
        "name": "Cost",
        "type": "number",
        "jsonPath": ".status.cost.dollars",
        "description": "Accrued cost in USD",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {k: _resolve(v, defs) for k, v in node.items()}


def _int64_bounds_as_format(node: dict[str, Any]) -> None:
    """Say "int64" with `format`, not with bounds the apiserver cannot hold.

    The apiserver keeps `minimum`/`maximum` as float64: 2**63-1 rounds up to 2**63, which is
    not an int64, and it then refuses the whole CRD ("Maximum boundary value must be of type
    integer"). `format: int64` states the same limit and the apiserver enforces it on decode.
    """
    if node.get("type") != "integer":
        return
    if node.get("maximum") == INT64_MAX:
        del node["maximum"]
        node["format"] = "int64"
    if node.get("minimum") == INT64_MIN:
        del node["minimum"]
        node["format"] = "int64"


def _without_union(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf` as a structural schema has it: int-or-string, or Optional[X] as plain X."""
    any_of = node.pop("anyOf", None)
    if any_of is None:
        return node
    if node.get("x-kubernetes-int-or-string"):
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return node
    branches = [b for b in any_of if b.get("type") != "null"]
    if len(branches) != 1:
        raise ValueError(f"cannot express union in a structural schema: {any_of}")
    # Optional[X]: nulls are pruned by the apiserver, so the field is just X.
    return {**branches[0], **node}


def _openapi_bounds(node: dict[str, Any]) -> None:
    """JSON Schema 2020's exclusive bounds as OpenAPI v3's, int64 as a format, no null
    default."""
    if node.get("default", 0) is None:
        del node["default"]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if exclusive in node and not isinstance(node[exclusive], bool):
            node[bound], node[exclusive] = node[exclusive], True
    _int64_bounds_as_format(node)


def _key_rules_as_cel(node: dict[str, Any]) -> None:
    """Structural schemas have neither patternProperties nor propertyNames: map values get
    additionalProperties, and the key rules become CEL."""
    key_rules = []
    for pattern, value_schema in (node.pop("patternProperties", None) or {}).items():
        node["additionalProperties"] = value_schema
        key_rules.append(f"k.matches({cel.raw_string(pattern)})")
    names = node.pop("propertyNames", None) or {}
    if "maxLength" in names:
        key_rules.insert(0, f"k.size() <= {names['maxLength']}")
    if key_rules:
        node.setdefault("x-kubernetes-validations", []).append(
            {
                "rule": f"self.all(k, {' && '.join(key_rules)})",
                "message": "keys must be Kubernetes label keys",
            }
        )


def _open_object(node: dict[str, Any]) -> set[str]:
    """An object without properties: a map with structural values, or (no value schema) an
    object kept as it is. Returns the keys to drop from it."""
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        node["additionalProperties"] = _structural(extra)
        return _DROPPED_KEYS - {"additionalProperties"}
    node["x-kubernetes-preserve-unknown-fields"] = True
    return _DROPPED_KEYS


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one (already inlined) JSON Schema node into a structural OpenAPI v3 node."""
    node = _without_union(dict(node))
    _openapi_bounds(node)
    _key_rules_as_cel(node)
    dropped = _DROPPED_KEYS
    if node.get("type") == "object" and "properties" not in node:
        dropped = _open_object(node)
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
    if "items" in node:
        node["items"] = _structural(node["items"])
    return {k: v for k, v in node.items() if k not in dropped}


def model_schema(model: type, mode: str = "validation") -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode=mode)
    return _structural(_resolve(raw, raw.get("$defs", {})))


# ---- spec.model.options, from the models' option table (kubegan_api.model_options) ---------

_OPENAPI_TYPES = {Kind.integer: "integer", Kind.number: "number", Kind.string: "string"}


def declared_options() -> dict[str, list[tuple[str, Option]]]:
    """The options the CRD types, with every model that reads them: those kubegan reads for
    every model, custom included (so a custom factory's own options are never constrained),
    that have one JSON type. CEL cannot see undeclared fields, so the other options are
    checked by `kubegan validate`, the operator and the trainer only."""
    shared = {o.name for o in MODELS["custom"].options if o.kind in _OPENAPI_TYPES}
    found: dict[str, list[tuple[str, Option]]] = {}
    for model, table in MODELS.items():
        for option in table.options:
            if option.name in shared:
                found.setdefault(option.name, []).append((model, option))
    for name, entries in found.items():
        if len({o.kind for _, o in entries}) != 1:
            raise ValueError(f"model option {name} has different types in different models")
    return found


def _loosest(options: list[Option]) -> Option:
    """One option accepting what any of `options` accepts (the schema of a shared name).
    Choices keep their bounds too, so that a model whose choices are all of them (pix2pix's
    imageSize) has the schema's constraint and gets no CEL rule the schema makes dead."""
    first = options[0]
    bounds = [o.minimum for o in options], [o.maximum for o in options]
    lo = None if None in bounds[0] else min(bounds[0])  # type: ignore[type-var]
    hi = None if None in bounds[1] else max(bounds[1])  # type: ignore[type-var]
    choices: tuple[Any, ...] = ()
    if all(o.choices for o in options):
        choices = tuple(sorted({c for o in options for c in o.choices}))
    return Option(first.name, first.kind, None, first.meaning, lo, hi, choices)


def _option_schema(option: Option) -> dict[str, Any]:
    node: dict[str, Any] = {"type": _OPENAPI_TYPES[option.kind], "description": option.meaning}
    if option.choices:
        node["enum"] = list(option.choices)
    elif option.kind is Kind.string:
        node.update({"minLength": option.minimum} if option.minimum else {})
        node["maxLength"] = option.maximum
    else:
        node.update(minimum=option.minimum, maximum=option.maximum)
    return node


def _cel_holds(option: Option, field: str) -> str:
    """A CEL expression true when `field` (present) is a value `option` accepts."""
    if option.choices:
        return cel.one_of(field, option.choices)
    size = f"{field}.size()" if option.kind is Kind.string else field
    # A number field compares with double literals: CEL does not mix int and double.
    cast = float if option.kind is Kind.number else int
    lo, hi = option.minimum, option.maximum
    parts = ([f"{size} >= {cast(lo)!r}"] if lo is not None else []) + (
        [f"{size} <= {cast(hi)!r}"] if hi is not None else []
    )
    return " && ".join(parts) or "true"


def _rule(models: list[str], name: str, test: str, message: str) -> dict[str, Any]:
    which = cel.none_of("self.name", models)
    return {
        "rule": f"{which} || !has(self.options.{name}){f' || ({test})' if test else ''}",
        "message": message,
        "fieldPath": f".options.{name}",
    }


def option_rules(name: str, entries: list[tuple[str, Option]]) -> list[dict[str, Any]]:
    """CEL on spec.model for one declared option: refused by name for a built-in model that
    does not read it, and held to each model's own range where the schema's is looser.
    Messages are the table's, word for word what `kubegan validate` says."""
    readers = {model for model, _ in entries}
    rules = [
        _rule([model], name, "", unknown_reason(model))
        for model, table in MODELS.items()
        if model not in readers and not table.open
    ]
    loosest = _loosest([o for _, o in entries]).constraint
    groups: dict[tuple[Any, ...], list[tuple[str, Option]]] = {}
    for model, option in entries:
        groups.setdefault(option.constraint, []).append((model, option))
    for constraint, members in groups.items():
        if constraint != loosest:
            option = members[0][1]
            test = _cel_holds(option, f"self.options.{name}")
            rules.append(_rule([m for m, _ in members], name, test, option.rule))
    return rules


def add_model_options(model: dict[str, Any]) -> None:
    """Type the shared options in spec.model's schema and attach their CEL rules."""
    declared = declared_options()
    options = model["properties"]["options"]
    options["properties"] = {
        name: _option_schema(_loosest([o for _, o in entries]))
        for name, entries in declared.items()
    }
    model["x-kubernetes-validations"] = [
        rule for name, entries in declared.items() for rule in option_rules(name, entries)
    ]


def spec_schema() -> dict[str, Any]:
    schema = model_schema(GANTrainingJobSpec)
    schema["properties"]["placement"]["properties"]["tolerations"]["maxItems"] = 64
    add_model_options(schema["properties"]["model"])
    schema["x-kubernetes-validations"] = [
        {"rule": r.cel, "message": r.message, "fieldPath": r.field_path} for r in CROSS_FIELD_RULES
    ]
    return schema


def status_schema() -> dict[str, Any]:
    schema = model_schema(GANTrainingJobStatus, mode="serialization")
    # kopf keeps its own bookkeeping under status; let it through.
    schema["x-kubernetes-preserve-unknown-fields"] = True
    schema.pop("required", None)
    for prop in schema["properties"].values():
        prop.pop("required", None)
        for sub in prop.get("properties", {}).values():
            sub.pop("required", None)
        if "items" in prop:
            prop["items"].pop("required", None)
    return schema


def crd() -> dict[str, Any]:
    name_rule = (
        f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && "
        f"self.metadata.name.matches('{DNS_1035_PATTERN}')"
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "kubegan", "app.kubernetes.io/part-of": "kubegan"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["all", "kubegan"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "Distributed GAN training placed to match node "
                            "topology, resumed from checkpoints after preemption.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                # name declared so that the rule below can name it (fieldPath)
                                "metadata": {
                                    "type": "object",
                                    "properties": {"name": {"type": "string"}},
                                },
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                            "x-kubernetes-validations": [
                                *frozen_rules(),
                                {
                                    "rule": name_rule,
                                    "message": f"metadata.name must be a DNS-1035 label of at "
                                    f"most {MAX_NAME_LENGTH} characters so that "
                                    "'<name>-worker-<index>' is a valid pod name",
                                    "fieldPath": ".metadata.name",
                                },
                            ],
                        }
                    },
                }
            ],
        },
    }


def frozen_rules() -> list[dict[str, str]]:
    """Transition rules: a started job's FROZEN_ONCE_STARTED fields cannot change (the
    apiserver names the field). At the root, where the stored status is visible."""
    started = "has(oldSelf.status) && has(oldSelf.status.startTime)"
    return [
        {
            "rule": f"!({started}) || "
            f"(has(self.spec.{f}) == has(oldSelf.spec.{f}) && "
            f"(!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f}))",
            "message": f"spec.{f} cannot change once the job has started; create a new job "
            "(suspend, deadlines, placement, resources and cost may change)",
            "fieldPath": f".spec.{f}",
        }
        for f in FROZEN_ONCE_STARTED
    ]


def crd_yaml() -> str:
    header = "# Generated by `kubegan crd` from kubegan_operator.api.spec. Do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)
