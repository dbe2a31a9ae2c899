/* Portability shims for reader.pyx: Linux has everything; elsewhere O_DIRECT and
 * posix_fadvise may be missing, and the core must still build (the calls then fail cleanly). */
#ifndef IOGEN_IO_COMPAT_H
#define IOGEN_IO_COMPAT_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef O_DIRECT
#define IOGEN_O_DIRECT O_DIRECT
#else
#define IOGEN_O_DIRECT 0 /* open_file(direct=True) reports EINVAL where this is 0 */
#endif

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#ifndef O_DIRECTORY
#define O_DIRECTORY 0
#endif

/* The folder stat_sizes resolves names against: opened for lookups only where the system can (O_PATH
 * needs no read permission, as os.stat of a path inside it needs none), else read-only. */
#ifdef O_PATH
#define IOGEN_O_LOOKUP O_PATH
#else
#define IOGEN_O_LOOKUP O_RDONLY
#endif

/* A relative path of stat_sizes is at most this long (a longer one is refused before the loop). */
#define IOGEN_STAT_NAME_MAX 4095

/* The size of each file named by a row of `names` (n rows of `width` bytes: paths relative to `dir`,
 * without NUL), into out[i]: -1 where it does not exist (ENOENT, as os.stat's FileNotFoundError).
 * Links are followed, as os.stat follows them. Returns -1 once every row is stat'ed, else the row
 * whose stat failed otherwise, its errno in *err (a `dir` that cannot be opened but exists: row 0). */
static inline int64_t iogen_stat_sizes(const char *dir, const unsigned char *names, int64_t n, int64_t width,
                                       int64_t *out, int *err)
{
    char path[IOGEN_STAT_NAME_MAX + 1];
    struct stat st;
    int64_t i;
    int dfd = open(dir, IOGEN_O_LOOKUP | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        if (errno != ENOENT || n == 0) {
            *err = errno;
            return n ? 0 : -1;
        }
        for (i = 0; i < n; i++) out[i] = -1; /* no folder: no file in it */
        return -1;
    }
    for (i = 0; i < n; i++) {
        memcpy(path, names + i * width, (size_t)width);
        path[width] = 0;
        if (fstatat(dfd, path, &st, 0) == 0) {
            out[i] = (int64_t)st.st_size;
        } else if (errno == ENOENT) {
            out[i] = -1;
        } else {
            *err = errno;
            close(dfd);
            return i;
        }
    }
    close(dfd);
    return -1;
}

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
