"""Dotted key paths over the nested dicts a YAML workload loads into."""
from __future__ import annotations

from .distributions import DIST_KEYS

MISSING = object()


def get_path(tree: dict, parts) -> object:
    """The value at `parts`, or MISSING."""
    node = tree
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_path(tree: dict, parts, value) -> None:
    """Set the value at `parts`, creating mappings on the way; ValueError if a scalar is in the way.

    A time given as a plain number turns into `{mean: number}` when a distribution key is set
    below it, so `train.computation_time.stdev=0.01` works on `computation_time: 0.3`.
    """
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            if parts[i + 1] in DIST_KEYS and isinstance(child, (int, float)) and not isinstance(child, bool):
                child = node[part] = {"mean": child}
            else:
                where = ".".join(parts[: i + 1])
                raise ValueError(f"{where} holds {child!r}, not a mapping, so {'.'.join(parts)} cannot be set")
        node = child
    node[parts[-1]] = value


def pop_path(tree: dict, parts) -> object:
    """Remove and return the value at `parts` (MISSING if absent); drops mappings left empty."""
    parent = get_path(tree, parts[:-1]) if len(parts) > 1 else tree
    if not isinstance(parent, dict) or parts[-1] not in parent:
        return MISSING
    value = parent.pop(parts[-1])
    if len(parts) > 1 and not parent:
        pop_path(tree, parts[:-1])
    return value
