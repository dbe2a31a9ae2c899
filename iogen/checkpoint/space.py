"""Free space before the first checkpoint byte: the bytes a run's checkpoints keep on each file
system (every tier), against what that file system has free.

A checkpoint-only run keeps every checkpoint it writes (the read phase reads them back): each
rank adds `num_checkpoints_write` x its files' bytes to the folder it writes (checkpoint.
local_folder, else checkpoint_folder) and, when it drains, as much to checkpoint_folder; files
of the same names that are already there are replaced, so their bytes are counted as freed. A
training run keeps the newest checkpoint only: at its peak the previous one and the one being
written are both there, so it needs two checkpoints' bytes, and it deletes as it goes. Folders
on the same file system (the same device) add up. Under MPI every rank's need is summed per
host and device, and compared with the free space that host measured.
"""
from __future__ import annotations

import os

from ..common.atomic import free_bytes


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def device_of(folder: str) -> int | None:
    """The device of `folder`, or of its nearest existing parent (the folder may not exist yet)."""
    folder = os.path.abspath(folder)
    while True:
        try:
            return os.stat(folder).st_dev
        except OSError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent


def existing_bytes(paths) -> int:
    """Bytes of the files among `paths` that already exist (the run replaces them)."""
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


def need(folder: str, added: int, kept: int, what: str) -> dict:
    """One tier's entry: `added` bytes this rank writes there in the run, `kept` at the peak."""
    return {"folder": os.path.abspath(folder), "device": device_of(folder), "free": free_bytes(folder),
            "added": int(added), "kept": int(kept), "what": what}


def shortfalls(entries) -> tuple[list[str], list[str]]:
    """(problems, notes) over every rank's entries [(host, entry)], summed per host and device.

    A problem: the peak bytes kept exceed the free space. A note: they fit, but the bytes the
    run writes in all do not, so it fits only because it deletes as it goes.
    """
    groups: dict = {}
    for host, e in entries:
        if e["device"] is None or e["free"] is None:
            continue
        g = groups.setdefault((host, e["device"]), {"folders": [], "free": e["free"], "added": 0, "kept": 0,
                                                     "what": []})
        if e["folder"] not in g["folders"]:
            g["folders"].append(e["folder"])
        if e["what"] not in g["what"]:
            g["what"].append(e["what"])
        g["added"] += e["added"]
        g["kept"] += e["kept"]
        g["free"] = min(g["free"], e["free"])
    problems, notes = [], []
    for (host, _), g in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[1]["folders"])):
        where = " and ".join(g["folders"]) + (f" (on {host})" if len({h for h, _ in groups}) > 1 else "")
        if g["kept"] > g["free"]:
            problems.append(f"{where}: the checkpoints need {_gib(g['kept'])} ({g['kept']:,} bytes: "
                            f"{'; '.join(g['what'])}) but its file system has {_gib(g['free'])} ({g['free']:,} "
                            "bytes) free; free space there, write fewer checkpoints "
                            "(checkpoint.num_checkpoints_write) or a smaller share (checkpoint.mode=subset)")
        elif g["added"] > g["free"]:
            notes.append(f"{where}: the run writes {_gib(g['added'])} of checkpoints in all, more than the "
                         f"{_gib(g['free'])} free; it fits because each checkpoint replaces the one before "
                         f"(at most {_gib(g['kept'])} at once)")
    return problems, notes
