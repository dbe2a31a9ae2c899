"""Bounded YAML reading: no input may make config loading take unbounded time or memory.

PyYAML shares one object for every alias of an anchor, so a few hundred bytes of nested aliases
(a "billion laughs") load instantly into a graph that every later walk (validation, deep copy,
printing) expands into billions of values. So the composed node graph is measured before any
object is constructed: its size with every alias expanded, and its depth, each under a limit far
above any real workload. The file's size is bounded too, and ints beyond int64 (which no key
can use) are refused while parsing.
"""
from __future__ import annotations

import yaml

from ..errors import ConfigError

MAX_FILE_BYTES = 1 << 20  # the bundled workloads are ~2 KiB
MAX_EXPANDED_NODES = 100_000  # scalars, lists and mappings, every alias counted in full
MAX_DEPTH = 64  # nesting of lists and mappings
INT64_MAX = 2**63 - 1


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last one silently), ints beyond
    int64, and nesting deeper than MAX_DEPTH (PyYAML's composer recurses once per level)."""

    _depth = 0

    def compose_node(self, parent, index):
        """Compose one node, refusing to go deeper than MAX_DEPTH before Python's stack would."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _mapping_without_duplicates(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"found duplicate key {_short(key)}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


def _bounded_int(loader, node):
    text = loader.construct_scalar(node)
    digits = len(text.lstrip("+-").replace("_", ""))
    value = None if digits > 40 else yaml.SafeLoader.construct_yaml_int(loader, node)
    if value is None or abs(value) > INT64_MAX:
        raise yaml.constructor.ConstructorError(
            None, None, f"the integer {_short(text)} is too large (at most 2^63-1)", node.start_mark)
    return value


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
StrictLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def _short(value, limit: int = 40) -> str:
    text = repr(value) if not isinstance(value, str) or len(value) <= limit else repr(value[:limit]) + "..."
    return text if len(text) <= limit + 8 else text[: limit + 5] + "..."


def check_graph(root) -> None:
    """Raise ValueError when the node graph, aliases expanded, is too large or too deep.

    Iterative (a deep document must not exhaust Python's stack) and linear in the distinct
    nodes: each node's expanded size is computed once and reused for every alias of it.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[key] = total
            if total > MAX_EXPANDED_NODES:
                raise ValueError(f"the document expands to more than {MAX_EXPANDED_NODES:,} values "
                                 "(nested aliases?); a workload is a few dozen keys")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ValueError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it")
        if depth > MAX_DEPTH:
            raise ValueError(f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, depth, True))
        for child in _children(node):
            if id(child) not in sizes:
                stack.append((child, depth + 1, False))


def _children(node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_bounded(source: str, where: str):
    """Parse one YAML document within the limits above; ConfigError naming `where` otherwise."""
    if len(source) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: {len(source):,} characters; a workload file may have at most "
                          f"{MAX_FILE_BYTES:,}")
    loader = None
    try:
        try:
            loader = StrictLoader(source)  # the reader checks the characters here: inside the try
            node = loader.get_single_node()
            if node is None:
                return None
            check_graph(node)
            return loader.construct_document(node)
        finally:
            if loader is not None:
                loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(str(exc.problem or exc.context or "").split())
        raise ConfigError(f"{where}: not valid YAML: {at}{what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not a workload: nested too deeply to parse (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not a workload: {exc}") from None
