"""The `Storage` interface: the operations iogen's stages perform on files or objects, and what a backend can do.

Modelled on fsspec's AbstractFileSystem (one class per protocol, found through a registry) and
fio's ioengine ops (a small, fixed set of operations the engine drives), cut down to the
operations iogen's stages use:

    st = get_storage(wl)                           # iogen.storage: the backend the workload names
    st.read_ranges(paths, offsets, lengths, buf, buf_offsets)   # many ranges, one call, into buf
    st.readinto(path, offset, buf)                 # one range
    h = st.open_handle(path); st.read_handles(hs, offsets, lengths, required, buf, buf_offsets); st.close_handle(h)
                                                   # a loader's kept handles: one core call per batch on POSIX
    with st.open(path) as f: ...                   # seekable, read-only binary file (h5py, zipfile)
    st.stat(path) -> size or None;  st.list(prefix) -> {path: size}
    st.publish(path, data)                         # a whole file/object appears at once, or not at all
    st.write_stream(path, size, part_bytes, part_of, pool)   # a large one written in parts (checkpoints)
    st.write_objects(items, part_bytes, part_of, pool);  st.read_objects(items, part_bytes, pool, buffer)
    st.copy_in(path, local_path);  st.copy_out(local_path, path)   # staging in, draining out
    st.remove(path)
    gen = st.generation(folder, params, rank, world_size)   # datagen: publish files, record them complete
    st.drain() -> {op: figures}                    # figures since the last drain, then reset

Paths are what the workload's layout produces for this backend: file names on POSIX, `s3://`
URIs on object stores. What differs between backends and matters to a stage is answered by the
backend's `capabilities` (a `Capabilities`), never by a stage naming a storage type.
"""
from __future__ import annotations

from dataclasses import dataclass

import threading

import numpy as np

_HANDLES_LOCK = threading.Lock()


@dataclass(frozen=True)
class Capabilities:
    """What a backend's storage does, for the stages to ask instead of naming a storage type.

    local_paths: paths are this machine's file names, which the stages' file paths open with the
        core's system calls (folders can be checked and created; a staging or checkpoint folder may
        overlap them); False: they are object URIs and every byte goes through the backend's
        operations (the stages' object paths, until those fold into one path over Storage).
    page_cache: reads may be served from this node's page cache (a warning applies when the data
        fits in memory, and block-device counters tell storage from cache).
    evict: the client can drop the data from that cache (reader.evict_page_cache).
    direct_io: O_DIRECT applies (reader.odirect, checkpoint.odirect, staging.odirect_read).
    fsync: an fsync makes a write durable (checkpoint.fsync means something).
    temp_names_visible: a publish's temporary name can be seen by others before the rename (POSIX);
        False where a write appears whole when it completes (an S3 upload).
    figures: which figures the backend yields: "device" (block-device bytes, read by
        iogen/metrics/device.py), "requests" (per-request counts, retries, 503s, latency from
        drain()), "objects" (per-object transfer figures only: a client that hides its requests).
    needs: (package, the setting that needs it) of each optional package the backend imports, for `iogen.cli.deps`.
    core_copy: copies between its paths and local files are whole files through the core copier, one
        core call a file (POSIX paths are this machine's files); False: part by part through the
        backend's ranged reads and uploads (iogen/data/copy.py).
    file_checks: the formats' whole-file checks (Format.check_file, probe_file) open its paths directly, so
        `iogen verify` checks each file's structure, and data without a manifest is checked by it.
    torch_datasets: the backend brings its own PyTorch datasets, which the pytorch loader reads through
        (s3torchconnector's S3MapDataset / S3IterableDataset; iogen/loaders/s3torch.py).
    free_space: what is written takes space on a file system of this machine whose free space can be
        measured before the first byte (the checkpoint space check, iogen/checkpoint/space.py).
    core_reads: reads are iogen's core on this machine's files: `read_handles` of a whole batch is one
        GIL-free core call over file descriptors (the handles, which a format's fused read-and-check
        calls take too), and a path is a file name a format or a framework (tf.data) opens itself;
        False: every range read is a client request (a loader spreads them over its threads) and a
        format reads through a file object (iogen/storage/objectfile.py).
    worker_start_methods: the start methods of worker processes (the pytorch loader's DataLoader workers) the
        client works in, the first the one used when the workload does not choose (reader.multiprocessing_context);
        a client whose runtime's threads a fork does not copy (obstore's, s3dlio's: a forked worker hangs on
        its first request) leaves "fork" out, and the config refuses it by name.
    tls: the TLS settings of an https:// endpoint the client honours: "ca_bundle" (storage.ca_bundle, a PEM
        file of the CAs to trust), "no_verify" (storage.verify_tls: False); one it does not is refused by name.
    """

    local_paths: bool
    page_cache: bool
    evict: bool
    direct_io: bool
    fsync: bool
    temp_names_visible: bool
    figures: frozenset
    needs: tuple = ()
    torch_datasets: bool = False
    free_space: bool = False
    core_reads: bool = False
    tls: frozenset = frozenset()
    worker_start_methods: tuple = ("fork", "spawn", "forkserver")

    core_copy: bool = False
    file_checks: bool = False


class Storage:
    """One storage backend (see the module doc). Subclasses implement the operations; `name` is the
    registry name and `capabilities` a class attribute, so both are known before a client exists."""

    name: str = ""
    client_name: str | None = None  # the client library, as summaries name it (None: the core's system calls)
    not_measured: dict = {}  # {figure: why it is null} for the get and put figures a client hides (obstore's retries)
    # why output.request_log is refused (None: the backend logs every request it counts, iogen/storage/requestlog.py)
    no_request_log: str | None = ("local files are read and written through system calls, not requests: there is "
                                  "no request to log")
    noun: str = "file"  # what one of its paths names, as messages say it ("file", "object")
    folder_noun: str = "folder"  # what a path's folder is, as messages say it ("folder", "prefix")
    capabilities: Capabilities

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "Storage":
        """The backend for a workload's storage section; threads: how many threads will share it."""
        return cls()

    def check(self, wl) -> None:
        """Check the target before any work (a bad one is a ConfigError naming the key); nothing by default."""

    @classmethod
    def for_checkpoints(cls, wl, threads: int = 16) -> "Storage":
        """The backend as checkpoints use it: checkpoint.odirect and checkpoint.fsync are passed per call
        (write_objects, read_objects), not taken from the reader's settings."""
        return cls.from_workload(wl, threads)

    @classmethod
    def data_folder(cls, wl) -> str:
        """The dataset's root as this backend's paths spell it (the layout's folder)."""
        return wl.dataset.data_folder

    @classmethod
    def checkpoint_folder(cls, wl) -> str:
        """checkpoint.checkpoint_folder as this backend's paths spell it."""
        return wl.checkpoint.checkpoint_folder

    # -- reads --------------------------------------------------------------------------------

    def readinto(self, path: str, offset: int, buf) -> int:
        """len(buf) bytes of path at offset into buf (a writable buffer); fewer is a DataError (truncated)."""
        raise NotImplementedError

    def read_ranges(self, paths, offsets, lengths, buf, buf_offsets) -> int:
        """Range i (lengths[i] bytes of paths[i] at offsets[i]) into buf[buf_offsets[i]:]; return the bytes.

        The default reads one range after another through readinto; a backend with a batched call
        (POSIX: one core call for the whole batch) overrides it."""
        mv = memoryview(buf).cast("B")
        total = 0
        for p, off, n, at in zip(paths, np.asarray(offsets).tolist(), np.asarray(lengths).tolist(),
                                 np.asarray(buf_offsets).tolist()):
            if n:
                total += self.readinto(p, off, mv[at:at + n])
        return total

    # Handles: what a reader keeps per file between batches (POSIX: an open descriptor, read by the
    # core; other backends: a number standing for the path, so opening one costs no request).

    def open_handle(self, path: str, direct: bool = False) -> int:
        """A handle read_handles reads path through (closed by close_handle); direct: O_DIRECT reads."""
        with _HANDLES_LOCK:
            paths = self.__dict__.setdefault("_handle_paths", {})
            h = self.__dict__.get("_next_handle", 0)
            self._next_handle = h + 1
            paths[h] = path
        return h

    def close_handle(self, handle: int) -> None:
        """Release a handle of open_handle."""
        with _HANDLES_LOCK:
            self.__dict__.get("_handle_paths", {}).pop(int(handle), None)

    def read_handles(self, handles, offsets, lengths, required, buf, buf_offsets) -> int:
        """Range i (lengths[i] bytes at offsets[i] of the file of handles[i]) into buf[buf_offsets[i]:], of which
        required[i] must be there (fewer only past the end of an O_DIRECT read); return the bytes read.
        The default reads each range as read_ranges does (one request each); POSIX: one core call."""
        paths = self.__dict__.get("_handle_paths", {})
        return self.read_ranges([paths[h] for h in np.asarray(handles).tolist()], offsets, lengths, buf, buf_offsets)

    def read_range(self, path: str, offset: int, buf) -> tuple[int, int | None]:
        """readinto, and path's whole size when the read tells it for free (None otherwise)."""
        return self.readinto(path, offset, buf), None

    def open(self, path: str):
        """path as a read-only, seekable binary file object (formats read HDF5 and compressed data through it)."""
        raise NotImplementedError

    def stat(self, path: str) -> int | None:
        """path's size in bytes, or None when it does not exist."""
        raise NotImplementedError

    def list(self, prefix: str) -> dict[str, int]:
        """{path: size} of every file/object under prefix (a folder: end it with '/')."""
        raise NotImplementedError

    def entries(self, prefix: str) -> tuple[dict[str, int], dict[str, str]]:
        """list(prefix), and {path: what} of what else stands under it, in words ("a symbolic link", "a folder",
        "not a regular file"; a link to a file is in both, at its target's size). By default list's answer and
        nothing else (an object store has neither links nor folders)."""
        return self.list(prefix), {}

    def get_bytes(self, path: str) -> bytes | None:
        """A small file's/object's whole bytes (a manifest), or None when it does not exist."""
        raise NotImplementedError

    def crc32c(self, path: str) -> int:
        """The CRC-32C of path's whole bytes (iogen verify), read the backend's cheapest way."""
        raise NotImplementedError

    # -- writes -------------------------------------------------------------------------------

    def publish(self, path: str, data, fsync: bool = False, what: str = "") -> None:
        """Write data as the whole of path: it appears complete or not at all (never half written).
        what: the file in words, as a full disk's message names it (its name when empty)."""
        raise NotImplementedError

    def write_stream(self, path: str, size: int, part_bytes: int, part_of, pool) -> int:
        """Write size bytes as path, part i's bytes from part_of(i) (a buffer, called on pool's threads),
        parts written concurrently on pool; nothing appears under path unless all of it was written.
        Returns size."""
        raise NotImplementedError

    def write_objects(self, items, part_bytes: int, part_of, pool, fsync: bool = False, direct: bool = False) -> int:
        """Write several files/objects at once: items [(path, size)]; part i of item j is part_of(j, i) (a
        buffer, made on a pool thread); nothing appears under a path unless all of it was written. The
        default writes them one after another through write_stream; a backend spreads the parts of all
        of them over pool where it can. fsync, direct: checkpoint.fsync and checkpoint.odirect, for a
        backend where they mean something (capabilities.fsync, direct_io). part_of may also offer its
        bytes as blocks (iogen/checkpoint/io.py's parts: `block_pool`, `write_blocks`), which a backend with a
        native writer (posix: the core's) writes instead of asking for parts. Returns the bytes."""
        for j, (path, size) in enumerate(items):
            self.write_stream(path, int(size), part_bytes, lambda i, j=j: part_of(j, i), pool)
        return sum(int(size) for _, size in items)

    def read_objects(self, items, part_bytes: int, pool, buffer, direct: bool = False) -> int:
        """Read several files/objects whole, items [(path, size)], part_bytes at a time into buffer() (the
        calling pool thread's reused buffer of part_bytes); a missing or short one is a DataError naming it.
        direct: O_DIRECT where it applies (capabilities.direct_io); buffer may also offer reused aligned
        block buffers (`block_pool()`: threads, each holding one), which a backend with a native reader (posix:
        the core's) reads into.
        Returns the bytes read."""
        tasks = [(path, off, min(part_bytes, size - off)) for path, size in items for off in range(0, size, part_bytes)]
        return sum(pool.map(lambda t: self.readinto(t[0], t[1], buffer()[:t[2]]), tasks))

    def prepare_stream(self, part_bytes: int) -> None:
        """Make what write_stream of part_bytes parts needs (a streaming client, its first connection) now,
        outside the timed windows; nothing by default."""

    def prepare_thread(self) -> None:
        """Make what the calling thread's requests need (its own client) now; nothing by default."""

    def prepare_writes(self, content, pool, threads: int) -> None:
        """Make what write_objects of `content` (iogen/checkpoint/io.py's Content) on pool's `threads` threads
        needs now, outside the timed windows: by default, on each thread its client and its part buffer."""
        import threading

        ready = threading.Barrier(threads)

        def warm(_):
            self.prepare_thread()
            content.part_buffer()
            ready.wait(timeout=60)

        list(pool.map(warm, range(threads)))

    def make_folder(self, folder: str, what: str = "the folder") -> None:
        """Make folder where folders exist (posix), naming what is in the way; nothing by default (an object
        store's folders are key prefixes)."""

    def remove_stale(self, folder: str, final_names=None) -> None:
        """Remove a killed run's leftover temporary files of final_names (a set, or a test of a name) in folder,
        where such files can exist (capabilities.temp_names_visible); nothing by default."""

    def lookup(self, path: str) -> tuple[int | None, str | None]:
        """What stands at path, a final symbolic link not followed: (size, None) for a file/object, (None, what)
        for anything else in words (as not_a_file says it), (None, None) for nothing. By default stat's answer
        (an object store has neither links nor folders)."""
        return self.stat(path), None

    def not_a_file(self, path: str) -> str | None:
        """What stands at path when it is neither a file/object nor nothing, a final symbolic link not followed, in
        words ("a symbolic link", "a folder", "not a regular file"); None otherwise, and by default: an object store
        has neither links nor folders, and the answer costs it no request."""
        return None

    def names_in(self, folder: str, start: str) -> list[str]:
        """Paths of everything directly in folder (not below it) whose name begins with start, sorted: files or objects,
        and where they exist links and folders too (one listing)."""
        base = folder.rstrip("/") + "/"
        return sorted(p for p in self.list(base + start) if "/" not in p[len(base):])

    def what_is(self, path: str) -> str | None:
        """What stands at path when it is neither a file/object nor nothing, in words ("a folder"); None by
        default (an object store has no folders)."""
        return None

    def copy_in(self, path: str, local_path: str) -> int:
        """Copy path to the local file local_path (created or truncated); return the bytes copied."""
        raise NotImplementedError

    def copy_out(self, local_path: str, path: str, part_bytes: int = 8 << 20) -> int:
        """Copy the local file local_path to path, which appears whole; return the bytes copied."""
        raise NotImplementedError

    def upload_part_bytes(self, transfer_bytes: int) -> int:
        """The part size copies to this backend use for pieces of transfer_bytes (a store's minimum part)."""
        return int(transfer_bytes)

    def remove(self, path: str) -> None:
        """Remove path (absent is fine)."""
        raise NotImplementedError

    def generation(self, folder: str, params: dict, rank: int, world_size: int) -> "Generation":
        """How this backend marks the files a generation finished in folder (a split's), so a rerun resumes:
        a `Generation` for this rank of world_size, generating with the settings params (iogen/data/generate.py)."""
        raise NotImplementedError

    # -- figures and lifecycle ----------------------------------------------------------------

    def drain(self) -> dict:
        """Figures since the last drain, by operation (only those that ran), then reset; {} when the
        backend has none ("requests" not in capabilities.figures)."""
        return {}

    def where(self) -> str:
        """Where the data is, as messages name it."""
        return "the local file system"

    def close(self) -> None:
        """Release clients and handles (the storage stays usable: they are made again on demand)."""



class Generation:
    """How a backend records which generated files/objects of one folder are complete, for one rank.

    Dataset generation (iogen/data/generate.py) runs one path over every backend: it plans from the
    manifest, from `listed()` and from `marks()`, publishes each file through `publish_image` (a run of
    image recipes through `publish_images`) or `publish_written`, and writes the manifest last. What differs is how completion is recorded,
    and it stays in the backend: on POSIX, per-rank journals beside the files (iogen/storage/journal.py;
    the core's publish call writes, renames and journals a file at once); on an object store, each
    object's user metadata (a digest of the settings and its CRC-32C: iogen/storage/s3.py). Every
    argument is plain (paths, bytes, dicts); a method that does not apply to a backend does nothing.
    """

    def check(self, overwrite: bool) -> None:
        """Before any rank writes: refuse (a DataError) records of an unfinished generation with other settings
        (journals), or remove them when overwrite; nothing where completion is recorded per object."""

    def listed(self) -> dict[str, dict]:
        """{path relative to the folder: manifest entry} of the files recorded complete with these settings
        beside the data, before a manifest was written (journals); {} where there are no such records."""
        return {}

    def marks(self, rels) -> dict[str, str | None]:
        """What the data itself says of the existing files rels (relative paths) that no manifest or record lists:
        {rel: its CRC-32C (8 hex digits)} for one marked complete with these settings, {rel: None} for one iogen
        wrote that is not (other settings, or a killed generation's last file): rewritten; rels left out carry
        no mark of iogen's (foreign data, refused unless --overwrite)."""
        return {}

    def carried(self, rels) -> dict[str, str | None]:
        """What the existing files rels (relative paths) that a manifest or record lists at another size than they have
        carry themselves, as marks() says it: only a mark the data holds counts (an object's metadata), never an
        unfinished generation's say; rels left out are not provably iogen's (refused unless --overwrite). {} where
        files carry no mark (POSIX)."""
        return {}

    def start(self, kept) -> None:
        """Open this rank's record, with the entries of the files it keeps (kept: manifest entries)."""

    def publish_image(self, path: str, image, fsync: bool, line: bytearray, crc_at: int, needed_bytes: int,
                      what: str) -> int:
        """Publish a file held whole in memory at path, complete or not at all, and record it; image: a buffer, or
        a recipe (Format.file_recipe: build() fills and returns its buffer; buf, ops, blob, seed and stream are
        core.publish.write_image's arguments, which builds and publishes it in one call);
        line: its record's JSON line with the CRC's eight hex digits at crc_at left to fill; return its CRC-32C.
        needed_bytes and what: as a full disk's message names them."""
        raise NotImplementedError

    def publish_images(self, paths, images, fsync: bool, lines: bytearray, line_ends, crc_ats, needed_bytes,
                       whats) -> list[int]:
        """publish_image of each file k in turn: paths[k], images[k] (recipes that may share one buffer, each built
        just before it is published), its record's line lines[line_ends[k - 1]:line_ends[k]] (the run's lines back
        to back) with the CRC's digits at crc_ats[k] of lines, needed_bytes[k], whats[k]; return their CRC-32Cs.
        A backend may publish the run in fewer calls (POSIX: one core call), each file still complete and recorded
        before the next; the first failure stops the run and is raised as publish_image raises it."""
        crcs, start = [], 0
        for k, (path, image) in enumerate(zip(paths, images)):
            end = line_ends[k]
            crcs.append(self.publish_image(path, image, fsync, lines[start:end], crc_ats[k] - start, needed_bytes[k],
                                           whats[k]))
            start = end
        return crcs

    def publish_written(self, path: str, write, needed_bytes: int, what: str, fsync: bool) -> tuple[int, int]:
        """Publish a file that write(local path) -> (size, CRC-32C) writes, complete or not at all; return
        (size, CRC-32C). Then `record` its entry."""
        raise NotImplementedError

    def record(self, entry: dict) -> None:
        """Record a file publish_written published (its manifest entry); nothing where the data carries it."""

    def close(self) -> None:
        """Close this rank's record (it stays until `finish`)."""

    def finish(self) -> None:
        """The manifest is written: remove the folder's records."""
