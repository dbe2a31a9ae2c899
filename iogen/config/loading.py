"""Load a workload: read YAML, translate DLIO's dialects, apply overrides and accelerator, validate.

Every problem found on the way is collected and raised together as one ConfigError; warnings
(ConfigWarning) are issued only for a workload that loads.
"""
from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from importlib import resources

from pydantic import ValidationError

from ..errors import ConfigError
from .dlio import screen, translate
from .overrides import apply_overrides, parse_overrides
from .problems import ConfigWarning, did_you_mean, pydantic_lines, show
from .schema import Workload
from .yamlread import MAX_FILE_BYTES, load_bounded

PACKAGE = "iogen.workloads"
SUFFIXES = (".yaml", ".yml")


def list_workloads() -> list[str]:
    """Names of the bundled workloads."""
    return sorted(
        entry.name[: -len(".yaml")]
        for entry in resources.files(PACKAGE).iterdir()
        if entry.name.endswith(".yaml")
    )


def load_workload(name_or_path: str, overrides: Sequence[str] = (), accelerator: str | None = None) -> Workload:
    """A validated Workload from a bundled name or a YAML path, with overrides and accelerator applied."""
    name, raw = read_workload_yaml(name_or_path)
    return build_workload(raw, name, overrides, accelerator)


def build_workload(raw: dict, name: str, overrides: Sequence[str] = (), accelerator: str | None = None) -> Workload:
    """A validated Workload from an already-parsed YAML mapping (see load_workload)."""
    tree, problems, notes = translate(copy.deepcopy(raw))
    parsed, override_problems = parse_overrides(overrides)
    problems += override_problems
    # Overrides of the accelerator table first, then the chosen entry over `train`, then the
    # rest: so `train.computation_time.stdev=0.01` adds to the chosen accelerator's time.
    problems += apply_overrides(tree, [o for o in parsed if o.targets_accelerators])
    problems += _apply_accelerator(tree, accelerator)
    problems += apply_overrides(tree, [o for o in parsed if not o.targets_accelerators])
    tree.setdefault("name", name)
    clean, screen_problems, screen_notes = screen(tree)
    problems += screen_problems
    notes += screen_notes
    workload = None
    try:
        workload = Workload.model_validate(clean)
    except ValidationError as exc:
        problems += pydantic_lines(exc)
    if problems:
        raise ConfigError(_unique(problems))
    for note in notes:
        warnings.warn(f"{name}: {note}", ConfigWarning, stacklevel=3)
    return workload


def read_workload_yaml(name_or_path: str) -> tuple[str, dict]:
    """(workload name, parsed YAML mapping) for a bundled name or a path; ConfigError if unreadable."""
    text = str(name_or_path)
    bundled = resources.files(PACKAGE).joinpath(f"{text}.yaml")
    is_path = text.endswith(SUFFIXES) or os.sep in text or (not bundled.is_file() and os.path.isfile(text))
    if is_path:
        name = os.path.splitext(os.path.basename(text))[0]
        source = _read_text(text)
    else:
        name, entry = text, bundled
        if not entry.is_file():
            known = list_workloads()
            raise ConfigError(
                f"unknown workload {text!r}{did_you_mean(text, known)}; bundled workloads: "
                f"{', '.join(known)}; or give the path of a YAML file"
            )
        source = entry.read_text(encoding="utf-8")
    return name, parse_yaml(source, where=text)


def parse_yaml(source: str, where: str = "<string>") -> dict:
    """Parse workload YAML; duplicate keys and a non-mapping document are errors."""
    data = load_bounded(source, where)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a workload must be a mapping of sections, got {show(data)}")
    return data


def _read_text(path: str) -> str:
    """A workload file's text: at most MAX_FILE_BYTES, UTF-8; ConfigError naming the file otherwise."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"workload file {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"workload file {path}: larger than {MAX_FILE_BYTES:,} bytes; a workload is a "
                          "few KiB of YAML")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"workload file {path} at byte offset {exc.start}: not UTF-8 text "
                          f"(byte 0x{data[exc.start]:02x})") from None


def _apply_accelerator(tree: dict, accelerator: str | None) -> list[str]:
    table = tree.get("accelerators")
    table = table if isinstance(table, dict) else {}
    entries = sorted(k for k, v in table.items() if k != "default" and isinstance(v, dict))
    if accelerator is None and not table:
        # Without a table, `accelerator` only records which entry produced the train section
        # (as a resolved config.yaml does); there is nothing to apply.
        return []
    chosen = accelerator
    for candidate in (tree.get("accelerator"), table.get("default")):
        if chosen is None and isinstance(candidate, str):
            chosen = candidate
    if chosen is None:
        return []
    if chosen not in entries:
        known = ", ".join(entries) if entries else "none (the workload has no accelerators table)"
        tree.pop("accelerator", None)
        return [f"accelerator {chosen!r} is unknown{did_you_mean(chosen, entries)}; known: {known}"]
    train = tree.get("train")
    if not isinstance(train, dict):
        train = tree["train"] = {} if train is None else train
    entry = copy.deepcopy(table[chosen])
    if "batch_size" in entry:  # the accelerator's batch: reader.batch_size (an override still wins)
        reader = tree.get("reader")
        if not isinstance(reader, dict):
            reader = tree["reader"] = {}
        reader["batch_size"] = entry.pop("batch_size")
    if isinstance(train, dict):
        train.update(entry)
    tree["accelerator"] = chosen
    return []


def _unique(items: list[str]) -> list[str]:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
