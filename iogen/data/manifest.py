"""The dataset manifest: what was generated, with which settings, and each file's size and CRC.

One manifest per split folder, `<data_folder>/<train|valid>/.iogen-manifest.json` (a file, or an
object on an object store), written last (whole or not at all) once every file of the split is
complete. While generation runs, the backend records which files are complete (its `Generation`:
journals beside the files, iogen/storage/journal.py; each object's metadata, iogen/storage/s3.py);
a rerun trusts a file only when the manifest or those records, with the same settings, say it is
complete at its size. Each file's journal line is its manifest entry (`journal_line`).
"""
from __future__ import annotations

import json
import time

from .._version import __version__

MANIFEST_NAME = ".iogen-manifest.json"
MANIFEST_VERSION = 1
CHECKSUM_ALGORITHM = "crc32c"  # CRC-32C of the whole file, eight hex digits


def manifest_path(layout) -> str:
    """Path of a split's manifest."""
    return f"{layout.folder}/{MANIFEST_NAME}"


def dataset_params(layout, fmt) -> dict:
    """Everything that decides the files' bytes: files are reused only when all of it matches."""
    return {
        "split": layout.split,
        "format": fmt.variant(),
        "seed": layout.seed,
        "num_files": layout.num_files,
        "samples_per_file": layout.samples_per_file,
        "record_length_bytes": layout.record_length_bytes,
        "record_length_bytes_stdev": layout.record_length_bytes_stdev,
        "file_prefix": layout.file_prefix,
        "num_subfolders": layout.num_subfolders if layout.num_subfolders > 1 else 0,  # 0 and 1: none
        "checksum_algorithm": CHECKSUM_ALGORITHM,
    }


def params_differences(found: dict, expected: dict) -> list[str]:
    """Human-readable differences between two settings dicts ('seed: 1 (manifest) vs 2 (workload)')."""
    out = []
    for key in sorted(set(found) | set(expected)):
        if found.get(key) != expected.get(key):
            out.append(f"{key}: {found.get(key)!r} in the manifest, {expected.get(key)!r} in the workload")
    return out


def file_entry(rel: str, size_bytes: int, crc: str, record_bytes: int, samples: int) -> dict:
    """One file's manifest entry."""
    return {"file": rel, "size_bytes": int(size_bytes), "crc32c": crc,
            "record_bytes": int(record_bytes), "samples": int(samples)}


def read_manifest(layout, storage=None, columns: bool = False) -> dict | None:
    """The split's manifest (a file, or an object of `storage`: local files when None), or None
    when there is none.

    A manifest that exists but cannot be read or is not an iogen manifest is a DataError naming
    it (exit 2): treating it as absent would skip every size and CRC check without a word.
    columns: its "files" may come back as FileColumns (the run's data check, which needs no CRC):
    read straight from the text where that is iogen's own, without a dict per file.
    """
    if storage is None:
        from ..storage.posix import PosixStorage

        storage = PosixStorage()
    path = manifest_path(layout)
    try:
        raw = storage.get_bytes(path)
    except OSError as exc:
        from ..errors import DataError

        raise DataError(path, f"the dataset manifest cannot be read: {exc.strerror}") from None
    if raw is None:
        return None
    return (columns and _with_columns(raw)) or parse_manifest(raw, path)


class FileColumns:
    """A manifest's "files" list as columns: entry i's name is text[name_at[i]:name_at[i] + name_len[i]]
    (ASCII: the bytes are the characters), its size_bytes, record_bytes and samples values[0..2, i]."""

    __slots__ = ("text", "name_at", "name_len", "values")

    def __init__(self, text: bytes, name_at, name_len, values):
        self.text, self.name_at, self.name_len, self.values = text, name_at, name_len, values

    def __len__(self) -> int:
        return int(self.name_at.size)


_FILES_OPEN = b'\n "files": [\n'  # manifest_text's "files" key (the last) and its list's opening
_ENTRY_FILE = b'\n   "file": "'  # once in each entry as manifest_text writes it


def _with_columns(raw: bytes) -> dict | None:
    """The manifest with "files" as FileColumns, where its text is manifest_text's own form; None otherwise
    (the caller then parses it as JSON, which decides whether it is a manifest at all).

    The text before the "files" list is parsed as JSON (with the list empty); the list is read by
    core.publish.scan_entries, which accepts only the exact text manifest_text writes for each entry and
    the document's end, so what it reads is valid JSON holding these values (json.loads of 10^6 entries
    costs a second and most of a GB in dicts)."""
    if not isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw)
    at = raw.find(_FILES_OPEN)
    if at < 0:
        return None
    try:
        head = json.loads(raw[:at] + b'\n "files": []\n}')
    except (ValueError, RecursionError):
        return None
    if manifest_problem(head) is not None:
        return None
    import numpy as np

    from .. import core_switch as core

    start = at + len(_FILES_OPEN)
    n = raw.count(_ENTRY_FILE, start)
    name_at, name_len, values = np.empty(n, np.int64), np.empty(n, np.int64), np.empty((3, n), np.int64)
    count, whole = core.publish.scan_entries(raw, start, name_at, name_len, values)
    if not whole or count != n:
        return None
    head["files"] = FileColumns(raw, name_at, name_len, values)
    return head


def parse_manifest(raw: bytes, where: str) -> dict:
    """A manifest's bytes as its dict; a DataError naming `where` when they are not an iogen manifest."""
    from ..errors import DataError

    try:
        data = json.loads(raw)
    except RecursionError:
        problem = "it is JSON nested too deep"
    except ValueError as exc:  # also a UnicodeDecodeError
        problem = f"it is not valid JSON ({' '.join(str(exc).split())})"
    else:
        problem = manifest_problem(data)
    if problem is None:
        return data
    raise DataError(where, f"corrupt dataset manifest: {problem}; the size and checksum checks need it: "
                           "regenerate the dataset with `iogen datagen --overwrite`, or remove the file to "
                           "treat the data as not generated by iogen")


def manifest_problem(data) -> str | None:
    """Why a parsed manifest is not one iogen wrote (None when its shape is right)."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    files = data.get("files")
    if not isinstance(files, list):
        return "it has no \"files\" list"
    if not isinstance(data.get("params", {}), dict):
        return "its \"params\" is not an object"
    for i, e in enumerate(files):  # the entries' fields are checked where they are used (iogen.data.check)
        if not isinstance(e, dict):
            return f"entry {i} of \"files\" is not an object"
    return None


def write_manifest(layout, fmt, entries: list[dict], storage=None, extra: dict | None = None,
                   fsync: bool = True) -> str:
    """Write the manifest to `storage` (local files when None) whole or not at all (a file: temporary name,
    fsync when asked, rename; an object: one PUT); return its path."""
    if storage is None:
        from ..storage.posix import PosixStorage

        storage = PosixStorage()
    path = manifest_path(layout)
    data = {
        "iogen_manifest_version": MANIFEST_VERSION,
        "generated_by": f"iogen {__version__}",
        "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": dataset_params(layout, fmt),
        "num_files": len(entries),
        "total_size_bytes": sum(e["size_bytes"] for e in entries),
        **(extra or {}),
        "files": entries,
    }
    # A killed writer's temporary manifest would hold space (and, on a full disk, fail every
    # rerun): remove those of dead processes, then write; a failure leaves no temporary file.
    storage.remove_stale(layout.folder, [MANIFEST_NAME])
    storage.publish(path, manifest_text(data).encode("utf-8"), fsync=fsync, what="the dataset manifest")
    return path


_ascii = json.encoder.encode_basestring_ascii  # json.dumps' own string encoder (C)


_ENTRY_KEYS = ("file", "size_bytes", "crc32c", "record_bytes", "samples")  # file_entry's, in its order


def _entry_text(entry) -> str:
    """One file entry as json.dumps(..., indent=1) writes it inside the manifest's "files" list."""
    if type(entry) is dict and len(entry) == 5:  # file_entry's own shape: one format string
        rel, size, crc, rb, samples = entry.values()
        if (type(rel) is str and type(size) is int and type(crc) is str and type(rb) is int and type(samples) is int
                and tuple(entry) == _ENTRY_KEYS):
            return (f'  {{\n   "file": {_ascii(rel)},\n   "size_bytes": {size},\n   "crc32c": {_ascii(crc)},\n'
                    f'   "record_bytes": {rb},\n   "samples": {samples}\n  }}')
    if type(entry) is dict:
        parts = []
        for key, value in entry.items():
            kind = type(value)
            if type(key) is not str or kind not in (str, int):
                break
            parts.append(f"   {_ascii(key)}: {_ascii(value) if kind is str else int.__repr__(value)}")
        else:
            return "  {\n" + ",\n".join(parts) + "\n  }" if parts else "  {}"
    # Anything else: json's own text, indented to the list's depth (indentation is per level).
    return "\n".join("  " + line for line in json.dumps(entry, indent=1).split("\n"))


def manifest_text(data: dict) -> str:
    """json.dumps(data, indent=1) + newline, byte for byte, with the "files" list (last key) built fast.

    json's indented output is its pure-Python encoder, about 25 us an entry: 0.25 s for 10^4 files.
    The entries (flat dicts of strings and integers) are formatted directly instead.
    """
    files = data.get("files")
    if not files or list(data)[-1] != "files":
        return json.dumps(data, indent=1) + "\n"
    head = json.dumps({**data, "files": []}, indent=1)
    return head[:-4] + "[\n" + ",\n".join(map(_entry_text, files)) + "\n ]\n}\n"


def _journal_text(rel: str, size_bytes: int, record_bytes: int, samples: int) -> tuple[str, int]:
    """journal_line's text and where its CRC's digits start (the ints already Python ints)."""
    head = f'{{"file": {_ascii(rel)}, "size_bytes": {size_bytes}, "crc32c": "'
    return f'{head}00000000", "record_bytes": {record_bytes}, "samples": {samples}}}\n', len(head)


def journal_line(rel: str, size_bytes: int, record_bytes: int, samples: int) -> tuple[bytearray, int]:
    """(json.dumps(file_entry(...)) + newline as bytes with the CRC's eight hex digits left as zeros,
    where they start): iogen.core_switch.publish writes the file's CRC-32C there as it appends the line."""
    text, at = _journal_text(rel, int(size_bytes), int(record_bytes), int(samples))
    return bytearray(text.encode("ascii")), at


def journal_lines(rels, sizes, record_bytes, samples: int) -> tuple[bytearray, list[int], list[int]]:
    """journal_line of each file (rels, sizes and record_bytes: one each, Python ints, as samples), back to back in
    one buffer: (the lines, where each ends, where each one's CRC digits start)."""
    parts, ends, ats = [], [], []
    pos = 0
    for rel, size, rb in zip(rels, sizes, record_bytes):
        line, at = _journal_text(rel, size, rb, samples)
        ats.append(pos + at)
        pos += len(line)
        ends.append(pos)
        parts.append(line)
    return bytearray("".join(parts).encode("ascii")), ends, ats
