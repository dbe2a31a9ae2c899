"""The dataset manifest: what was generated, with which settings, and each file's size and CRC.

One manifest per split folder, `<data_folder>/<train|valid>/.iogen-manifest.json`, written last
(temporary name + rename) once every file of the split is complete. While generation runs,
each rank appends one JSON line per finished file to its journal
`.iogen-journal.r<rank>-of-<world>.jsonl` in the same folder; the first line of a journal
holds the generation settings. A rerun trusts a file only when a manifest or journal with the
same settings lists it and the file on disk has the listed size; the journals are merged into
the manifest and removed at the end.
"""
from __future__ import annotations

import glob
import json
import os
import time

from ._version import __version__
from .atomic import full_disk_error, is_full_disk, remove_stale_temps, write_atomic

MANIFEST_NAME = ".iogen-manifest.json"
JOURNAL_GLOB = ".iogen-journal.r*.jsonl"
MANIFEST_VERSION = 1
CHECKSUM_ALGORITHM = "crc32c"  # CRC-32C of the whole file, eight hex digits


def manifest_path(layout) -> str:
    """Path of a split's manifest."""
    return f"{layout.folder}/{MANIFEST_NAME}"


def journal_path(layout, rank: int, world_size: int) -> str:
    """Path of one rank's journal for a split."""
    return f"{layout.folder}/.iogen-journal.r{rank}-of-{world_size}.jsonl"


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


def read_manifest(layout) -> dict | None:
    """The split's manifest, or None when there is none (or it is unreadable)."""
    try:
        with open(manifest_path(layout)) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "files" in data else None


def write_manifest(layout, fmt, entries: list[dict], extra: dict | None = None) -> str:
    """Write the manifest atomically (temporary name, fsync, rename); return its path."""
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
    remove_stale_temps(layout.folder, [MANIFEST_NAME])
    write_atomic(path, manifest_text(data), what="the dataset manifest")
    return path


_ascii = json.encoder.encode_basestring_ascii  # json.dumps' own string encoder (C)


def _entry_text(entry) -> str:
    """One file entry as json.dumps(..., indent=1) writes it inside the manifest's "files" list."""
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


def journal_line(rel: str, size_bytes: int, record_bytes: int, samples: int) -> tuple[bytearray, int]:
    """(json.dumps(file_entry(...)) + newline as bytes with the CRC's eight hex digits left as zeros,
    where they start): iogen.core.publish writes the file's CRC-32C there as it appends the line."""
    head = f'{{"file": {_ascii(rel)}, "size_bytes": {int(size_bytes)}, "crc32c": "'
    tail = f'", "record_bytes": {int(record_bytes)}, "samples": {int(samples)}}}\n'
    return bytearray(f"{head}00000000{tail}".encode("ascii")), len(head)


class Journal:
    """One rank's append-only record of the files it finished (one JSON object per line).

    Each line is one write() to a descriptor opened with O_APPEND, unbuffered: a line is on the file
    as soon as its file is complete, and writer threads (or iogen.core.publish, through `fd`) append
    without a lock.
    """

    def __init__(self, path: str, params: dict):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            self._write({"params": params})
        except BaseException:
            os.close(self.fd)
            raise

    def _write(self, obj) -> None:
        line = (json.dumps(obj) + "\n").encode("utf-8")
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            raise self.error(exc, len(line)) from None

    def error(self, exc: OSError, line_bytes: int | None = None) -> OSError:
        """The error to raise for a failed append: a full disk names the journal and the bytes needed."""
        if is_full_disk(exc):
            return full_disk_error(exc, self.path, line_bytes, "the generation journal")
        return OSError(exc.errno, exc.strerror, self.path)

    def append(self, entry: dict) -> None:
        """Record one finished file."""
        self._write(entry)

    def close(self) -> None:
        """Close the journal (it stays on disk until the manifest replaces it)."""
        os.close(self.fd)


def journal_paths(layout) -> list[str]:
    """All journals of a split (any rank, any world size)."""
    return sorted(glob.glob(f"{glob.escape(layout.folder)}/{JOURNAL_GLOB}"))


def _journal_entries(path: str, params: dict) -> dict[str, dict]:
    entries = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return entries
    if not lines:
        return entries
    try:
        if json.loads(lines[0]).get("params") != params:
            return entries
    except ValueError:
        return entries
    for line in lines[1:]:
        try:
            e = json.loads(line)
        except ValueError:  # a line cut short by a crash
            continue
        if isinstance(e, dict) and "file" in e:
            entries[e["file"]] = e
    return entries


def journal_matches(path: str, params: dict) -> bool:
    """Whether a journal was written with these settings (an empty or unreadable one does not count)."""
    try:
        with open(path) as f:
            first = f.readline()
        return not first.strip() or json.loads(first).get("params") == params
    except (OSError, ValueError, AttributeError):
        return True  # nothing trustworthy in it: known_entries ignores it, so it protects nothing


def unfinished_generation(layout, params: dict) -> bool:
    """Whether the split's folder holds a journal of a generation with these settings (a killed one)."""
    for path in journal_paths(layout):
        try:
            with open(path) as f:
                if json.loads(f.readline()).get("params") == params:
                    return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def known_entries(layout, params: dict) -> dict[str, dict]:
    """Entries of files generated with these settings: from the manifest and every journal."""
    entries = {}
    manifest = read_manifest(layout)
    if manifest is not None and manifest.get("params") == params:
        entries.update({e["file"]: e for e in manifest["files"]})
    for path in journal_paths(layout):
        entries.update(_journal_entries(path, params))
    return entries


def remove_journals(layout) -> None:
    """Delete the split's journals (after the manifest is written)."""
    for path in journal_paths(layout):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
