/* Portability shims for reader.pyx: Linux has everything; elsewhere O_DIRECT and
 * posix_fadvise may be missing, and the core must still build (the calls then fail cleanly). */
#ifndef IOGEN_IO_COMPAT_H
#define IOGEN_IO_COMPAT_H

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef O_DIRECT
#define IOGEN_O_DIRECT O_DIRECT
#else
#define IOGEN_O_DIRECT 0 /* open_file(direct=True) reports EINVAL where this is 0 */
#endif

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

/* Drop the whole file from the page cache; returns 0 or an error number (not -1/errno).
 * POSIX_FADV_DONTNEED skips dirty pages, so a freshly generated file would stay cached: write
 * dirty pages back first. sync_file_range does that without the device cache flush that
 * fdatasync may issue, so evicting thousands of clean files per epoch stays cheap. */
static inline int iogen_evict(int fd)
{
#if defined(SYNC_FILE_RANGE_WRITE)
    if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE
                                      | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
        int err = errno;
        /* Files that cannot do it (some FUSE and network file systems): drop clean pages only. */
        if (err != EINVAL && err != ESPIPE && err != ENOSYS && err != EOPNOTSUPP) return err;
    }
#endif
#if defined(POSIX_FADV_DONTNEED)
    return posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#else
    (void)fd;
    return ENOSYS;
#endif
}

/* Write-behind of a checkpoint file's range [off, off + len): drop == 0 starts its write-back
 * and returns at once (SYNC_FILE_RANGE_WRITE); drop != 0 waits until the range is on the device
 * (WAIT_BEFORE | WRITE | WAIT_AFTER: no device cache flush, the final fsync does that) and drops
 * its now clean pages (POSIX_FADV_DONTNEED), so the next pieces reuse page-cache pages the
 * writer just freed instead of taking fresh ones (docs/checkpointing.md, "Write design").
 * Returns 0 or an error number; a file that cannot do it (EINVAL, ESPIPE, ENOSYS, EOPNOTSUPP)
 * gives 0: write-behind is an optimisation, never a failure. */
static inline int iogen_write_behind(int fd, long long off, long long len, int drop)
{
#if defined(SYNC_FILE_RANGE_WRITE)
    unsigned int flags = drop ? (SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
                              : SYNC_FILE_RANGE_WRITE;
    if (sync_file_range(fd, off, len, flags) != 0) {
        int err = errno;
        if (err == EINVAL || err == ESPIPE || err == ENOSYS || err == EOPNOTSUPP) return 0;
        return err;
    }
#endif
#if defined(POSIX_FADV_DONTNEED)
    if (drop) {
        int rc = posix_fadvise(fd, off, len, POSIX_FADV_DONTNEED);
        if (rc == EINVAL || rc == ESPIPE || rc == ENOSYS || rc == EOPNOTSUPP) return 0;
        return rc;
    }
#endif
    (void)fd; (void)off; (void)len; (void)drop;
    return 0;
}

#endif
