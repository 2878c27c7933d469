"""A checkpoint's `manifest.json`, checked for shape in one place.

The manifest is written last and says what a whole checkpoint is: its position, when it
was written, and the size and sha256 of every file. Anyone who can write the checkpoint
volume can write a manifest too (a hand edit, a copy from another tool, a half-restored
backup), so one that parses but has the wrong shape is a damaged checkpoint like one that
fails its checksums: `parse_manifest` raises ManifestError with a one-line reason and the
store moves the checkpoint aside. Nothing reads manifest fields any other way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MANIFEST = "manifest.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """Why a manifest is not one (one line)."""


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    epoch: int
    step: int
    created: float | None
    files: dict[str, FileEntry]
    extra: dict[str, Any] = field(default_factory=dict)  # world_size, framework, ...


def _what(value: object) -> str:
    """A JSON value's kind in words, for messages (never the value: it may be huge)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction" if value == value else "NaN"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _count(data: dict[str, Any], key: str, where: str = "") -> int:
    """A non-negative integer field (not a bool, not a float)."""
    value = data.get(key)
    if type(value) is int and value >= 0:
        return value
    if key not in data:
        raise ManifestError(f"{where}{key}: missing")
    got = "a negative one" if type(value) is int else _what(value)
    raise ManifestError(f"{where}{key}: expected a non-negative integer, got {got}")


def _created(data: dict[str, Any]) -> float | None:
    value = data.get("created")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ManifestError(f"created: expected a time in seconds, got {_what(value)}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = float("inf")
    if not 0 <= seconds < 1e11:  # NaN fails too
        raise ManifestError("created: expected a time in seconds, got an impossible one")
    return seconds


def _file_name_problem(name: str) -> str | None:
    """A listed file must be a plain name inside the checkpoint folder: no path, no
    parent, not the manifest itself (so checking it never reads outside the folder)."""
    if name in ("", ".", "..", MANIFEST) or "/" in name or "\0" in name or len(name) > 255:
        return f"files: {name[:60]!r} is not the name of a file in the checkpoint"
    return None


def _files(data: dict[str, Any]) -> dict[str, FileEntry]:
    listed = data.get("files")
    if not isinstance(listed, dict):
        if "files" not in data:
            raise ManifestError("files: missing")
        raise ManifestError(f"files: expected an object of file entries, got {_what(listed)}")
    if not listed:
        raise ManifestError("files: lists no files")
    out = {}
    for name, info in listed.items():
        problem = _file_name_problem(name)
        if problem:
            raise ManifestError(problem)
        where = f"files.{name}."
        if not isinstance(info, dict):
            raise ManifestError(f"files.{name}: expected an object, got {_what(info)}")
        sha = info.get("sha256")
        if not isinstance(sha, str) or not _SHA256.match(sha):
            raise ManifestError(f"{where}sha256: expected 64 hex digits")
        out[name] = FileEntry(_count(info, "bytes", where), sha)
    return out


def manifest_from(data: object) -> Manifest:
    """The Manifest in a parsed JSON value, or ManifestError naming the first problem."""
    if not isinstance(data, dict):
        raise ManifestError(f"expected a JSON object, got {_what(data)}")
    known = {"epoch", "step", "created", "files"}
    return Manifest(
        epoch=_count(data, "epoch"),
        step=_count(data, "step"),
        created=_created(data),
        files=_files(data),
        extra={k: v for k, v in data.items() if k not in known},
    )


def parse_manifest(raw: bytes) -> Manifest:
    """The Manifest in a manifest file's bytes, or ManifestError (one line)."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ManifestError("not JSON (nested too deeply)") from None
    except ValueError as err:  # JSONDecodeError, bad UTF-8
        raise ManifestError(f"not JSON ({str(err).splitlines()[0][:120]})") from None
    return manifest_from(data)
