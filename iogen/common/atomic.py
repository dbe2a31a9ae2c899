"""Files under their final name only when complete: iogen's temporary names, atomic writes, full disks.

Every file iogen writes whole (data files, manifests, config.yaml, summary.json, checkpoints)
is written as `<final name>.tmp.<pid>` and renamed into place once complete, so a reader never
sees half a file. This module is the one place that knows that pattern:

- `temp_path(final)` names the temporary file of this process;
- `replacing(path)` yields the temporary name to write and renames it into place, removing it
  on any failure; `write_atomic(path, data)` writes, fsyncs and renames through it, and on
  any failure; a full disk (ENOSPC, EDQUOT) becomes an OutputError naming the path, the
  bytes needed and the bytes free;
- `PendingFile(path)` is the same for a file that outlives one block of code: several threads
  write it (the checkpoint writer), the one that finishes it calls `commit()`, and on a failure
  `discard()` removes it and `full_disk(exc)` names it;
- `parse_temp(name)` and `stale_temps(folder)` recognise temporary files left by a process
  that was killed (SIGKILL, power loss): iogen's pattern with the pid of no live process on
  this host, a regular file (never a link or a folder). Writers remove the stale ones of the
  file they are about to write; `verify` names the rest.

No file is ever written through a symbolic link at its name: every file iogen creates is opened
with O_NOFOLLOW (`WRITE_FLAGS`, `open_new`), and a temporary name a library opens by itself (h5py,
pyarrow, zipfile) is first created by `replacing` with O_EXCL | O_NOFOLLOW, so the library opens the
regular file iogen just made. A link there is an OutputError naming it (`link_error`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import stat

from ..errors import OutputError, in_the_way

TMP_MARK = ".tmp."
# Create or truncate a file for writing, never through a symbolic link at its name (ELOOP)
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
_TEMP_RE = re.compile(r"^(?P<final>.+)\.tmp\.(?P<pid>[0-9]+)$")
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def temp_path(final: str) -> str:
    """The temporary name this process writes `final` under."""
    return f"{final}{TMP_MARK}{os.getpid()}"


def parse_temp(name: str) -> tuple[str, int] | None:
    """(final name, pid) when `name` is one of iogen's temporary names, else None."""
    m = _TEMP_RE.match(name)
    return (m["final"], int(m["pid"])) if m else None


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def stale_temps(folder: str, final_names=None) -> list[str]:
    """Paths of iogen temporary files in `folder` whose writer is gone.

    `final_names`: only those of these final names (a collection), or of the final names a
    callable accepts; None: any.
    """
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    if final_names is None or callable(final_names):
        wanted = final_names
    else:
        wanted = set(final_names).__contains__
    out = []
    for name in sorted(n for n in names if TMP_MARK in n):  # a folder of 10^6 data files: no pattern match each
        parsed = parse_temp(name)
        if parsed is None or (wanted is not None and not wanted(parsed[0])):
            continue
        if parsed[1] != os.getpid() and not pid_alive(parsed[1]) and _regular(os.path.join(folder, name)):
            out.append(os.path.join(folder, name))
    return out


def standing(path: str) -> tuple[int | None, str | None]:
    """What stands at path, a final symbolic link not followed (one lstat): (size, None) for a regular file, (None,
    what) for anything else in words ("a symbolic link", "a folder", "not a regular file"), (None, None) for
    nothing."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    if stat.S_ISREG(st.st_mode):
        return st.st_size, None
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link"
    return None, "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"


def _regular(path: str) -> bool:
    """Whether a regular file (not a link, a folder or anything else) is at path."""
    try:
        return standing(path)[0] is not None
    except OSError:
        return False


def remove_stale_temps(folder: str, final_names=None) -> list[str]:
    """Remove what stale_temps finds; return the paths removed."""
    removed = []
    for path in stale_temps(folder, final_names):
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def link_error(exc: OSError, path: str, what: str = "") -> OutputError | None:
    """The OutputError for an open with O_NOFOLLOW that met a symbolic link at `path` (ELOOP); None for
    another error."""
    if exc.errno != errno.ELOOP:
        return None
    return OutputError(path, f"a symbolic link stands at this name; iogen never writes {what or 'a file'} "
                             "through a link: remove it")


def open_new(path: str, what: str = "", extra: int = 0, mode: int = 0o644, truncate: bool = True) -> int:
    """A descriptor of `path` created (and, when `truncate`, truncated) for writing (WRITE_FLAGS | extra),
    never through a symbolic link at its name: a link there is an OutputError naming it."""
    try:
        return os.open(path, (WRITE_FLAGS if truncate else WRITE_FLAGS & ~os.O_TRUNC) | extra, mode)
    except OSError as exc:
        raise link_error(exc, path, what) or exc from None


def claim(tmp: str, what: str = "") -> None:
    """Create the temporary file `tmp` empty, exclusively and not through a link (O_EXCL | O_NOFOLLOW), for a
    writer that opens it by name. A regular file already there is this pid's own (a killed process's pid,
    reused): replaced; a link or anything else there is an OutputError naming it."""
    for _ in range(2):
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
            return
        except FileExistsError:
            if not _regular(tmp):
                raise OutputError(tmp, f"something that is not a regular file (a symbolic link, a folder) stands "
                                       f"at iogen's temporary name; iogen never writes {what or 'a file'} through "
                                       "it: remove it") from None
            unlink_quietly(tmp)
    raise OutputError(tmp, "cannot create the temporary file: it keeps appearing")


def discard_temp(tmp: str) -> None:
    """Remove a temporary file of iogen's after a failure: a regular file only (a symbolic link or anything else
    someone put at the name, which the write refused, stays as it is)."""
    if _regular(tmp):
        unlink_quietly(tmp)


def unlink_quietly(path: str) -> None:
    """Remove a file if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the file system holding `path` (None if unknown)."""
    folder = path
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        st = os.statvfs(folder or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def full_disk_error(exc: OSError, path: str, needed_bytes: int | None, what: str = "", *,
                    approx: bool = False) -> OutputError:
    """The OutputError for a write of `needed_bytes` (`approx`: about) to `path` that hit ENOSPC/EDQUOT."""
    free = free_bytes(path)
    about = "about " if approx else ""
    need = f"{about}{needed_bytes:,} bytes needed" if needed_bytes is not None else "more space needed"
    have = f", {free:,} bytes free" if free is not None else ""
    cause = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on the device"
    return OutputError(path, f"{cause} writing {what or 'it'} ({need}{have})")


def is_full_disk(exc: BaseException) -> bool:
    """True for the OSErrors of a full disk or an exceeded quota."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


class PendingFile:
    """A file written under this process's temporary name until `commit` renames it into place.

    For writes that do not fit one `with` block: several threads write the file and the one
    that finishes it commits. The final name never holds a partial file: `discard` removes the
    temporary one, and `full_disk(exc)` is the OutputError naming `path` and the bytes needed.
    """

    def __init__(self, path: str, *, needed_bytes: int | None = None, what: str = "", approx: bool = False):
        self.path = path
        self.tmp = temp_path(path)
        self.needed_bytes = needed_bytes
        self.what = what or os.path.basename(path)
        self.approx = approx

    def commit(self) -> None:
        """Rename the complete file into place."""
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Remove the temporary file if it is there (the final name is untouched; discard_temp)."""
        discard_temp(self.tmp)

    def full_disk(self, exc: OSError) -> OutputError:
        """The OutputError for a full disk or quota met writing this file."""
        return full_disk_error(exc, self.path, self.needed_bytes, self.what, approx=self.approx)


@contextlib.contextmanager
def replacing(path: str, *, needed_bytes: int | None = None, what: str = "", approx: bool = False):
    """Yield the temporary name to write `path` under (created empty: `claim`); rename it into place when
    the block ends.

    On any failure the temporary file is removed and the final name is untouched; a full disk
    raises OutputError naming `path` and the bytes needed (`approx`: about that many).
    """
    pending = PendingFile(path, needed_bytes=needed_bytes, what=what, approx=approx)
    try:
        claim(pending.tmp, what)  # a library may open it by name: the regular file made here, never a link
        yield pending.tmp
        pending.commit()
    except BaseException as exc:
        pending.discard()
        if is_full_disk(exc):
            raise pending.full_disk(exc) from None
        raise


def write_atomic(path: str, data: str | bytes, *, fsync: bool = True, what: str = "") -> None:
    """Write `data` under a temporary name, fsync, rename: readers never see half a file."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with replacing(path, needed_bytes=len(raw), what=what) as tmp:
        fd = open_new(tmp, what)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def paths_overlap(a: str, b: str) -> bool:
    """True when absolute paths a and b are the same folder or one lies inside the other."""
    a, b = a.rstrip(os.sep) or os.sep, b.rstrip(os.sep) or os.sep
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep) or b.startswith(a.rstrip(os.sep) + os.sep)


def folder_problem(path: str, *, write: bool = True) -> str | None:
    """Why iogen could not create folder `path` or (`write`) write into it; None when it can. Creates nothing."""
    folder = os.path.abspath(path)
    if os.path.exists(folder):
        if not os.path.isdir(folder):
            return "is a file, not a folder"
        if write and not os.access(folder, os.W_OK | os.X_OK):
            return "is not writable by this user"
        return None
    parent = os.path.dirname(folder)
    while parent != os.path.dirname(parent) and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot be created: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable by this user"
    return None


def make_folders(path: str, what: str = "the folder") -> None:
    """os.makedirs(path, exist_ok=True), or an OutputError naming in words what is in the way
    (a file, a dangling symbolic link, a link loop) or why it cannot be made."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        why = in_the_way(path) if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.ELOOP) else None
        if why is None:
            why = "a symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise OutputError(path, f"cannot create {what}: {why}") from None
