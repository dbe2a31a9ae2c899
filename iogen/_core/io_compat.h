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

#endif
