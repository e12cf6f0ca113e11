"""Reading a sweep file's YAML within bounds, refusing what YAML would read silently in one of two ways.

A sweep file is refused, with the key path of the problem, when it
- is larger than MAX_FILE_BYTES (checked before parsing: pure-Python PyYAML reads about 100 KB a second),
- nests deeper than MAX_DEPTH (PyYAML's composer recurses once per level: 100000 `[` would hit Python's
  recursion limit),
- uses an alias (`*name`): one alias repeats a whole subtree, so a few lines can stand for billions of values
  ("billion laughs"), and no sweep needs them,
- repeats a key in a mapping (YAML keeps the last one silently),
- holds .inf or .nan (no run identity can hash them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 256 * 1024  # the shipped sweeps are 1-3 KB
MAX_DEPTH = 50  # nested mappings / lists (a value counts as a level): the shipped sweeps reach 6
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"  # `<<:` overrides the merged keys by design: not a duplicate


class YAMLRefused(Exception):
    """A sweep file's text that is refused; `str()` is a `key path: reason` line (just a reason for the whole file)."""


def load_yaml(path: Path) -> Any:
    """The YAML document of the file at `path`, read within the bounds above (YAMLRefused otherwise; a syntax
    error is yaml.YAMLError)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise YAMLRefused(f"{size:,} bytes; a sweep file may have at most {MAX_FILE_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise YAMLRefused(f"not UTF-8 text (byte {e.start})") from None
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_tree(loader, node, [])
        return loader.construct_document(node)
    finally:
        loader.dispose()


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    """A sweep (a plain mapping) as YAML that load_yaml reads back: a value shared by two keys is written out twice,
    never as an alias (PyYAML's default), which load_yaml refuses."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False)


def _key_path(parts: list[str | int]) -> str:
    """`grid`, `rl.lr`, 1 -> `grid.rl.lr[1]`: keys dotted, list positions in brackets."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and nesting beyond MAX_DEPTH while it composes the node tree (before the
    composer's recursion goes deep), tracking the key path of the node being composed for the message."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._parts: list[str | int] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        # a mapping's value is composed with its key node as index, a list item with its position; a key with None
        part = index.value if isinstance(index, ScalarNode) else index
        self._depth += 1
        self._parts += [] if part is None else [part]
        try:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise YAMLRefused(f"{_key_path(self._parts)}: alias *{event.anchor} (line {_line(event)}): a sweep "
                                  "file may not use YAML aliases; write the values out")
            if self._depth > MAX_DEPTH:
                where = _key_path(self._parts[:4]) + ("..." if len(self._parts) > 4 else "")
                raise YAMLRefused(f"{where}: nested more than {MAX_DEPTH} levels deep (line "
                                  f"{_line(self.peek_event())}); a sweep file may nest at most {MAX_DEPTH}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._parts = self._parts[:-1] if part is not None else self._parts


def _check_tree(loader: _BoundedLoader, node: Node, parts: list[str | int]) -> None:
    """Refuse repeated keys and non-finite numbers (the tree is at most MAX_DEPTH deep: recursion is safe)."""
    if isinstance(node, ScalarNode) and node.tag == _FLOAT:
        if not math.isfinite(loader.construct_object(node)):
            raise YAMLRefused(f"{_key_path(parts)}: {node.value} (line {_line(node)}) is not a finite number")
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _check_tree(loader, item, [*parts, i])
    elif isinstance(node, MappingNode):
        first: dict[Any, Node] = {}
        for key_node, value_node in node.value:
            scalar = isinstance(key_node, ScalarNode) and key_node.tag != _MERGE
            key = loader.construct_object(key_node) if scalar else None
            if scalar and key in first:  # compared as Python will key the dict: 1 and 1.0 are one key
                lines = " and ".join(map(str, sorted({_line(first[key]), _line(key_node)})))
                raise YAMLRefused(f"{_key_path([*parts, str(key)])}: repeated key (line {lines}); YAML would keep the "
                                  "last one silently")
            if scalar:
                first[key] = key_node
            _check_tree(loader, value_node, [*parts, str(key) if scalar else "<key>"])


def _line(mark_holder: Any) -> int:
    return mark_holder.start_mark.line + 1
