"""Reading user files (jobs, node and pod lists) into models, with one-line problems.

Every failure becomes an `InputError` holding lines of the form `<where>: <reason>`, so the
CLI can print them and exit non-zero without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kubegan_operator.api import API_VERSION, KIND, GANTrainingJob


class InputError(Exception):
    """Bad user input; `problems` are complete one-line messages."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def read_text(path: str | Path) -> str:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError([f"{p}: no such file"]) from None
    except IsADirectoryError:
        raise InputError([f"{p}: is a directory, expected a YAML file"]) from None
    except OSError as err:
        raise InputError([f"{p}: cannot read ({err.strerror})"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError([f"{p}: not UTF-8 text (invalid byte at offset {err.start})"]) from None


def parse_yaml_documents(text: str, source: str) -> list[Any]:
    """All documents of a YAML stream, empty ones dropped."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "invalid YAML"
        raise InputError([f"{where}: invalid YAML: {problem}"]) from None
    except yaml.reader.ReaderError as err:
        raise InputError(
            [
                f"{source}: invalid YAML: character {err.character!r} at offset {err.position} "
                "is not allowed"
            ]
        ) from None
    except yaml.YAMLError as err:
        raise InputError([f"{source}: invalid YAML: {str(err).splitlines()[0]}"]) from None
    except RecursionError:
        raise InputError([f"{source}: invalid YAML: nested too deeply"]) from None
    return [d for d in docs if d is not None]


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
    elif err["type"] == "string_pattern_mismatch" and path.endswith("metadata.name"):
        msg = "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)"
    elif err["type"] == "string_too_long" and path.endswith("metadata.name"):
        msg = (
            f"at most {err['ctx']['max_length']} characters, so that "
            "'<name>-worker-<index>' is a valid pod name"
        )
    return [f"{path}: {msg[0].lower() + msg[1:]}"]


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
        head.append(f"apiVersion: must be {API_VERSION}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != KIND:
        head.append(f"kind: must be {KIND}, got {obj.get('kind')!r}")
    if head:
        raise InputError(head)
    try:
        return GANTrainingJob.model_validate(obj)
    except ValidationError as err:
        raise InputError(validation_problems(err)) from None


def load_job(path: str | Path) -> GANTrainingJob:
    """Read and validate one GANTrainingJob file."""
    source = str(path)
    docs = parse_yaml_documents(read_text(path), source)
    if not docs:
        raise InputError([f"{source}: empty file, expected a GANTrainingJob"])
    if len(docs) > 1:
        raise InputError([f"{source}: holds {len(docs)} documents, expected one GANTrainingJob"])
    return job_from_object(docs[0], source)


def load_objects(path: str | Path, kind: str) -> list[dict[str, Any]]:
    """Objects of `kind` from a `kubectl get -o yaml` List or a plain YAML stream."""
    source = str(path)
    objects: list[dict[str, Any]] = []
    for doc in parse_yaml_documents(read_text(path), source):
        items = doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc]
        if not isinstance(items, list):
            raise InputError([f"{source}: items: expected a list, got a {_kind(items)}"])
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputError([f"{source}: item {i}: expected a {kind} mapping"])
            if item.get("kind", kind) != kind:
                raise InputError([f"{source}: item {i}: expected kind {kind}, got {item['kind']}"])
            if not isinstance(item.get("metadata"), dict) or not item["metadata"].get("name"):
                raise InputError([f"{source}: item {i}: metadata.name is missing"])
            objects.append(item)
    return objects


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )
