"""Run folders: one per invocation, named by rank 0, never reused; files written atomically."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket

from ..atomic import full_disk_error, is_full_disk
from ..atomic import write_atomic as _write_atomic
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
    """campaign.json of a campaign folder."""
    with open(os.path.join(campaign_dir, CAMPAIGN_FILE), encoding="utf-8") as fh:
        return json.load(fh)


def steplog_path(run_dir: str, rank: int) -> str:
    """Where rank `rank` writes its step log."""
    return os.path.join(run_dir, "steps", f"rank-{rank:05d}.steps")


def write_atomic(path: str, text: str) -> None:
    """Write text under a temporary name, fsync, then rename (iogen.atomic): never half a file,
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
