"""Command-line overrides: `section.key=value`, and DLIO's `++workload.section.key=value`.

Values are YAML (`reader.batch_size=8`, `reader.file_shuffle=seed`,
`train.computation_time={mean: 0.1, stdev: 0.01}`). Old-dialect names are translated like the
YAML's own keys. Overriding a key that exists neither in iogen nor in DLIO is an error.
"""
from __future__ import annotations

import typing

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .distributions import DIST_KEYS
from .dlio import DLIO_KEYS, DLIO_ONLY_SECTIONS, SECTION_ALIASES, V3_STORAGE_KEYS, canonical_path, dlio_keys_of
from .paths import set_path
from .problems import did_you_mean, unknown_key
from .schema import DIST_FIELDS, SECTIONS, TOP_LEVEL_KEYS, TrainPatch
from .yamlread import load_bounded


@dataclass(frozen=True)
class Override:
    """One parsed override: the key path (current-main names) and the YAML value."""

    text: str
    path: tuple[str, ...]
    value: object

    @property
    def targets_accelerators(self) -> bool:
        """True for overrides of the accelerators table, applied before an entry is chosen."""
        return self.path[0] in ("accelerators", "accelerator")


def parse_overrides(texts: Sequence[str]) -> tuple[list[Override], list[str]]:
    """Parse and check every override; returns (overrides, problems)."""
    parsed, problems = [], []
    for text in texts:
        try:
            parsed += _expand(_parse_one(text))
        except ValueError as exc:
            problems.append(f"override {text!r}: {exc}")
    valid = []
    for item in parsed:
        problem = check_path(item.path)
        if problem:
            problems.append(f"override {item.text!r}: {problem}")
        else:
            valid.append(item)
    return valid, problems


def apply_overrides(tree: dict, overrides: Sequence[Override]) -> list[str]:
    """Set each override's value in `tree`; returns problems."""
    problems = []
    for item in overrides:
        try:
            set_path(tree, item.path, item.value)
        except ValueError as exc:
            problems.append(f"override {item.text!r}: {exc}")
    return problems


def _parse_one(text: str) -> Override:
    body = text.strip()
    if body.startswith("~"):
        raise ValueError("deleting keys is not supported; set the key to the value you want")
    body = body.lstrip("+")
    key, sep, value_text = body.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError("expected KEY=VALUE, e.g. reader.batch_size=8")
    parts = tuple(key.split("."))
    if parts[0] == "workload":
        if len(parts) == 1:
            raise ValueError("choose the workload with the WORKLOAD argument, not an override")
        parts = parts[1:]
    if any(not p for p in parts):
        raise ValueError(f"{key!r} is not a key path")
    try:
        value = load_bounded(value_text, "the value") if value_text.strip() else None
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return Override(text, canonical_path(parts, value), value)


def _expand(item: Override) -> list[Override]:
    # A whole section given as a mapping is the same as one override per key in it.
    if len(item.path) == 1 and item.path[0] in SECTIONS and isinstance(item.value, dict):
        out = []
        for key, value in item.value.items():
            out += _expand(Override(item.text, canonical_path(item.path + (str(key),), value), value))
        return out
    return [item]


def check_path(path: tuple[str, ...]) -> str | None:
    """None when `path` names a key iogen or DLIO knows, else the problem (with did-you-mean)."""
    head, rest = path[0], path[1:]
    if head in TOP_LEVEL_KEYS and head != "accelerators":
        return None if not rest else f"{head} is not a mapping"
    if head == "accelerators":
        return _check_accelerator_path(rest)
    if head in DLIO_ONLY_SECTIONS:
        if not rest:
            return None
        return None if (head, rest[0]) in DLIO_KEYS else unknown_key(head, rest[0], dlio_keys_of(head))
    if head not in SECTIONS:
        choices = list(SECTIONS) + list(TOP_LEVEL_KEYS) + list(DLIO_ONLY_SECTIONS) + list(SECTION_ALIASES)
        return f"{head}: unknown section{did_you_mean(head, choices)}; sections: {', '.join(sorted(SECTIONS))}"
    if not rest:
        return f"{head}: give a key inside it (e.g. {head}.{next(iter(SECTIONS[head].model_fields))}=...) or a mapping"
    key, deeper = rest[0], rest[1:]
    fields = list(SECTIONS[head].model_fields)
    if key in fields:
        sub = SECTIONS[head].model_fields[key].annotation
        if deeper and not isinstance(sub, type):  # Optional[Section] (dataset.parquet)
            inner = [a for a in typing.get_args(sub) if isinstance(a, type) and hasattr(a, "model_fields")]
            sub = inner[0] if inner else sub
        if deeper and isinstance(sub, type) and hasattr(sub, "model_fields"):  # a nested section
            if deeper[0] in sub.model_fields:
                return _check_below_field((head, key, deeper[0]), deeper[1:])
            return unknown_key(f"{head}.{key}", deeper[0], list(sub.model_fields))
        return _check_below_field((head, key), deeper)
    if (head, key) in DLIO_KEYS or (head, key) in V3_STORAGE_KEYS:  # the latter: mapped by dlio._v3_storage
        return None
    return unknown_key(head, key, fields, dlio_keys_of(head))


def _check_below_field(field: tuple[str, ...], deeper: tuple[str, ...]) -> str | None:
    if not deeper:
        return None
    if field[-2:] in DIST_FIELDS or field[-1] == "computation_time":
        if len(deeper) == 1 and deeper[0] in DIST_KEYS:
            return None
        return f"{'.'.join(field + deeper)}: a time distribution takes {', '.join(DIST_KEYS)}{did_you_mean(deeper[0], DIST_KEYS)}"
    return f"{'.'.join(field)} is not a mapping"


def _check_accelerator_path(rest: tuple[str, ...]) -> str | None:
    if len(rest) <= 1:
        return None
    if rest[0] == "default":
        return "accelerators.default is not a mapping"
    fields = list(TrainPatch.model_fields)
    if rest[1] not in fields:
        return unknown_key(f"accelerators.{rest[0]}", rest[1], fields)
    return _check_below_field(("accelerators", rest[0], rest[1]), rest[2:])
