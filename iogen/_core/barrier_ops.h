/* The node barrier's atomics and futex calls (barrier.pyx). The segment is shared between
 * processes, so the futex is a shared one (no FUTEX_PRIVATE_FLAG): the kernel keys it on the
 * mapped page, which every process mapping the segment shares. Off Linux there is no futex: a
 * wait is a short sleep, and the waiter re-checks the counts itself (never needs a wake). */
#ifndef IOGEN_BARRIER_OPS_H
#define IOGEN_BARRIER_OPS_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static inline void iogen_store64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline uint64_t iogen_load64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline uint32_t iogen_load32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void iogen_add32(uint32_t *p, int32_t d) { __atomic_add_fetch(p, (uint32_t)d, __ATOMIC_SEQ_CST); }

static inline void iogen_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleep on *word while it still holds `expected`, at most timeout_ns. Returns 0 (woken, the word
 * changed, or a spurious wake: the caller re-checks), ETIMEDOUT, or EINTR (a signal: the caller
 * lets Python run its handlers). */
static inline int iogen_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts;
    if (timeout_ns <= 0)
        return ETIMEDOUT;
    ts.tv_sec = (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec = (long)(timeout_ns % 1000000000);
#ifdef __linux__
    if (syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0) == 0)
        return 0;
    if (errno == EAGAIN)
        return 0;
    return errno == EINTR ? EINTR : ETIMEDOUT;
#else
    (void)word;
    (void)expected;
    if (ts.tv_sec > 0 || ts.tv_nsec > 200000) {
        ts.tv_sec = 0;
        ts.tv_nsec = 200000;
    }
    return nanosleep(&ts, NULL) == 0 ? 0 : (errno == EINTR ? EINTR : 0);
#endif
}

static inline void iogen_futex_wake_all(uint32_t *word)
{
#ifdef __linux__
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

#endif
