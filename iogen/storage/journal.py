"""Generation journals: how the `posix` backend records which generated files are complete (a `Generation`).

While generation runs, each rank appends one JSON line per finished file to its journal
`.iogen-journal.r<rank>-of-<world>.jsonl` beside the files, in the split's folder; the first line
holds the generation settings. A file built in memory is written under a temporary name, renamed
into place and journaled by one core call with the GIL released (`iogen.core_switch.publish.write_file`;
a run of images: `write_images`, one call for the run, each file journaled after its rename);
a streamed file is written under its temporary name, renamed, then journaled. A rerun trusts a file
only when a manifest or journal with the same settings lists it at its size; journals of other
settings are refused (a typo in one setting must not wipe a dataset) unless --overwrite; the journals
are removed once the manifest is written (iogen/data/generate.py).
"""
from __future__ import annotations

import fnmatch
import json
import os

from .. import core_switch as core
from ..common.atomic import (discard_temp, full_disk_error, is_full_disk, link_error, open_new, replacing, standing,
                             temp_path, unlink_quietly)
from ..errors import DataError
from .base import Generation

JOURNAL_GLOB = ".iogen-journal.r*.jsonl"
_JOURNAL_START = JOURNAL_GLOB.split("*")[0]


def journal_path(folder: str, rank: int, world_size: int) -> str:
    """Path of one rank's journal in a split's folder."""
    return f"{folder}/.iogen-journal.r{rank}-of-{world_size}.jsonl"


def journal_paths(folder: str) -> list[str]:
    """All journals of a split's folder (any rank, any world size)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    # what glob.glob(JOURNAL_GLOB) in the folder finds, without a pattern match for each of its data files
    return sorted(f"{folder}/{n}" for n in names if n.startswith(_JOURNAL_START) and fnmatch.fnmatchcase(n, JOURNAL_GLOB))


class Journal:
    """One rank's append-only record of the files it finished (one JSON object per line).

    Each line is one write() to a descriptor opened with O_APPEND, unbuffered: a line is on the file
    as soon as its file is complete, and writer threads (or iogen.core_switch.publish, through `fd`) append
    without a lock.
    """

    def __init__(self, path: str, params: dict):
        self.path = path
        # never through a symbolic link at its name (Generation.check refuses one before any rank writes)
        self.fd = open_new(path, "the generation journal", os.O_APPEND)
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


def journal_entries(path: str, params: dict) -> dict[str, dict]:
    """{file: entry} a journal lists, when it was written with these settings ({} otherwise)."""
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


def journal_state(path: str, params: dict) -> str:
    """What a journal's first line says: "empty" (a rank killed as it opened it), "these settings", "other settings",
    or "not a journal" (unreadable, or a first line that is not iogen's settings line)."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return "not a journal"
    if not first.strip():
        return "empty"
    try:
        head = json.loads(first)
    except ValueError:
        return "not a journal"
    if not isinstance(head, dict) or "params" not in head:
        return "not a journal"
    return "these settings" if head["params"] == params else "other settings"


def unfinished_generation(folder: str, params: dict) -> bool:
    """Whether the folder holds a journal of a generation with these settings (a killed one)."""
    for path in journal_paths(folder):
        try:
            with open(path) as f:
                if json.loads(f.readline()).get("params") == params:
                    return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def remove_journals(folder: str) -> None:
    """Delete the folder's journals (after the manifest is written)."""
    for path in journal_paths(folder):
        unlink_quietly(path)


class JournalGeneration(Generation):
    """Completion journalled beside the files (see the module doc): the posix backend's `Generation`."""

    def __init__(self, folder: str, params: dict, rank: int, world_size: int):
        self.folder, self.params = folder, params
        self.path = journal_path(folder, rank, world_size)
        self.journal: Journal | None = None
        self.tmp_mark = temp_path("")  # this process's temporary suffix, formatted once
        self._write_file = core.publish.write_file
        self._write_image = core.publish.write_image
        self._write_images = core.publish.write_images

    def check(self, overwrite: bool) -> None:
        """A journal is reused (truncated by its rank) only when it is one of this generation's: empty, or of these
        settings. One of other settings, a file that is not a journal, or a symbolic link at a journal's name (never
        written or truncated through) is refused, exit 2 naming it; with overwrite it is removed (a link itself, not
        its target). A folder or anything else that is not a regular file there is refused whatever overwrite says."""
        for path in journal_paths(self.folder):
            other = standing(path)[1]
            if other is not None and not (overwrite and other == "a symbolic link"):
                raise DataError(path, f"is {other} at the name of a generation journal; iogen never writes through "
                                      "it: remove it" + (", or replace it (the link, not its target) with `iogen "
                                                         "datagen --overwrite`" if other == "a symbolic link" else ""))
            state = "link" if other else journal_state(path, self.params)
            if state in ("empty", "these settings"):
                continue
            if overwrite:
                unlink_quietly(path)
            elif state == "other settings":
                raise DataError(path, "an unfinished generation with other settings; refusing to overwrite its "
                                      "files: finish it with its own settings, choose another "
                                      "dataset.data_folder, or replace it with `iogen datagen --overwrite`")
            else:
                raise DataError(path, "is not an iogen generation journal (its first line is not iogen's settings "
                                      "line), at a journal's name; refusing to overwrite it: move it, or replace it "
                                      "with `iogen datagen --overwrite`")

    def listed(self) -> dict[str, dict]:
        entries = {}
        for path in journal_paths(self.folder):
            entries.update(journal_entries(path, self.params))
        return entries

    def marks(self, rels) -> dict[str, str | None]:
        """Files carry no mark; while a generation with these settings is unfinished (killed), each writer's
        last file may be in place before its journal line: the files under the layout's own names are its own."""
        rels = list(rels)
        return dict.fromkeys(rels) if rels and unfinished_generation(self.folder, self.params) else {}

    def start(self, kept) -> None:
        self.journal = Journal(self.path, self.params)
        for entry in kept:
            self.journal.append(entry)

    def publish_image(self, path, image, fsync, line, crc_at, needed_bytes, what) -> int:
        """One core call with the GIL released: written under this process's temporary name, renamed into
        place, journaled (the CRC patched into line as it is appended); a recipe is built in the same call."""
        tmp = path + self.tmp_mark
        try:
            if hasattr(image, "ops"):  # a recipe (Format.file_recipe): built and published in one call
                return self._write_image(tmp, image.buf, image.ops, image.blob, image.seed, image.stream, path, fsync,
                                         self.journal.fd, line, crc_at)
            return self._write_file(tmp, image, path, fsync, self.journal.fd, line, crc_at)
        except OSError as exc:
            raise self._publish_error(exc, tmp, path, len(line), needed_bytes, what) from None

    def publish_images(self, paths, images, fsync, lines, line_ends, crc_ats, needed_bytes, whats) -> list[int]:
        """A run of recipes in one core call with the GIL released (core.publish.write_images): each file built,
        written under its temporary name, renamed into place and journaled before the next one starts."""
        if not all(hasattr(image, "ops") for image in images):
            return super().publish_images(paths, images, fsync, lines, line_ends, crc_ats, needed_bytes, whats)
        mark = self.tmp_mark
        tmps = [path + mark for path in paths]
        try:
            return self._write_images(tmps, images, paths, fsync, self.journal.fd, lines, line_ends, crc_ats)
        except OSError as exc:
            k = getattr(exc, "files_done", 0)  # the files before it are complete and journaled
            raise self._publish_error(exc, tmps[k], paths[k], line_ends[k] - (line_ends[k - 1] if k else 0),
                                      needed_bytes[k], whats[k]) from None

    def _publish_error(self, exc: OSError, tmp: str, path: str, line_bytes: int, needed_bytes: int,
                       what: str) -> Exception:
        """What a failed core publish of one file raises: the journal's append failing names the journal (the file
        itself is in place); otherwise its temporary file is removed and a full disk names the file and its bytes."""
        if exc.filename is None:
            return self.journal.error(exc, line_bytes)
        discard_temp(tmp)
        if link_error(exc, tmp):
            return link_error(exc, tmp, "a data file")
        if is_full_disk(exc):
            return full_disk_error(exc, path, needed_bytes, what, approx=True)
        return exc

    def publish_written(self, path, write, needed_bytes, what, fsync) -> tuple[int, int]:
        with replacing(path, needed_bytes=needed_bytes, what=what, approx=True) as tmp:
            size, crc = write(tmp)
            if fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return size, crc

    def record(self, entry: dict) -> None:
        self.journal.append(entry)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    def finish(self) -> None:
        remove_journals(self.folder)
