"""Reading user files (jobs, node and pod lists, price tables) into data, with one-line problems.

Every command reads its files through `read_text` (input_files.py) and `read_yaml`
(yaml_json.py), so every file gets the same limits: only regular files, a size bound per kind
of file, UTF-8 only, and YAML that is plain JSON data with bounded depth and aliases.

Every failure becomes an `InputError` holding lines of the form `<where>: <reason>`, so the
CLI can print them and exit non-zero without a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegan_api.spec import API_VERSION, KIND, GANTrainingJob, decode_job
from kubegan_api.text import control_problem
from pydantic import ValidationError

from kubegan_operator.api.input_files import (
    JOB_LIMITS,
    LIST_LIMITS,
    POOL_LIMITS,
    PRICE_LIMITS,
    InputError,
)
from kubegan_operator.api.yaml_json import read_yaml
from kubegan_operator.foundation.pools import PoolTemplate, from_declared

# ---- jobs ----------------------------------------------------------------------------------

# Friendlier words than "string should match pattern '…'" for fields people type by hand.
_PATTERN_HINTS = {
    "metadata.name": "must be a DNS-1035 label (lowercase letters, digits and '-', "
    "starting with a letter)",
    "spec.image": "must be a container image reference such as registry.example/name:tag "
    "(no spaces or control characters)",
    "spec.resources.tpu.topology": "must be a TPU slice shape such as 2x4, 4x4 or 2x2x4: two "
    "or three dimensions, each 1, 2 or a multiple of 4",
    "spec.podTemplate.spec.securityContext.seccompProfile.localhostProfile": "must be a path "
    "relative to the kubelet's seccomp directory: not absolute, no '.' or '..' part",
}


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location as DESIGN's dotted camelCase path (`spec.resources.gpus`)."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in {"str", "int", "float", "bool"} or item.startswith(("function-", "lax-")):
            continue  # union branch tags, not fields
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(document)"


def _describe(err: dict[str, Any]) -> list[str]:
    loc = tuple(err["loc"])
    if len(loc) >= 2 and loc[-1] == "[key]":  # a map key, not a value, is wrong
        return [f"{_loc_to_path(loc[:-2])}: key {loc[-2]!r} is not a valid label key"]
    path = _loc_to_path(loc)
    if err["type"] == "cross_field":
        return [f"{path}{field_path}: {message}" for field_path, message in err["ctx"]["rules"]]
    if err["type"] == "extra_forbidden":
        return [f"{path}: unknown field"]
    if err["type"] == "missing":
        return [f"{path}: required field is missing"]
    msg = err["msg"]
    if err["type"] == "value_error":
        msg = str(err["ctx"]["error"])
    elif err["type"] == "enum":
        msg = f"must be one of {err['ctx']['expected'].replace(' or ', ', ')}"
    elif err["type"] == "string_pattern_mismatch":
        msg = _pattern_message(err["input"], path) or msg
    elif err["type"] == "string_too_long" and path.endswith("metadata.name"):
        msg = (
            f"at most {err['ctx']['max_length']} characters, so that "
            "'<name>-worker-<index>' is a valid pod name"
        )
    # One line per problem: a value quoted in a message may itself hold line breaks.
    line = f"{path}: {msg[0].lower() + msg[1:]}" if msg else f"{path}: invalid"
    return [" ".join(line.splitlines())]


def _pattern_message(value: Any, path: str) -> str | None:
    """The field's own words for a value its pattern refuses, where it has them; else, for a
    control character, which one (escaped, never printed: it could rewrite the terminal or
    forge a line); else None (pydantic's words)."""
    text = value if isinstance(value, str) else ""
    controls = control_problem(text, multiline=True) or control_problem(text)
    return _PATTERN_HINTS.get(path) or controls


def validation_problems(err: ValidationError) -> list[str]:
    lines: list[str] = []
    for e in err.errors(include_url=False):
        lines.extend(_describe(dict(e)))
    return list(dict.fromkeys(lines))


def job_from_object(obj: Any, source: str) -> GANTrainingJob:
    if not isinstance(obj, dict):
        raise InputError([f"{source}: expected a mapping (a GANTrainingJob), got a {_kind(obj)}"])
    head: list[str] = []
    if obj.get("apiVersion") != API_VERSION:
        head.append(f"apiVersion: must be {API_VERSION}, got {_short(obj.get('apiVersion'))}")
    if obj.get("kind") != KIND:
        head.append(f"kind: must be {KIND}, got {_short(obj.get('kind'))}")
    if head:
        raise InputError(head)
    try:
        return decode_job(obj, max_bytes=JOB_LIMITS.max_bytes)
    except ValidationError as err:
        raise InputError(validation_problems(err)) from None
    except ValueError as err:  # the expanded document is larger than the apiserver takes
        raise InputError([f"{source}: {err}"]) from None


def load_job(path: str | Path) -> GANTrainingJob:
    """Read and validate one GANTrainingJob file."""
    source = str(path)
    docs = read_yaml(path, JOB_LIMITS)
    if not docs:
        raise InputError([f"{source}: empty file, expected a GANTrainingJob"])
    if len(docs) > 1:
        raise InputError([f"{source}: holds {len(docs)} documents, expected one GANTrainingJob"])
    return job_from_object(docs[0], source)


# ---- node and pod lists, price tables ------------------------------------------------------


def load_objects(path: str | Path, kind: str) -> list[dict[str, Any]]:
    """Objects of `kind` from a `kubectl get -o yaml` List or a plain YAML stream. Only their
    outline is checked here; `topology.build_inventory` decodes the fields it uses."""
    source = str(path)
    objects: list[dict[str, Any]] = []
    for doc in read_yaml(path, LIST_LIMITS):
        items = doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc]
        if items is None:  # `kubectl get` of nothing prints `items: []`; null means the same
            continue
        if not isinstance(items, list):
            raise InputError([f"{source}: items: expected a list, got a {_kind(items)}"])
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputError(
                    [f"{source}: item {i}: expected a {kind} mapping, got a {_kind(item)}"]
                )
            if item.get("kind", kind) != kind:
                raise InputError(
                    [f"{source}: item {i}: expected kind {kind}, got {_short(item['kind'])}"]
                )
            meta = item.get("metadata")
            if not isinstance(meta, dict) or meta.get("name") in (None, ""):
                raise InputError([f"{source}: item {i}: metadata.name is missing"])
            if not isinstance(meta["name"], str):
                raise InputError(
                    [
                        f"{source}: item {i}: metadata.name: expected a string, "
                        f"got a {_kind(meta['name'])}"
                    ]
                )
            objects.append(item)
    return objects


def load_prices(path: str | Path) -> Any:
    """A price table file (`kubegan plan --prices`, `kubegan operator --prices`)."""
    from kubegan_operator.api.pricing import PriceTable

    source = str(path)
    docs = read_yaml(path, PRICE_LIMITS)
    if len(docs) > 1:
        raise InputError([f"{source}: holds {len(docs)} documents, expected one price table"])
    try:
        return PriceTable.from_mapping(docs[0] if docs else {})
    except ValidationError as err:
        raise InputError([f"{source}: {line}" for line in validation_problems(err)]) from None
    except ValueError as err:
        raise InputError([f"{source}: {str(err).splitlines()[0]}"]) from None


def load_node_pools(path: str | Path) -> list[PoolTemplate]:
    """The autoscaled pools of `kubegan operator --node-pools` (the chart's
    `autoscaling.pools`): a list, or a mapping holding it under `pools`."""
    source = str(path)
    docs = read_yaml(path, POOL_LIMITS)
    if len(docs) > 1:
        raise InputError([f"{source}: holds {len(docs)} documents, expected one pool list"])
    data = docs[0] if docs else []
    if isinstance(data, dict) and set(data) == {"pools"}:
        data = data["pools"]
    try:
        return from_declared(data)
    except ValueError as err:
        raise InputError([f"{source}: {str(err).splitlines()[0]}"]) from None


def _kind(value: Any) -> str:
    return {
        list: "list",
        dict: "mapping",
        str: "string",
        int: "number",
        float: "number",
        bool: "boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    """A value quoted in a one-line message: repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
