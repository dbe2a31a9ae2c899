"""Where each sample of the dataset lies: open file descriptors and byte ranges, found lazily.

A file is opened and indexed (by its format) the first time a batch touches it, once. Files
whose samples are evenly spaced (every iogen-written file) are kept as (base, stride, length)
so a batch's ranges are computed with a few vectorised numpy operations; other files keep
their per-sample arrays.
"""
from __future__ import annotations

import resource

import numpy as np

from .. import core
from ..errors import DataError


def _fd_budget() -> int:
    """How many data files may stay open: raise the soft limit to the hard one, keep headroom."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, soft - 256)


class FileTable:
    """Per-file descriptor and sample byte ranges of one split of the dataset."""

    def __init__(self, layout, fmt, direct: bool = False):
        n = layout.num_files
        self.layout = layout
        self.fmt = fmt
        self.direct = direct
        self.fd = np.full(n, -1, np.int64)
        self.known = np.zeros(n, bool)
        self.byte_addressable = np.zeros(n, bool)
        self.base = np.zeros(n, np.int64)
        self.stride = np.zeros(n, np.int64)
        self.length = np.zeros(n, np.int64)
        self.irregular: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.open_fds: list[int] = []
        self.transient = n > _fd_budget()

    def learn_all(self) -> None:
        """Open and index every file now (before the run), so no epoch pays it in its steps.

        A node-local staged copy (iogen.staging, scope "node") holds only the files its node
        reads: `layout.staged_files` lists them, and only those are learnt.
        """
        present = getattr(self.layout, "staged_files", None)
        for f in np.flatnonzero(~self.known) if present is None else present[~self.known[present]]:
            self._learn(int(f))
        if not self.transient:
            closed = np.flatnonzero((self.fd < 0) & self.byte_addressable)
            for f in closed:
                self.fd[f] = self._open_path(int(f))
                self.open_fds.append(int(f))

    def _learn(self, f: int) -> None:
        path = self.layout.paths[f]
        try:
            index = self.fmt.index_file(path)
        except FileNotFoundError:
            raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None
        self.known[f] = True
        if index is None:
            return
        offsets = np.asarray(index.offsets, np.int64)
        lengths = np.asarray(index.lengths, np.int64)
        need = self.layout.samples_per_file
        if offsets.size < need:
            raise DataError(path, f"holds {offsets.size} samples, the workload expects {need}")
        self.byte_addressable[f] = True
        stride = int(offsets[1] - offsets[0]) if offsets.size > 1 else 0
        if np.all(lengths == lengths[0]) and (offsets.size == 1 or np.all(np.diff(offsets) == stride)):
            self.base[f], self.stride[f], self.length[f] = offsets[0], stride, lengths[0]
        else:
            self.irregular[f] = (offsets, lengths)

    def _open_path(self, f: int) -> int:
        path = self.layout.paths[f]
        try:
            return core.reader.open_file(path, self.direct)
        except FileNotFoundError:
            raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None

    def decode_only(self, files: np.ndarray) -> bool:
        """Index any new files of a batch; True when the batch's files have no byte index."""
        known = self.known[files]
        if not known.all():
            for f in np.unique(files[~known]):
                self._learn(int(f))
        addressable = self.byte_addressable[files]
        if addressable.all():
            return False
        if not addressable.any():
            return True
        bad = int(files[~addressable][0])
        raise DataError(self.layout.paths[bad], "mixes compressed and uncompressed files in one dataset")

    def ranges(self, files: np.ndarray, samples: np.ndarray):
        """(fds, offsets, lengths, transient_fds) of each sample, opening the files the batch needs.

        When the dataset has more files than may stay open (cosmoflow: 524,288), files are opened
        for one batch and `transient_fds` lists what the caller closes once the batch is read,
        as a loader that opens a file per sample does; otherwise files stay open for the run.
        """
        transient = []
        if self.transient:
            uniq, inverse = np.unique(files, return_inverse=True)
            opened = np.array([self._open_path(int(f)) for f in uniq], np.int64)
            transient = opened.tolist()
            fds = opened[inverse]
        else:
            fds = self.fd[files]
            closed = fds < 0
            if closed.any():
                for f in np.unique(files[closed]):
                    self.fd[f] = self._open_path(int(f))
                    self.open_fds.append(int(f))
                fds = self.fd[files]
        offsets = self.base[files] + samples * self.stride[files]
        lengths = self.length[files].copy()
        if self.irregular:
            for i in np.flatnonzero(np.isin(files, np.fromiter(self.irregular, np.int64))):
                offs, lens = self.irregular[int(files[i])]
                offsets[i] = offs[samples[i]]
                lengths[i] = lens[samples[i]]
        return fds, offsets, lengths, transient

    def close_all(self) -> None:
        """Close every open data file."""
        for f in self.open_fds:
            core.reader.close_file(int(self.fd[f]))
            self.fd[f] = -1
        self.open_fds.clear()

    close = close_all
