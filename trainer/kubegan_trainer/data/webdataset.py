"""WebDataset tar shards of images, read with the standard library's `tarfile` (no new
dependency, and nothing of the archive is extracted or executed: the members are sliced
out of the shard's bytes).

The WebDataset convention: a shard is a plain (uncompressed) `.tar`; the members of one
sample share a key, the member's path up to the first dot of its name (`000123.png` and
`000123.cls` are sample `000123`'s image and label). kubegan reads one image member per
sample (`.png`, `.jpg`, ...) and, when the set is labelled, its `.cls` (the class index as
decimal text); other members (`.json`, `.txt`) are ignored. `kubegan data pack` writes such
shards with an index (`kubegan-shards.json`: `{"format": "webdataset", "files": {shard:
samples}, "classes": [names]}`) so that training counts the samples without reading them.

A shard is data, never trusted: only regular members and directories (skipped) are read;
a link, device, FIFO or sparse member, a path that is absolute or climbs out with `..`, a
member over IMAGE_MAX_BYTES, a repeated member, a sample without an image, and an archive
that ends before its end-of-archive blocks (truncated) are each refused in one line naming
the shard.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kubegan_trainer.base.bounded_read import IMAGE_MAX_BYTES
from kubegan_trainer.base.errors import TrainerError

TAR_SUFFIXES = (".tar",)
LABEL_EXT = "cls"
IMAGE_EXTS = ("png", "jpg", "jpeg", "bmp", "gif", "webp")
INDEX_FORMAT = "webdataset"
MAX_CLASSES = 100_000
_BLOCK = 512


@dataclass
class Sample:
    key: str
    members: dict[str, bytes] = field(default_factory=dict)  # extension -> bytes


def split_name(name: str) -> tuple[str, str]:
    """(key, extension) of a member path, split at the first dot of its file name."""
    path = PurePosixPath(name)
    stem, dot, ext = path.name.partition(".")
    key = (path.parent / stem).as_posix() if path.parent != PurePosixPath(".") else stem
    return key, ext.lower() if dot else ""


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why a member cannot be read as sample data, in a few words; None when it can."""
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts:
        return "has a path outside the archive"
    if member.issym() or member.islnk():
        return "is a link"
    if member.issparse() or not member.isreg():
        return "is not a regular file"
    if member.size > IMAGE_MAX_BYTES:
        return f"is {member.size} bytes, more than a member may be ({IMAGE_MAX_BYTES})"
    if not split_name(member.name)[1]:
        return "has no extension (WebDataset names members KEY.EXT)"
    return None


def _members(raw: bytes, name: str, field_name: str) -> Iterator[tuple[str, bytes]]:
    """(member path, bytes) of every regular member, in archive order."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")  # noqa: SIM115 (closed below)
    except (tarfile.TarError, EOFError, ValueError) as err:
        raise TrainerError(f"{field_name}: {name} is not a tar archive ({err})") from None
    with archive:
        while True:
            try:
                member = archive.next()
            except (tarfile.TarError, EOFError, ValueError) as err:
                raise TrainerError(
                    f"{field_name}: {name} is a damaged or truncated tar ({err})"
                ) from None
            if member is None:
                break
            if member.isdir():
                continue
            problem = _member_problem(member)
            if problem is not None:
                raise TrainerError(f"{field_name}: {name}: member {member.name[:200]!r} {problem}")
            end = member.offset_data + member.size
            if end > len(raw):
                raise _truncated(name, field_name)
            yield member.name, raw[member.offset_data : end]
        # tarfile stops quietly at a header it cannot read past the first: only the
        # end-of-archive block (zeros) means the shard is whole.
        tail = raw[archive.offset : archive.offset + _BLOCK]
        if len(tail) < _BLOCK or tail.count(0) != _BLOCK:
            raise _truncated(name, field_name)


def _truncated(name: str, field_name: str) -> TrainerError:
    return TrainerError(f"{field_name}: {name} ends before its end-of-archive block (truncated?)")


def tar_samples(raw: bytes, name: str, field_name: str) -> list[Sample]:
    """The samples of one shard, in archive order (a sample's members grouped by key)."""
    samples: dict[str, Sample] = {}
    for path, data in _members(raw, name, field_name):
        key, ext = split_name(path)
        sample = samples.setdefault(key, Sample(key))
        if ext in sample.members:
            raise TrainerError(f"{field_name}: {name}: member {path[:200]!r} appears twice")
        sample.members[ext] = data
    if not samples:
        raise TrainerError(f"{field_name}: {name} holds no samples")
    return list(samples.values())


def sample_image(sample: Sample, name: str, field_name: str) -> tuple[str, bytes]:
    """The one image member of a sample: (its member name, its bytes)."""
    found = [ext for ext in sample.members if ext in IMAGE_EXTS]
    if len(found) != 1:
        what = "no image" if not found else f"{len(found)} images"
        raise TrainerError(
            f"{field_name}: {name}: sample {sample.key[:200]!r} has {what} "
            f"(one of .{', .'.join(IMAGE_EXTS)})"
        )
    return f"{sample.key}.{found[0]}", sample.members[found[0]]


def sample_label(sample: Sample, classes: int, name: str, field_name: str) -> int:
    """A labelled sample's class index, from its `.cls` member."""
    raw = sample.members.get(LABEL_EXT)
    where = f"{field_name}: {name}: sample {sample.key[:200]!r}"
    if raw is None:
        raise TrainerError(f"{where} has no .{LABEL_EXT} label (the set is labelled)")
    text = raw[:32].decode("ascii", "replace").strip()
    if len(raw) > 32 or not text.isdigit() or int(text) >= classes:
        raise TrainerError(f"{where}: .{LABEL_EXT} is not a class index below {classes}")
    return int(text)


def index_classes(raw: bytes, field_name: str, index_name: str) -> list[str]:
    """The class names of a WebDataset index (empty: unlabelled)."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        parsed = None
    classes = parsed.get("classes", []) if isinstance(parsed, dict) else None
    if (
        not isinstance(classes, list)
        or len(classes) > MAX_CLASSES
        or not all(isinstance(c, str) for c in classes)
    ):
        raise TrainerError(
            f'{field_name}: {index_name} has no list of class names under "classes"; '
            "delete it to count the shards"
        )
    return classes
