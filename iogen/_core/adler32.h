/* Adler-32 (RFC 1950, zlib.adler32's values) for PNG's zlib stream (iogen/formats/png.py).
 *
 * zlib's adler32 is a byte loop (about 3 GB/s); PNG generation spent most of its time in it. With
 * SSE2 (part of every x86-64 CPU, so no run-time check) 16 bytes a step: psadbw sums the bytes
 * (s1), pmaddwd the bytes times their weights 16..1 (s2's share of the step), and a running sum of
 * s1 gives the 16 * s1 every step adds to s2. Blocks of ADLER_BLOCK bytes keep every 32-bit lane
 * below 2^32; the totals are folded in 64-bit arithmetic and reduced mod 65521 per block. Where the
 * CPU has AVX2 (checked at run time: iogen_adler32_init), the same 32 bytes a step. Other CPUs take
 * the scalar loop (the same values). With AVX-512BW, 64 bytes a step and one multiply a step fewer
 * (iogen_adler32_avx512).
 */
#ifndef IOGEN_ADLER32_H
#define IOGEN_ADLER32_H

#include <stddef.h>
#include <stdint.h>

#define IOGEN_ADLER_MOD 65521U
#define IOGEN_ADLER_NMAX 5552  /* zlib's: the most bytes before s2 could pass 2^32 */

static uint32_t iogen_adler32_scalar(uint32_t adler, const unsigned char *p, size_t n)
{
    uint32_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    while (n) {
        size_t k = n < IOGEN_ADLER_NMAX ? n : IOGEN_ADLER_NMAX;
        n -= k;
        while (k--) {
            s1 += *p++;
            s2 += s1;
        }
        s1 %= IOGEN_ADLER_MOD;
        s2 %= IOGEN_ADLER_MOD;
    }
    return (s2 << 16) | s1;
}

#if defined(__SSE2__)
#include <emmintrin.h>

/* 16-byte steps per block: 346 x 16 = 5,536 bytes; every lane stays far below 2^32 */
#define IOGEN_ADLER_STEPS 346

static inline uint64_t iogen_adler_hsum32(__m128i v)
{
    uint32_t x[4];
    _mm_storeu_si128((__m128i *)x, v);
    return (uint64_t)x[0] + x[1] + x[2] + x[3];
}

static uint32_t iogen_adler32_base(uint32_t adler, const unsigned char *p, size_t n)
{
    uint64_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    const __m128i zero = _mm_setzero_si128();
    const __m128i w_lo = _mm_setr_epi16(16, 15, 14, 13, 12, 11, 10, 9);
    const __m128i w_hi = _mm_setr_epi16(8, 7, 6, 5, 4, 3, 2, 1);
    while (n >= 16) {
        size_t steps = n / 16;
        if (steps > IOGEN_ADLER_STEPS)
            steps = IOGEN_ADLER_STEPS;
        __m128i v_s1 = zero, v_ps = zero, v_s2 = zero;
        for (size_t i = 0; i < steps; i++, p += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            v_ps = _mm_add_epi32(v_ps, v_s1);
            v_s1 = _mm_add_epi32(v_s1, _mm_sad_epu8(x, zero));
            v_s2 = _mm_add_epi32(v_s2, _mm_madd_epi16(_mm_unpacklo_epi8(x, zero), w_lo));
            v_s2 = _mm_add_epi32(v_s2, _mm_madd_epi16(_mm_unpackhi_epi8(x, zero), w_hi));
        }
        n -= steps * 16;
        s2 += 16 * (uint64_t)steps * s1 + 16 * iogen_adler_hsum32(v_ps) + iogen_adler_hsum32(v_s2);
        s1 += iogen_adler_hsum32(v_s1);
        s1 %= IOGEN_ADLER_MOD;
        s2 %= IOGEN_ADLER_MOD;
    }
    return iogen_adler32_scalar((uint32_t)((s2 << 16) | s1), p, n);
}
#else
static uint32_t iogen_adler32_base(uint32_t adler, const unsigned char *p, size_t n)
{
    return iogen_adler32_scalar(adler, p, n);
}
#endif

static int iogen_adler32_avx2_ok = 0;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* 32-byte steps per block: 173 x 32 = 5,536 bytes, as the SSE2 loop's blocks */
#define IOGEN_ADLER_STEPS32 173

__attribute__((target("avx2")))
static uint64_t iogen_adler_hsum256(__m256i v)
{
    uint32_t x[8];
    _mm256_storeu_si256((__m256i *)x, v);
    return (uint64_t)x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
}

/* AVX2, 32 bytes a step: vpsadbw sums the bytes (s1); vpmaddubsw multiplies them by their weights
 * 32..1 and adds pairs (at most 255 x 63 < 2^15), vpmaddwd by 1 widens to 32-bit lanes (s2's share);
 * the running sum of s1 gives the 32 * s1 every step adds to s2. The rest goes to the SSE2 loop. */
__attribute__((target("avx2")))
static uint32_t iogen_adler32_avx2(uint32_t adler, const unsigned char *p, size_t n)
{
    uint64_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    const __m256i zero = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i weights = _mm256_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                             16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    while (n >= 32) {
        size_t steps = n / 32;
        if (steps > IOGEN_ADLER_STEPS32)
            steps = IOGEN_ADLER_STEPS32;
        __m256i v_s1 = zero, v_ps = zero, v_s2 = zero;
        for (size_t i = 0; i < steps; i++, p += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)p);
            v_ps = _mm256_add_epi32(v_ps, v_s1);
            v_s1 = _mm256_add_epi32(v_s1, _mm256_sad_epu8(x, zero));
            v_s2 = _mm256_add_epi32(v_s2, _mm256_madd_epi16(_mm256_maddubs_epi16(x, weights), ones));
        }
        n -= steps * 32;
        s2 += 32 * (uint64_t)steps * s1 + 32 * iogen_adler_hsum256(v_ps) + iogen_adler_hsum256(v_s2);
        s1 += iogen_adler_hsum256(v_s1);
        s1 %= IOGEN_ADLER_MOD;
        s2 %= IOGEN_ADLER_MOD;
    }
    return iogen_adler32_base((uint32_t)((s2 << 16) | s1), p, n);
}

/* AVX-512BW, 64 bytes a step. s1: vpsadbw sums each 8-byte group g into 64-bit lane g (v_s1 keeps the lanes apart).
 * s2's share of a step, sum_i (64 - i) x_i, splits with i = 8g + j into sum_g 8 (7 - g) S_g + sum_i (8 - j) x_i:
 * the first part is weighted once a block, from v_s1's lane totals (no work a step); the second is vpmaddubsw with
 * the weights 8..1 (a pair at most 255 x 15), added as 16-bit lanes for 8 steps (at most 30,600: no overflow) and
 * widened by vpmaddwd once per 8 steps, not once a step. The running sum of s1 (v_ps) gives the 64 * s1 every
 * step adds to s2. v_s1 and v_ps are 64-bit lanes, v_s2's 32-bit lanes take at most 61,200 per 8 steps: blocks of
 * 1,024 steps (64 KiB; the sums reduced mod 65521 after each) keep every lane far from overflowing. */
#define IOGEN_ADLER_STEPS64 1024

/* One block of `steps` steps' vector sums (v_s1, v_ps, v_s2 as above) added to s1 and s2, both then reduced mod
 * 65521: the lane totals, v_s1's lanes weighted by their groups, and the 64 * s1 each step adds to s2. */
__attribute__((target("avx512f,avx512bw")))
static inline void iogen_adler_fold512(__m512i v_s1, __m512i v_ps, __m512i v_s2, size_t steps, uint64_t *s1,
                                       uint64_t *s2)
{
    uint64_t x[8], ps = 0, t2 = 0, t1 = 0, tg = 0;
    _mm512_storeu_si512((void *)x, v_ps);
    for (int k = 0; k < 8; k++) ps += x[k];
    _mm512_storeu_si512((void *)x, v_s2);
    for (int k = 0; k < 8; k++) t2 += (x[k] & 0xFFFFFFFFu) + (x[k] >> 32);
    _mm512_storeu_si512((void *)x, v_s1);
    for (int k = 0; k < 8; k++) {
        t1 += x[k];
        tg += (uint64_t)(8 * (7 - k)) * x[k];
    }
    *s2 = (*s2 + 64 * (uint64_t)steps * *s1 + 64 * ps + t2 + tg) % IOGEN_ADLER_MOD;
    *s1 = (*s1 + t1) % IOGEN_ADLER_MOD;
}

/* One 64-byte step's sums (v_s1, v_ps, and the group's 16-bit acc, as above): shared by the loop below over bytes
 * loaded and by img_noise.h's over the noise it makes in registers. */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void iogen_adler_step512(__m512i v, __m512i *v_s1, __m512i *v_ps, __m512i *acc)
{
    const __m512i weights = _mm512_set1_epi64(0x0102030405060708LL);  /* byte j of each group: 8 - j */
    *v_ps = _mm512_add_epi64(*v_ps, *v_s1);
    *v_s1 = _mm512_add_epi64(*v_s1, _mm512_sad_epu8(v, _mm512_setzero_si512()));
    *acc = _mm512_add_epi16(*acc, _mm512_maddubs_epi16(v, weights));
}

__attribute__((target("avx512f,avx512bw")))
static uint32_t iogen_adler32_avx512(uint32_t adler, const unsigned char *p, size_t n)
{
    uint64_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi16(1);
    while (n >= 64) {
        size_t steps = n / 64;
        if (steps > IOGEN_ADLER_STEPS64)
            steps = IOGEN_ADLER_STEPS64;
        __m512i v_s1 = zero, v_ps = zero, v_s2 = zero;
        for (size_t i = 0; i < steps;) {
            size_t group = steps - i < 8 ? steps - i : 8;
            __m512i acc = zero;
            for (size_t k = 0; k < group; k++, p += 64)
                iogen_adler_step512(_mm512_loadu_si512((const void *)p), &v_s1, &v_ps, &acc);
            v_s2 = _mm512_add_epi32(v_s2, _mm512_madd_epi16(acc, ones));
            i += group;
        }
        n -= steps * 64;
        iogen_adler_fold512(v_s1, v_ps, v_s2, steps, &s1, &s2);
    }
    return iogen_adler32_avx2((uint32_t)((s2 << 16) | s1), p, n);
}

static int iogen_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}

static int iogen_cpu_has_avx512bw(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
}
#else
static uint32_t iogen_adler32_avx2(uint32_t adler, const unsigned char *p, size_t n)
{
    return iogen_adler32_base(adler, p, n);
}
static uint32_t iogen_adler32_avx512(uint32_t adler, const unsigned char *p, size_t n)
{
    return iogen_adler32_base(adler, p, n);
}
static int iogen_cpu_has_avx2(void) { return 0; }
static int iogen_cpu_has_avx512bw(void) { return 0; }
#endif

static int iogen_adler32_avx512_ok = 0;

/* Choose the loop: level 2 the best the CPU has (AVX-512BW, AVX2, SSE2), 1 AVX2 at most, 0 SSE2 (or the
 * scalar loop); returns the level in use. */
static int iogen_adler32_init(int level)
{
    iogen_adler32_avx2_ok = level >= 1 && iogen_cpu_has_avx2();
    iogen_adler32_avx512_ok = level >= 2 && iogen_adler32_avx2_ok && iogen_cpu_has_avx512bw();
    return iogen_adler32_avx512_ok ? 2 : iogen_adler32_avx2_ok ? 1 : 0;
}

static inline uint32_t iogen_adler32(uint32_t adler, const unsigned char *p, size_t n)
{
    if (iogen_adler32_avx512_ok)
        return iogen_adler32_avx512(adler, p, n);
    if (iogen_adler32_avx2_ok)
        return iogen_adler32_avx2(adler, p, n);
    return iogen_adler32_base(adler, p, n);
}

#endif
