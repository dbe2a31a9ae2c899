"""Bytes this rank made the kernel fetch from storage: its process and every live descendant.

Linux counts, per process, the bytes it caused to be read from the block layer
(`/proc/<pid>/io`, `read_bytes`: page-cache misses, readahead and O_DIRECT reads; page-cache
hits count nothing). Threads are included in their process's figure, so the native and
tf.data loaders need nothing more. PyTorch's DataLoader reads in worker *processes*, whose
reads are not in the main process's figure while they live: the rank's figure is therefore
the sum over the process and all its live descendants (workers, and their children under a
`forkserver` or `spawn` context). A child that exits and is waited for adds its count to its
parent's (kernel `wait_task_zombie`), so a worker that ends between two readings is still
counted once; one that a parent never waits for is lost, which iogen's loaders never leave.

Readings are taken at epoch boundaries only (a scan of /proc costs about a millisecond), and
the figure per epoch is the difference of two readings.
"""
from __future__ import annotations

import os

PROC_ROOT = "/proc"


def _read_bytes_of(pid: int) -> int | None:
    """`read_bytes` of one process, or None when it is gone or the kernel does not say."""
    try:
        with open(f"{PROC_ROOT}/{pid}/io", "rb") as fh:
            for line in fh:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's `children` list, or a scan of /proc/*/stat)."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"{PROC_ROOT}/{pid}/task")
    except OSError:
        return kids
    try:
        for tid in tids:
            with open(f"{PROC_ROOT}/{pid}/task/{tid}/children", "rb") as fh:
                kids.extend(int(x) for x in fh.read().split())
        return kids
    except FileNotFoundError:  # a thread ended meanwhile, or no CONFIG_PROC_CHILDREN: scan
        pass
    except OSError:
        pass
    return _children_by_scan(pid)


def _children_by_scan(pid: int) -> list[int]:
    kids = []
    for name in os.listdir(PROC_ROOT):
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC_ROOT}/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # comm (field 2) may hold spaces and parentheses: the fields after the last ")" are fixed.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(name))
    return kids


def process_tree(pid: int | None = None) -> list[int]:
    """`pid` (default: this process) and all its live descendants, parents first."""
    root = os.getpid() if pid is None else pid
    seen, order, todo = {root}, [root], [root]
    while todo:
        for kid in _children(todo.pop()):
            if kid not in seen:
                seen.add(kid)
                order.append(kid)
                todo.append(kid)
    return order


def device_read_bytes(pid: int | None = None) -> int | None:
    """Storage bytes read by `pid` (default: this process) and its live descendants, or None.

    None when the kernel keeps no I/O accounting (no /proc/<pid>/io for the process itself).
    """
    tree = process_tree(pid)
    own = _read_bytes_of(tree[0])
    if own is None:
        return None
    # A descendant that vanished between the listing and its reading was waited for: its count
    # is already in its parent's figure or will be at the next reading (never counted twice).
    return own + sum(_read_bytes_of(p) or 0 for p in tree[1:])


# A run is said to read from storage when the device delivered at least this share of the
# bytes the loaders read, and from the page cache when it delivered less than PAGE_CACHE_SHARE.
STORAGE_SHARE = 0.9
PAGE_CACHE_SHARE = 0.1


def reads_from(device_bytes_per_epoch, bytes_read_per_epoch) -> dict:
    """Where a run's reads came from, per the kernel: storage, page cache, partly, or unknown.

    `device_share` = sum(device bytes) / sum(bytes the loaders read) over the epochs where both
    are known. "storage" at >= 90%, "page cache" below 10%, "partly page cache" between, and
    "unknown" when the kernel keeps no I/O accounting or nothing was read.
    """
    pairs = [(d, b) for d, b in zip(device_bytes_per_epoch or [], bytes_read_per_epoch or [])
             if d is not None and b is not None and b == b]
    read = float(sum(b for _, b in pairs))
    if not pairs or read <= 0:
        return {"source": "unknown", "device_share": None,
                "explanation": "the kernel gave no per-process I/O accounting (/proc/<pid>/io), so "
                               "iogen cannot tell whether storage or the page cache served the reads"}
    share = float(sum(d for d, _ in pairs)) / read
    if share >= STORAGE_SHARE:
        source, why = "storage", "the device delivered the bytes the loaders read"
    elif share < PAGE_CACHE_SHARE:
        source, why = "page cache", ("the page cache served the reads: the figures measure memory, "
                                     "not storage")
    else:
        source, why = "partly page cache", ("part of the reads came from the page cache: the figures "
                                            "overstate what storage delivers")
    return {"source": source, "device_share": share,
            "explanation": f"{why} ({share:.0%} of the bytes read came from the device)"}
