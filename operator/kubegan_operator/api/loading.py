"""Reading user files (jobs, node and pod lists, price tables) into data, with one-line problems.

Every command reads its files through `read_text` and `read_yaml` here, so every file gets the
same limits: only regular files (a FIFO, a device or a directory is refused before anything is
read from it), a size bound per kind of file, UTF-8 only, and YAML that is plain JSON data —
string keys, no duplicate keys, no tags beyond JSON's types, nesting depth bounded and aliases
that may not expand a document beyond what a file of the size limit could hold (no "billion
laughs", no recursive aliases).

Every failure becomes an `InputError` holding lines of the form `<where>: <reason>`, so the
CLI can print them and exit non-zero without a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubegan_api.spec import API_VERSION, KIND, GANTrainingJob, decode_job
from pydantic import ValidationError
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from kubegan_operator.foundation.pools import PoolTemplate, from_declared

MiB = 1 << 20
# Deeper than any Kubernetes object kubectl prints (managedFields reach about 20 levels).
MAX_DEPTH = 100


@dataclass(frozen=True)
class Limits:
    """How much of one kind of file is read."""

    what: str  # "job file", "node list", ... for messages
    max_bytes: int

    @property
    def max_nodes(self) -> int:
        # Every YAML node takes at least two bytes of text ("a," or "[]"), so a document
        # without aliases never gets near this; only aliases can expand a file beyond it.
        return self.max_bytes // 2


# The apiserver stores an object in etcd only up to about 1.5 MiB; a job file is far smaller.
JOB_LIMITS = Limits("job file", 1 * MiB)
PRICE_LIMITS = Limits("price table", 1 * MiB)
POOL_LIMITS = Limits("node pool list", 1 * MiB)
# `kubectl get nodes/pods -A -o yaml` of a few thousand nodes or pods.
LIST_LIMITS = Limits("node or pod list", 32 * MiB)


class InputError(Exception):
    """Bad user input; `problems` are complete one-line messages."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


def read_bytes(path: str | Path, limits: Limits = JOB_LIMITS) -> bytes:
    """The bytes of a regular file of at most `limits.max_bytes`.

    Opened non-blocking and checked with fstat before any read: opening a FIFO for reading
    would otherwise wait for a writer forever, and /dev/zero never ends."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError([f"{p}: no such file"]) from None
    except IsADirectoryError:
        raise InputError([f"{p}: is a directory, expected a YAML file"]) from None
    except OSError as err:
        raise InputError([f"{p}: cannot open ({err.strerror or err})"]) from None
    except ValueError as err:  # an embedded NUL byte in the name
        raise InputError([f"{p!s:.200}: not a usable file name ({err})"]) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError([f"{p}: is a directory, expected a YAML file"])
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_TYPES if test(mode)), "not a plain file")
            raise InputError([f"{p}: is {kind}, not a regular file"])
        chunks: list[bytes] = []
        size = 0
        while size <= limits.max_bytes:
            chunk = os.read(fd, min(1 * MiB, limits.max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limits.max_bytes:
            raise InputError(
                [f"{p}: larger than {_size(limits.max_bytes)}, the limit for a {limits.what}"]
            )
        return b"".join(chunks)
    except OSError as err:
        if err.errno == errno.EISDIR:
            raise InputError([f"{p}: is a directory, expected a YAML file"]) from None
        raise InputError([f"{p}: cannot read ({err.strerror or err})"]) from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limits: Limits = JOB_LIMITS) -> str:
    """A regular UTF-8 file of at most `limits.max_bytes` as text."""
    data = read_bytes(path, limits)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError([f"{path}: not UTF-8 text (invalid byte at offset {err.start})"]) from None


# ---- YAML as JSON data ---------------------------------------------------------------------


class _JsonResolver(Resolver):
    """YAML 1.1's implicit types minus timestamps: kubectl sends `2024-01-01` as a string."""


_JsonResolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


class _PyParserBase(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


# libyaml's parser is several times faster; PyYAML may be built without it.
_CParserBase: type | None = None
if yaml.__with_libyaml__:

    class _CParserBase(yaml.cyaml.CParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.cyaml.CParser.__init__(self, stream)


class _Measured(Composer):
    """The composer, counting as it goes: depth, and the size each node would have once its
    aliases are expanded (what json.dumps, pydantic or a deep copy would walk)."""

    def _measure_init(self, limits: Limits) -> None:
        self.anchors: dict[str, Node] = {}
        self._limits = limits
        self._depth = 0
        self._open_anchors: set[str] = set()
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, height)
        self._total = 0  # over every document of the stream

    def compose_document(self) -> Node:
        node = super().compose_document()
        self._total += self._sizes[id(node)][0]
        if self._total > self._limits.max_nodes:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand the stream beyond {self._limits.max_nodes} nodes",
                node.start_mark,
            )
        self._sizes.clear()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if event.anchor in self._open_anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"recursive alias *{event.anchor}", event.start_mark
                )
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
            )
        anchor = (
            event.anchor
            if isinstance(event, ScalarEvent | SequenceStartEvent | MappingStartEvent)
            else None
        )
        self._depth += 1
        if anchor is not None:
            self._open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.discard(anchor)
        self._sizes[id(node)] = size, height = self._node_size(node)
        if height > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested deeper than {MAX_DEPTH} levels through aliases",
                node.start_mark,
            )
        if size + self._total > self._limits.max_nodes:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand the document beyond {self._limits.max_nodes} nodes",
                node.start_mark,
            )
        return node

    def _node_size(self, node: Node) -> tuple[int, int]:
        if isinstance(node, ScalarNode):
            return 1, 1
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        else:
            children = [part for pair in node.value for part in pair]
        size, height = 1, 0
        for child in children:
            s, h = self._sizes.get(id(child), (1, 1))
            size += s
            height = max(height, h)
        return size, height + 1


_REFUSED_TAGS = {
    "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:timestamp": "a timestamp",
    "tag:yaml.org,2002:set": "a set",
    "tag:yaml.org,2002:omap": "an ordered map",
    "tag:yaml.org,2002:pairs": "pairs",
}
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _JsonConstructor(SafeConstructor):
    """Plain JSON data only: string keys, each at most once per mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # `<<: *base` merges are allowed; their keys may be overridden
            if not isinstance(key_node, ScalarNode):
                raise ConstructorError(
                    None, None, "mapping keys must be strings", key_node.start_mark
                )
            key = self.construct_object(key_node)
            if not isinstance(key, str):
                raise ConstructorError(
                    None,
                    None,
                    f"mapping key {key_node.value!r} is not a string (quote it)",
                    key_node.start_mark,
                )
            if key in seen:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_refused(self, node: Node) -> Any:
        raise ConstructorError(
            None,
            None,
            f"{_REFUSED_TAGS[node.tag]} ({node.tag.rsplit(':', 1)[-1]}) is not JSON data",
            node.start_mark,
        )


for _tag in _REFUSED_TAGS:
    _JsonConstructor.add_constructor(_tag, _JsonConstructor.construct_refused)


def _loader_class(parser_base: type) -> type:
    """The project's loader on one parser: measured composer, JSON constructor/resolver."""

    class _Loader(parser_base, _Measured, _JsonConstructor, _JsonResolver):  # type: ignore[misc, valid-type]
        def __init__(self, stream: str, limits: Limits) -> None:
            parser_base.__init__(self, stream)
            self._measure_init(limits)
            _JsonConstructor.__init__(self)
            _JsonResolver.__init__(self)

        # libyaml's CParser brings its own C composer; the measured Python one must win.
        check_node = Composer.check_node
        get_node = Composer.get_node
        get_single_node = Composer.get_single_node
        compose_document = _Measured.compose_document
        compose_node = _Measured.compose_node

    return _Loader


_PY_LOADER = _loader_class(_PyParserBase)
_LOADER = _loader_class(_CParserBase) if _CParserBase is not None else _PY_LOADER
# Newer libyaml (PyYAML 6.0.4's) stops deep flow nesting in its scanner, which reads ahead of
# the composer that counts depth: its own words, at its own (later) position. The document is
# parsed again by the pure-Python parser so that the project's limit and position are reported.
_LIBYAML_DEPTH_PROBLEM = "maximum nesting depth"


def parse_yaml_documents(
    text: str, source: str, limits: Limits = JOB_LIMITS, *, loader_class: type | None = None
) -> list[Any]:
    """All documents of a YAML stream, empty ones dropped. `loader_class` is for tests: the
    pure-Python loader (`_PY_LOADER`) or the libyaml one (`_LOADER`, the default)."""
    loader_class = loader_class or _LOADER
    try:
        return _parse_documents(text, source, limits, loader_class)
    except _LibyamlTooDeep:
        return _parse_documents(text, source, limits, _PY_LOADER)


class _LibyamlTooDeep(Exception):
    """libyaml refused the nesting before the measured composer saw it."""


def _parse_documents(text: str, source: str, limits: Limits, loader_class: type) -> list[Any]:
    loader = loader_class(text, limits)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    except yaml.MarkedYAMLError as err:
        if loader_class is not _PY_LOADER and _LIBYAML_DEPTH_PROBLEM in (err.problem or ""):
            raise _LibyamlTooDeep from None
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "invalid YAML"
        raise InputError([f"{where}: invalid YAML: {problem}"]) from None
    except yaml.reader.ReaderError as err:
        raise InputError(
            [f"{source}: invalid YAML: {err.reason} (character at offset {err.position})"]
        ) from None
    except yaml.YAMLError as err:
        raise InputError([f"{source}: invalid YAML: {str(err).splitlines()[0]}"]) from None
    except RecursionError:  # not expected with MAX_DEPTH; a last line of defence
        raise InputError([f"{source}: invalid YAML: nested too deeply"]) from None
    finally:
        loader.dispose()
    return [d for d in docs if d is not None]


def read_yaml(path: str | Path, limits: Limits) -> list[Any]:
    """The non-empty documents of a YAML file, read within `limits`."""
    return parse_yaml_documents(read_text(path, limits), str(path), limits)


# ---- jobs ----------------------------------------------------------------------------------

# Friendlier words than "string should match pattern '…'" for fields people type by hand.
_PATTERN_HINTS = {
    "metadata.name": "must be a DNS-1035 label (lowercase letters, digits and '-', "
    "starting with a letter)",
    "spec.image": "must be a container image reference such as registry.example/name:tag "
    "(no spaces or control characters)",
    "spec.resources.tpu.topology": "must be a TPU slice shape such as 2x4, 4x4 or 2x2x4: two "
    "or three dimensions, each 1, 2 or a multiple of 4",
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
    elif err["type"] == "string_pattern_mismatch" and path in _PATTERN_HINTS:
        msg = _PATTERN_HINTS[path]
    elif err["type"] == "string_too_long" and path.endswith("metadata.name"):
        msg = (
            f"at most {err['ctx']['max_length']} characters, so that "
            "'<name>-worker-<index>' is a valid pod name"
        )
    # One line per problem: a value quoted in a message may itself hold line breaks.
    line = f"{path}: {msg[0].lower() + msg[1:]}" if msg else f"{path}: invalid"
    return [" ".join(line.splitlines())]


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
