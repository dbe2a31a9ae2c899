/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord frames use it.
 *
 * Two paths with the same results:
 *  - software: slicing-by-8 tables (crc_slice8.h);
 *  - hardware: the SSE4.2 crc32 instruction, compiled with a target attribute so the module
 *    builds without -msse4.2 and is chosen at run time only when the CPU has it. The crc32
 *    instruction has a 3-cycle latency and 1-cycle throughput, so long inputs run three
 *    independent streams over adjacent blocks and join them by "appending zeros" to the first
 *    CRCs with precomputed GF(2) operator tables (the technique of Mark Adler's crc32c.c).
 *
 *  - folding: on CPUs with AVX-512 and VPCLMULQDQ, inputs of IOGEN_CRC32C_FOLD_MIN bytes or more
 *    are folded 256 bytes at a time by carry-less multiplies over four 512-bit registers (the
 *    method of Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
 *    Intel 2009), the last 16 bytes finished by the crc32 instruction: about three times the
 *    crc32 instruction's one 8-byte step per cycle.
 *
 * The functions take and return the finished CRC (pre/post inversion included), so
 * crc(b, crc(a)) == crc(a + b). iogen_crc32c_init() must run once before any other call.
 */
#ifndef IOGEN_CRC32C_H
#define IOGEN_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "crc_slice8.h"

#define IOGEN_CRC32C_POLY 0x82F63B78u
/* Block sizes of the three-stream hardware loop: long blocks for bulk, short for the rest. */
#define IOGEN_CRC32C_LONG 8192
#define IOGEN_CRC32C_SHORT 256

static uint32_t iogen_crc32c_table[8][256];
static uint32_t iogen_crc32c_long_zeros[4][256];
static uint32_t iogen_crc32c_short_zeros[4][256];
static int iogen_crc32c_hw_ok = 0;

/* Multiply a 32x32 GF(2) matrix (columns) by a vector. */
static uint32_t iogen_gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1) {
        if (vec & 1u) sum ^= mat[i];
    }
    return sum;
}

/* out = a o b (apply b, then a); out may not alias a or b. */
static void iogen_gf2_compose(uint32_t *out, const uint32_t *a, const uint32_t *b)
{
    for (int n = 0; n < 32; n++) out[n] = iogen_gf2_times(a, b[n]);
}

/* Tables that advance a raw CRC register over `len` zero bytes, one table per input byte. */
static void iogen_crc32c_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t bit_op[32], tmp[32], base[32], result[32];
    /* One zero bit: crc = (crc >> 1) ^ (crc & 1 ? POLY : 0). */
    bit_op[0] = IOGEN_CRC32C_POLY;
    for (int n = 1; n < 32; n++) bit_op[n] = 1u << (n - 1);
    /* One zero byte = eight zero bits. */
    memcpy(base, bit_op, sizeof base);
    for (int k = 0; k < 3; k++) {
        iogen_gf2_compose(tmp, base, base);
        memcpy(base, tmp, sizeof base);
    }
    /* result = base^len by square-and-multiply. */
    for (int n = 0; n < 32; n++) result[n] = 1u << n;
    while (len) {
        if (len & 1) {
            iogen_gf2_compose(tmp, base, result);
            memcpy(result, tmp, sizeof result);
        }
        len >>= 1;
        if (len) {
            iogen_gf2_compose(tmp, base, base);
            memcpy(base, tmp, sizeof base);
        }
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int k = 0; k < 4; k++) zeros[k][n] = iogen_gf2_times(result, n << (8 * k));
    }
}

static inline uint32_t iogen_crc32c_shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff]
           ^ zeros[3][crc >> 24];
}

static uint32_t iogen_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    return ~iogen_crc_slice8(iogen_crc32c_table, ~crc, p, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define IOGEN_CRC32C_HAVE_HW_CODE 1
#include <nmmintrin.h>

/* Three independent crc32 streams over consecutive `block`-byte thirds, while 3 * block bytes
   remain (the instruction's 3-cycle latency hides behind the other two), then joined: the first
   CRC shifted over `block` zero bytes (zeros table of that length) xor the next. Always inlined,
   with block a constant at both call sites. */
__attribute__((target("sse4.2"), always_inline))
static inline uint64_t iogen_crc32c_3way(uint64_t c0, const unsigned char **pp, size_t *np,
                                         size_t block, uint32_t zeros[4][256])
{
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + block;
        do {
            c0 = _mm_crc32_u64(c0, iogen_load_le64(p));
            c1 = _mm_crc32_u64(c1, iogen_load_le64(p + block));
            c2 = _mm_crc32_u64(c2, iogen_load_le64(p + 2 * block));
            p += 8;
        } while (p < end);
        c0 = iogen_crc32c_shift(zeros, (uint32_t)c0) ^ c1;
        c0 = iogen_crc32c_shift(zeros, (uint32_t)c0) ^ c2;
        p += 2 * block;
        n -= 3 * block;
    }
    *pp = p;
    *np = n;
    return c0;
}

__attribute__((target("sse4.2")))
static uint32_t iogen_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c0 = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    c0 = iogen_crc32c_3way(c0, &p, &n, IOGEN_CRC32C_LONG, iogen_crc32c_long_zeros);
    c0 = iogen_crc32c_3way(c0, &p, &n, IOGEN_CRC32C_SHORT, iogen_crc32c_short_zeros);
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, iogen_load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}

static int iogen_cpu_has_sse42(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
}

#include <immintrin.h>
#define IOGEN_CRC32C_FOLD_MIN 1024

/* A 128-bit lane moved D bits further into the message, modulo P (CRC-32C, bit-reflected): its
   low qword times reflect32(x^(D+63) mod P) << 32, its high qword times reflect32(x^(D-1) mod P)
   << 32 (the reflected 64x64 product lands one bit off, hence 63 and -1), then the lane of data
   found D bits on is xored in. Constants: (high qword, low qword) for D = 2048, 512, 128 bits,
   checked against the table CRC by tests/core (every size and alignment around the blocks). */
#define IOGEN_CRC32C_K2048 0x1426a81500000000ULL, 0xe9a5d8be00000000ULL
#define IOGEN_CRC32C_K512 0x75bba45b00000000ULL, 0x1c19243b00000000ULL
#define IOGEN_CRC32C_K128 0x3171d43000000000ULL, 0x3743f7bd00000000ULL

__attribute__((target("avx512f,vpclmulqdq"), always_inline))
static inline __m512i iogen_crc32c_fold512(__m512i a, __m512i k, __m512i next)
{
    /* 0x96: a ^ b ^ c */
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11),
                                     next, 0x96);
}

__attribute__((target("pclmul,sse4.2"), always_inline))
static inline __m128i iogen_crc32c_fold128(__m128i a, __m128i k, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), next);
}

/* CRC-32C of n >= 256 bytes by folding (see the top of this file). */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))
static uint32_t iogen_crc32c_fold(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)IOGEN_CRC32C_K2048));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)IOGEN_CRC32C_K512));
    const __m128i k128 = _mm_set_epi64x((long long)IOGEN_CRC32C_K128);
    __m512i x0 = _mm512_loadu_si512((const void *)p);
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
    /* the register's start value is xored into the first four bytes of the message */
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        x0 = iogen_crc32c_fold512(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = iogen_crc32c_fold512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = iogen_crc32c_fold512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = iogen_crc32c_fold512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    x0 = iogen_crc32c_fold512(x0, k512, x1);
    x0 = iogen_crc32c_fold512(x0, k512, x2);
    x0 = iogen_crc32c_fold512(x0, k512, x3);
    __m128i y = _mm512_extracti32x4_epi32(x0, 0);
    y = iogen_crc32c_fold128(y, k128, _mm512_extracti32x4_epi32(x0, 1));
    y = iogen_crc32c_fold128(y, k128, _mm512_extracti32x4_epi32(x0, 2));
    y = iogen_crc32c_fold128(y, k128, _mm512_extracti32x4_epi32(x0, 3));
    while (n >= 16) {
        y = iogen_crc32c_fold128(y, k128, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* the 16 bytes left, from a zero register, are the whole message's register */
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(y));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(y, 1));
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

static int iogen_cpu_has_fold(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq")
           && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
}
#else
#define IOGEN_CRC32C_HAVE_HW_CODE 0
static uint32_t iogen_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    return iogen_crc32c_sw(crc, p, n);
}
static int iogen_cpu_has_sse42(void) { return 0; }
#define IOGEN_CRC32C_FOLD_MIN ((size_t)-1)
static uint32_t iogen_crc32c_fold(uint32_t crc, const unsigned char *p, size_t n)
{
    return iogen_crc32c_sw(crc, p, n);
}
static int iogen_cpu_has_fold(void) { return 0; }
#endif
static int iogen_crc32c_fold_ok = 0;

static void iogen_crc32c_init(void)
{
    iogen_crc_slice8_init(iogen_crc32c_table, IOGEN_CRC32C_POLY);
    iogen_crc32c_zeros(iogen_crc32c_long_zeros, IOGEN_CRC32C_LONG);
    iogen_crc32c_zeros(iogen_crc32c_short_zeros, IOGEN_CRC32C_SHORT);
    iogen_crc32c_hw_ok = iogen_cpu_has_sse42();
    iogen_crc32c_fold_ok = iogen_crc32c_hw_ok && iogen_cpu_has_fold();
}

/* The dispatching entry point: folding for long inputs, else the crc32 instruction, when the
   CPU has them; tables otherwise. */
static inline uint32_t iogen_crc32c(uint32_t crc, const unsigned char *p, size_t n)
{
    if (iogen_crc32c_fold_ok && n >= IOGEN_CRC32C_FOLD_MIN) return iogen_crc32c_fold(crc, p, n);
    return iogen_crc32c_hw_ok ? iogen_crc32c_hw(crc, p, n) : iogen_crc32c_sw(crc, p, n);
}

static inline uint32_t iogen_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
