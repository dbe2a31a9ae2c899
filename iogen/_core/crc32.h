/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the zip and zlib CRC: zlib.crc32's values.
 *
 * Two paths with the same results:
 *  - software: slicing-by-8 tables (crc_slice8.h);
 *  - hardware: carry-less multiplication (PCLMULQDQ), folding four 128-bit lanes over 64-byte
 *    blocks, then one lane, then a Barrett reduction to 32 bits: Gopal et al., "Fast CRC
 *    Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel, 2009, with the
 *    bit-reflected constants of the Linux kernel's crc32-pclmul (x^(4*128+-32), x^(128+-32),
 *    x^64 mod P, P and floor(x^64 / P), reflected). Compiled with a target attribute so the module
 *    builds without -mpclmul, and chosen at run time only when the CPU has the instruction;
 *  - on CPUs with AVX-512 and VPCLMULQDQ, inputs of IOGEN_CRC32_FOLD_MIN bytes or more first fold
 *    four 512-bit registers over 256-byte blocks (x^(2048+-32) mod P, reflected, the same
 *    convention), then the four registers onto one (x^(512+-32): the 128-bit path's k1, k2) and its
 *    four lanes onto one (x^(128+-32)), and finish as the 128-bit path does: about twice its speed.
 * The functions take and return the finished CRC (pre/post inversion included), as zlib.crc32:
 * crc(b, crc(a)) == crc(a + b). iogen_crc32_init() must run once before any other call.
 */
#ifndef IOGEN_CRC32_H
#define IOGEN_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "crc_slice8.h"

#define IOGEN_CRC32_POLY 0xEDB88320u
/* The hardware path folds whole 16-byte lanes and needs at least four of them. */
#define IOGEN_CRC32_HW_MIN 64

static uint32_t iogen_crc32_table[8][256];
static int iogen_crc32_hw_ok = 0;

/* The raw register (no inversions) over n bytes. */
static inline uint32_t iogen_crc32_sw_raw(uint32_t c, const unsigned char *p, size_t n)
{
    return iogen_crc_slice8(iogen_crc32_table, c, p, n);
}

static uint32_t iogen_crc32_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    return ~iogen_crc32_sw_raw(~crc, p, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define IOGEN_CRC32_HAVE_HW_CODE 1
#include <emmintrin.h>
#include <smmintrin.h>
#include <wmmintrin.h>

/* a.lo * k.lo xor a.hi * k.hi xor next: one lane folded 128 (or 512) bits forward onto next. */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline __m128i iogen_crc32_fold(__m128i a, __m128i k, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)),
                         next);
}

/* One 128-bit lane (x0: the message so far folded onto its last 16 bytes) and the n bytes left, n a
   multiple of 16, to the raw 32-bit register. */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline uint32_t iogen_crc32_clmul_tail(__m128i x0, const unsigned char *p, size_t n)
{
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly_mu = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    while (n >= 16) {
        x0 = iogen_crc32_fold(x0, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 -> 64 bits (appending 32 zero bits), then 64 -> 32 by x^64 mod P. */
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(x0, k3k4, 0x10), _mm_srli_si128(x0, 8));
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k5, 0x00), _mm_srli_si128(x0, 4));
    /* Barrett reduction, bit-reflected. */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly_mu, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly_mu, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x0, t), 1);
}

/* The raw register over n >= IOGEN_CRC32_HW_MIN bytes, n a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t iogen_crc32_clmul_raw(uint32_t c, const unsigned char *p, size_t n)
{
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)c));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = iogen_crc32_fold(x0, k1k2, _mm_loadu_si128((const __m128i *)p));
        x1 = iogen_crc32_fold(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = iogen_crc32_fold(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = iogen_crc32_fold(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x0 = iogen_crc32_fold(x0, k3k4, x1);
    x0 = iogen_crc32_fold(x0, k3k4, x2);
    x0 = iogen_crc32_fold(x0, k3k4, x3);
    return iogen_crc32_clmul_tail(x0, p, n);
}

#include <immintrin.h>
#define IOGEN_CRC32_FOLD_MIN 1024

__attribute__((target("avx512f,vpclmulqdq"), always_inline))
static inline __m512i iogen_crc32_fold512(__m512i a, __m512i k, __m512i next)
{
    /* 0x96: a ^ b ^ c */
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11),
                                     next, 0x96);
}

/* The raw register over n >= 256 bytes, n a multiple of 16, by four 512-bit registers (see the top). */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t iogen_crc32_vclmul_raw(uint32_t c, const unsigned char *p, size_t n)
{
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430LL, 0x11542778aLL));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL));
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
                                  _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
    p += 256;
    n -= 256;
    while (n >= 256) {
        x0 = iogen_crc32_fold512(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = iogen_crc32_fold512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = iogen_crc32_fold512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = iogen_crc32_fold512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    x0 = iogen_crc32_fold512(x0, k512, x1);
    x0 = iogen_crc32_fold512(x0, k512, x2);
    x0 = iogen_crc32_fold512(x0, k512, x3);
    __m128i y = _mm512_extracti32x4_epi32(x0, 0);
    y = iogen_crc32_fold(y, k3k4, _mm512_extracti32x4_epi32(x0, 1));
    y = iogen_crc32_fold(y, k3k4, _mm512_extracti32x4_epi32(x0, 2));
    y = iogen_crc32_fold(y, k3k4, _mm512_extracti32x4_epi32(x0, 3));
    return iogen_crc32_clmul_tail(y, p, n);
}

static int iogen_crc32_vclmul_ok = 0;

static int iogen_cpu_has_vclmul(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("vpclmulqdq") != 0;
}

static uint32_t iogen_crc32_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    uint32_t c = ~crc;
    if (n >= IOGEN_CRC32_HW_MIN) {
        size_t bulk = n & ~(size_t)15;
        c = iogen_crc32_vclmul_ok && bulk >= IOGEN_CRC32_FOLD_MIN ? iogen_crc32_vclmul_raw(c, p, bulk)
                                                                 : iogen_crc32_clmul_raw(c, p, bulk);
        p += bulk;
        n -= bulk;
    }
    return ~iogen_crc32_sw_raw(c, p, n);
}

static int iogen_cpu_has_pclmul(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") != 0 && __builtin_cpu_supports("sse4.1") != 0;
}
#else
#define IOGEN_CRC32_HAVE_HW_CODE 0
static uint32_t iogen_crc32_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    return iogen_crc32_sw(crc, p, n);
}
static int iogen_cpu_has_pclmul(void) { return 0; }
static int iogen_crc32_vclmul_ok = 0;
static int iogen_cpu_has_vclmul(void) { return 0; }
#endif

static void iogen_crc32_init(void)
{
    iogen_crc_slice8_init(iogen_crc32_table, IOGEN_CRC32_POLY);
    iogen_crc32_hw_ok = iogen_cpu_has_pclmul();
    iogen_crc32_vclmul_ok = iogen_crc32_hw_ok && iogen_cpu_has_vclmul();
}

/* The dispatching entry point: carry-less multiply when the CPU has it, tables otherwise. */
static inline uint32_t iogen_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    return iogen_crc32_hw_ok ? iogen_crc32_hw(crc, p, n) : iogen_crc32_sw(crc, p, n);
}

#endif
