"""Pure-Python twin of iogen._core.publish: same API and results, built on os.open/os.write/os.replace."""
import os
import re

from iogen._core._common import (check_fill_args, check_image_ops, check_publish_args, os_error,
                                 writable_byte_view)

from .sysio import write_all
from .crc import crc32c
from .fill import build_image

__all__ = ["write_file", "write_image", "write_images"]


def write_file(path, data, final_path=None, fsync=False, log_fd=-1, log_line=None, crc_hex_at=-1):
    """Write data to path (created or truncated, mode 0644), rename it to final_path when given (then a
    symbolic link at path is ELOOP, never written through), then append log_line to log_fd (>= 0) with
    its crc_hex_at..+8 set to the file's CRC-32C in hex.
    Returns the file's CRC-32C. Raises OSError as the compiled core does."""
    view = memoryview(data).cast("B")
    for name in (path, final_path):
        if name is not None and "\0" in os.fsdecode(name):
            raise ValueError("embedded null byte")  # before anything is written, as the core
    fd_log = check_publish_args(log_fd, log_line, crc_hex_at)
    crc = crc32c(view)
    try:
        nofollow = os.O_NOFOLLOW if final_path is not None else 0  # a publish: never through a link
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | nofollow, 0o644)
        try:
            err = write_all(fd, view)
            if err:
                raise os_error(err)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error(exc.errno, path) from None
    if final_path is not None:
        os.replace(path, final_path)  # OSError(errno, strerror, path, final_path), as the core's
    if fd_log >= 0:
        line = memoryview(log_line).cast("B")
        if crc_hex_at >= 0:
            line[crc_hex_at:crc_hex_at + 8] = b"%08x" % crc
        err = write_all(fd_log, line)
        if err:
            raise os_error(err)
    return crc


def write_image(path, buf, ops, blob, seed, stream, final_path=None, fsync=False, log_fd=-1, log_line=None,
                crc_hex_at=-1):
    """fill.build_image(buf, ops, blob, seed, stream), then write_file(path, buf, ...); returns the CRC-32C."""
    for name in (path, final_path):
        if name is not None and "\0" in os.fsdecode(name):
            raise ValueError("embedded null byte")
    check_publish_args(log_fd, log_line, crc_hex_at)
    build_image(buf, ops, blob, seed, stream)
    return write_file(path, buf, final_path, fsync, log_fd, log_line, crc_hex_at)


def write_images(paths, images, finals=None, fsync=False, log_fd=-1, log_lines=None, line_ends=None, crc_hex_at=None):
    """write_image(paths[k], image.buf, image.ops, image.blob, image.seed, image.stream, finals[k], fsync, log_fd,
    line k, its CRC's offset) for each file k in turn (log_lines: the lines back to back, line k ending at
    line_ends[k], its CRC's hex digits at crc_hex_at[k] in log_lines, or -1); returns the CRC-32Cs (a list).
    Arguments are checked before anything is written; a failing file's error carries files_done, as the
    compiled core's."""
    count = len(paths)
    if len(images) != count or (finals is not None and len(finals) != count):
        raise ValueError("paths, images and finals must have one entry per file")
    logs = [(-1, None, -1)] * count
    if log_lines is not None:
        fd = check_publish_args(log_fd, log_lines, -1)
        if line_ends is None or crc_hex_at is None or len(line_ends) != count or len(crc_hex_at) != count:
            raise ValueError("line_ends and crc_hex_at must have one entry per file")
        view = writable_byte_view(log_lines)
        start = 0
        for k in range(count):
            end, at = int(line_ends[k]), int(crc_hex_at[k])
            if end < start or end > len(view):
                raise ValueError(f"line_ends[{k}] = {end}: the lines must follow each other inside log_lines")
            if at != -1 and not start <= at <= end - 8:
                raise ValueError(f"crc_hex_at[{k}] = {at}: not -1 or 8 bytes inside line {k}")
            if fd >= 0:
                logs[k] = (fd, view[start:end], at - start if at >= 0 else -1)
            start = end
    elif log_fd != -1:
        raise ValueError("a log_fd needs its log_lines")
    finals = finals if finals is not None else [None] * count
    for k in range(count):  # everything checked before the first file is written
        for name in (paths[k], finals[k]):
            if name is not None and "\0" in os.fsdecode(name):
                raise ValueError("embedded null byte")
        image = images[k]
        writable_byte_view(image.buf)
        check_image_ops(image.ops)
        memoryview(image.blob)
        check_fill_args(image.seed, image.stream, 0, 0)
    crcs = []
    for k in range(count):
        image = images[k]
        try:
            crcs.append(write_image(paths[k], image.buf, image.ops, image.blob, image.seed, image.stream, finals[k],
                                    fsync, *logs[k]))
        except (OSError, ValueError) as exc:
            exc.files_done = k
            raise
    return crcs



# The compiled scan_entries' twin: the same exact text of each entry (iogen.data.manifest.manifest_text), read with
# a regular expression per entry. Strings: printable ASCII without '"' or '\'; integers: 0 or 1-18 digits, no sign.
_STR = rb'([\x20\x21\x23-\x5b\x5d-\x7e]*)'
_INT = rb'(0|[1-9][0-9]{0,17})(?![0-9])'
_ENTRY = re.compile(rb'  \{\n   "file": "' + _STR + rb'",\n   "size_bytes": ' + _INT + rb',\n   "crc32c": "'
                    + _STR + rb'",\n   "record_bytes": ' + _INT + rb',\n   "samples": ' + _INT + rb'\n  \}')
_LIST_END = b'\n ]\n}\n'


def scan_entries(text, start, name_at, name_len, values):
    """Read a manifest's "files" entries from text[start:] into the columns: (entries, True) when the whole
    rest of the text is iogen's own form of the list, else (entries read before the first that is not, False)."""
    text = bytes(text)
    cap = name_at.shape[0]
    if name_len.shape[0] != cap or values.shape[0] != 3 or values.shape[1] != cap:
        raise ValueError("name_at, name_len and the 3 rows of values must hold the same number of entries")
    if start < 0 or start > len(text):
        raise ValueError(f"start {start} is outside the text of {len(text)} bytes")
    at, count = start, 0
    while count < cap:
        m = _ENTRY.match(text, at)
        if m is None:
            break
        name_at[count], name_len[count] = m.start(1), m.end(1) - m.start(1)
        values[0, count], values[1, count], values[2, count] = int(m[2]), int(m[4]), int(m[5])
        count += 1
        at = m.end()
        if text.startswith(b",\n", at):
            at += 2
            continue
        return count, text[at:] == _LIST_END
    return count, False
