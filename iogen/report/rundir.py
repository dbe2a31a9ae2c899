"""Run folders: one per invocation, named by rank 0, never reused; files written atomically."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket

from ..common.atomic import full_disk_error, is_full_disk
from ..common.atomic import write_atomic as _write_atomic
from ..errors import OutputError

RUN_FILES = ("config.yaml", "summary.json", "epochs.json", "steps/")
# A campaign folder (`iogen run --runs N --warmup W`) holds its run folders and this file.
CAMPAIGN_FILE = "campaign.json"


def create_run_dir(output_folder: str, workload_name: str, label: str = "") -> str:
    """Create `<output>/<workload>-<UTC timestamp>[-label][-N]` exclusively and return its path."""
    from ..config.names import component_problem
    from ..errors import ConfigError

    # The config already refuses such names; this keeps every caller inside output_folder.
    for what, value in (("name", workload_name), ("run label", label)):
        problem = value and component_problem(value)
        if problem:
            raise ConfigError(f"{what} = {value!r}: {problem}")
    path = _create_exclusive(output_folder, f"{workload_name}-{_utc_stamp()}" + (f"-{label}" if label else ""))
    try:
        os.mkdir(os.path.join(path, "steps"))
    except OSError as exc:
        raise _output_error(exc, os.path.join(path, "steps")) from None
    return path


def create_campaign_dir(output_folder, workload_name: str) -> str:
    """Create `<output>/<workload>-<UTC timestamp>-campaign[-N]` exclusively and return its path."""
    return _create_exclusive(output_folder, f"{workload_name}-{_utc_stamp()}-campaign")


def _create_exclusive(output_folder, name: str) -> str:
    """Create `<output>/<name>[-N]`, the first N that is free, and return its absolute path."""
    output_folder = os.fspath(output_folder)
    check_output_folder(output_folder)
    base = os.path.join(output_folder, name)
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)  # atomic: two invocations never share a folder
            return os.path.abspath(path)
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"
        except OSError as exc:
            raise _output_error(exc, path) from None


def check_output_folder(output_folder: str) -> None:
    """Create the output folder if needed; OutputError naming it when it cannot hold run folders."""
    if os.path.exists(output_folder) and not os.path.isdir(output_folder):
        raise OutputError(output_folder, "output.folder is a file, not a folder; choose another output.folder")
    try:
        os.makedirs(output_folder, exist_ok=True)
    except OSError as exc:
        raise _output_error(exc, output_folder) from None
    if not os.access(output_folder, os.W_OK | os.X_OK):
        raise OutputError(output_folder, "output.folder is not writable by this user")


def _output_error(exc: OSError, path: str) -> OutputError:
    if is_full_disk(exc):
        return full_disk_error(exc, path, None, "a folder")
    if isinstance(exc, NotADirectoryError):
        return OutputError(path, "a part of the path is a file, not a folder")
    return OutputError(path, f"cannot create the folder: {exc.strerror}")


def _utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def write_campaign_file(campaign_dir, doc: dict) -> None:
    """Atomically (re)write a campaign folder's campaign.json."""
    write_json(os.path.join(campaign_dir, CAMPAIGN_FILE), doc)


def read_campaign_file(campaign_dir) -> dict:
    """campaign.json of a campaign folder (DataError naming it when it is not one iogen wrote)."""
    path = os.path.join(campaign_dir, CAMPAIGN_FILE)
    doc = read_json(path, "campaign.json")
    runs = doc.get("runs", [])
    if not (isinstance(runs, list) and all(isinstance(r, dict) and isinstance(r.get("run_dir"), str) for r in runs)):
        from ..errors import DataError

        raise DataError(path, "campaign.json's \"runs\" is not a list of {\"run_dir\": name, ...}")
    return doc


def read_json(path: str, what: str) -> dict:
    """A JSON object iogen wrote (summary.json, campaign.json, report.json): DataError naming the file
    (exit 2) when it is missing, unreadable, not JSON, nested too deep, or not an object."""
    from ..errors import DataError

    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except FileNotFoundError:
        raise DataError(path, f"no {what}") from None
    except OSError as exc:
        raise DataError(path, f"{what} cannot be read: {exc.strerror}") from None
    except RecursionError:
        raise DataError(path, f"{what} is JSON nested too deep: not a file iogen wrote") from None
    except ValueError as exc:  # a UnicodeDecodeError too
        raise DataError(path, f"{what} is not valid JSON ({' '.join(str(exc).split())}): truncated or "
                              "not a file iogen wrote") from None
    if not isinstance(doc, dict):
        raise DataError(path, f"{what} holds a JSON {type(doc).__name__}, not an object: not a file iogen wrote")
    return doc


# summary.json sections that are objects where present (null: not recorded)
_SUMMARY_OBJECTS = ("iogen", "metric", "iogen.metrics", "iogen.metrics.train", "iogen.metrics.train.per_epoch",
                    "iogen.metrics.eval", "iogen.metrics.au_gate", "iogen.setup", "iogen.data.staging", "iogen.reads_from",
                    "iogen.checkpoint", "iogen.checkpoint.plan", "iogen.checkpoint.write", "iogen.checkpoint.read",
                    "iogen.dataset_size_rule", "iogen.facts", "iogen.object_store", "iogen.drain")
# A key with one of these endings holds a number (or null, or a list of them), by its unit.
_NUMBER_ENDINGS = ("_percentage", "_per_second", "_seconds", "_samples_s", "_mib_s", "_ns", "_bytes", "_GB",
                   "_GiB", "_s")
_NUMBER_KEYS = ("num_accelerators", "schema_version")


def summary_problem(doc: dict) -> str | None:
    """Why a parsed summary.json is not one iogen wrote (None when its shape is right): sections that
    are not objects, a figure that is not a number (by its key's unit), a label that is not text."""
    for dotted in _SUMMARY_OBJECTS:
        value = doc
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, dict):
            return f"{dotted!r} is a JSON {type(value).__name__}, not an object"
    for key in ("workload", "start", "kind"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            return f"{key!r} is not text"
    it = doc.get("iogen") or {}
    for key in ("label", "incomplete_reason", "error"):
        if it.get(key) is not None and not isinstance(it[key], str):
            return f"'iogen.{key}' is not text"
    return _figure_problem(doc, "")


# No figure iogen writes comes near this (10^21 bytes is a zettabyte, 10^21 ns 31,700 years):
# beyond it (or NaN, infinity) the file was not written by iogen, and statistics would overflow.
FIGURE_BOUND = 1e21


def _is_scalar_key(key: str) -> bool:
    """A mean, a stdev, a threshold or a count is one number (per-epoch figures are lists)."""
    return key in _NUMBER_KEYS or any(w in key for w in ("mean", "stdev", "threshold"))


def _is_number(v) -> bool:
    """A finite number within FIGURE_BOUND, null, or a (nested) list of them (per-epoch and per-rank figures)."""
    if isinstance(v, list):
        return all(_is_number(x) for x in v)
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and -FIGURE_BOUND <= v <= FIGURE_BOUND)


def _figure_problem(node, where: str) -> str | None:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and (key.endswith(_NUMBER_ENDINGS) or key in _NUMBER_KEYS) and not (
                    _is_number(value)):
                return f"{here!r} is {json.dumps(value)[:40]}, not a number"
            if isinstance(key, str) and _is_scalar_key(key) and isinstance(value, list) and \
                    not where.rsplit(".", 1)[-1].startswith("per_"):  # per_epoch, per_rank: lists
                return f"{here!r} is a list, not one number"
            problem = _figure_problem(value, here)
            if problem:
                return problem
    elif isinstance(node, list):
        for i, value in enumerate(node):
            problem = _figure_problem(value, f"{where}[{i}]")
            if problem:
                return problem
    return None


def steplog_path(run_dir: str, rank: int) -> str:
    """Where rank `rank` writes its step log."""
    return os.path.join(run_dir, "steps", f"rank-{rank:05d}.steps")


def write_atomic(path: str, text: str) -> None:
    """Write text under a temporary name, fsync, then rename (iogen.common.atomic): never half a file,
    no temporary file left after a failure, a full disk named with the bytes needed."""
    _write_atomic(path, text)


def write_json(path: str, obj) -> None:
    """Atomically write obj as indented JSON."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _meminfo_bytes(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def host_facts() -> dict:
    """Facts about this host that change what a result means."""
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": _meminfo_bytes("MemTotal"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
