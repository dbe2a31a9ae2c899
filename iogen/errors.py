"""The project's exceptions and exit codes, shared by the Python layer and the Cython core.

Exit codes of the `iogen` command (README.md): 0 success, 1 the run completed but failed its
gate (and nothing else), 2 bad usage, config or data, 3 the run failed (another rank died, an MPI
wait timed out, the liveness watch aborted the job, or an internal error), 130 interrupted. Each
error class carries its own.
"""

import errno
import os

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_RUN_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def in_the_way(path: str) -> str | None:
    """What blocks creating folder `path`: 'P is a file' / 'a dangling symbolic link' / 'a symbolic
    link loop' for its first component P that is not a folder; None when nothing does."""
    p = os.path.abspath(path)
    chain = []
    while p != os.path.dirname(p):
        chain.append(p)
        p = os.path.dirname(p)
    for p in reversed(chain):
        if not os.path.lexists(p):
            return None
        if os.path.isdir(p):
            continue
        if os.path.islink(p):
            try:
                os.stat(p)
            except OSError as exc:
                return f"{p} is a symbolic link loop" if exc.errno == errno.ELOOP else \
                    f"{p} is a dangling symbolic link (to {os.readlink(p)})"
        return f"{p} is a file, not a folder"
    return None


def os_error_text(exc: OSError) -> str:
    """An OSError as one line in words, without Python's '[Errno N]': 'PATH: what went wrong'.

    'File exists' from creating a folder names what is in the way (a file, a dangling link),
    'Too many levels of symbolic links' says it is a link loop.
    """
    what = exc.strerror or str(exc) or type(exc).__name__
    path = exc.filename
    if exc.errno == errno.ELOOP:
        what = "a symbolic link loop (too many levels of symbolic links)"
    elif exc.errno in (errno.EEXIST, errno.ENOTDIR) and path is not None:
        what = in_the_way(os.fsdecode(path)) or what
    if path is None:
        return what
    where = os.fsdecode(path) + (f" -> {os.fsdecode(exc.filename2)}" if exc.filename2 is not None else "")
    return f"{where}: {what}"


class IogenError(Exception):
    """Base class of every error iogen raises on purpose."""

    exit_code = EXIT_RUN_FAILED


class ConfigError(ValueError, IogenError):
    """A workload or override is invalid. Carries every problem found, not just the first."""

    exit_code = EXIT_USAGE

    def __init__(self, problems):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class DataError(IogenError):
    """A data file is missing, truncated or corrupt. Names the file and, when known, the offset."""

    exit_code = EXIT_USAGE

    def __init__(self, path, message, offset=None):
        self.path = str(path)
        self.offset = offset
        # One line, whatever a library's text inside it held (HDF5's messages span lines); without
        # the path: for lists grouped by file, and to rebuild the error in another process.
        message = self.message = " ".join(str(message).split())
        where = self.path if offset is None else f"{self.path} at byte offset {offset}"
        super().__init__(f"{where}: {message}")


class CoreMissingError(ImportError, IogenError):
    """The compiled core is missing or broken; the message says how to fix it."""

    exit_code = EXIT_USAGE


class LoaderUnavailable(ImportError, IogenError):
    """A framework loader was selected but its framework is not installed."""

    exit_code = EXIT_USAGE


class DependencyMissing(ImportError, IogenError):
    """An optional package a command needs is not installed; the message has the pip command."""

    exit_code = EXIT_USAGE


class OutputError(IogenError, OSError):
    """iogen could not write where it was told to (full disk, not a folder, no permission).

    Names the path and, for a full disk, how much was needed and how much was free. An OSError
    too, so code that handles a failed write handles this one.
    """

    exit_code = EXIT_USAGE

    def __init__(self, path, message):
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")


class RankFailure(IogenError):
    """Another MPI rank failed (or a wait for the other ranks timed out); carries that rank's message.

    Its exit code is the failing rank's (2 for its bad data, 130 for its interrupt), else 3.
    """

    exit_code = EXIT_RUN_FAILED


class Interrupted(IogenError):
    """The run was interrupted (SIGINT/SIGTERM); what was measured is kept."""

    exit_code = EXIT_INTERRUPTED


class FramingError(ValueError):
    """A TFRecord frame is truncated or its length CRC is wrong; `offset` is where the frame starts.

    Raised by both core implementations (no path: the format layer adds it as a DataError).
    """

    def __init__(self, offset, reason):
        self.offset = int(offset)
        self.reason = reason
        super().__init__(f"{reason} at byte offset {self.offset}")


class ReadFailure(OSError):
    """A core read failed at entry `index` of a batch (errno 0: end of file before the bytes needed).

    The Python layer maps `index` to a file path and re-raises as DataError or OSError.
    """

    def __init__(self, index, errno_, offset, nread):
        self.index = int(index)
        self.offset = int(offset)
        self.nread = int(nread)
        if errno_:
            import os

            super().__init__(errno_, os.strerror(errno_))
        else:
            super().__init__(0, f"unexpected end of file after {nread} bytes")


class CopyFailure(OSError):
    """A core copy failed on its `side` ("read": the source, "write": the destination) at `offset`.

    The Python layer knows both paths and re-raises naming the right one.
    """

    def __init__(self, side, errno_, offset):
        import os

        self.side = str(side)
        self.offset = int(offset)
        super().__init__(errno_, os.strerror(errno_))
