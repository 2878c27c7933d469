"""YAML that is plain JSON data: string keys, no duplicate keys, no tags beyond JSON's types,
nesting depth bounded and aliases that may not expand a document beyond what a file of the
size limit could hold (no "billion laughs", no recursive aliases). Problems are `InputError`
lines, as for any user file (input_files.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from kubegan_operator.api.input_files import JOB_LIMITS, InputError, Limits, read_text

# Deeper than any Kubernetes object kubectl prints (managedFields reach about 20 levels).
MAX_DEPTH = 100


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
