"""Run folders: one per invocation, named by rank 0, never reused; files written atomically."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket

RUN_FILES = ("config.yaml", "summary.json", "epochs.json", "steps/")


def create_run_dir(output_folder: str, workload_name: str, label: str = "") -> str:
    """Create `<output>/<workload>-<UTC timestamp>[-label][-N]` exclusively and return its path."""
    os.makedirs(output_folder, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(output_folder, f"{workload_name}-{stamp}" + (f"-{label}" if label else ""))
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)  # atomic: two invocations never share a folder
            break
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"
    os.mkdir(os.path.join(path, "steps"))
    return os.path.abspath(path)


def steplog_path(run_dir: str, rank: int) -> str:
    """Where rank `rank` writes its step log."""
    return os.path.join(run_dir, "steps", f"rank-{rank:05d}.steps")


def write_atomic(path: str, text: str) -> None:
    """Write text under a temporary name, fsync, then rename: readers never see half a file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
