/* The bulk of iogen's generated content (fill.pyx): nwords 64-bit words
 *     word(b) = mix64((b * GAMMA) ^ key),  b = block, block + 1, ..., block + nwords - 1,
 * stored little-endian, with mix64 the splitmix64 finaliser (Steele, Lea, Flood, OOPSLA 2014).
 *
 * Two paths with the same results: scalar, and AVX-512 (F + DQ, for the 64-bit multiply) eight
 * words per instruction, compiled with a target attribute so the module builds without -mavx512*
 * and chosen at run time only when the CPU (and the OS) support it. b * GAMMA advances by adding
 * GAMMA (8 * GAMMA for a vector): the same value modulo 2^64, one multiply fewer per word.
 * iogen_fill_words_scan: the JPEG scan's 32-byte blocks (iogen/formats/jpeg.py, fill.pyx) in the same pass:
 * the same words, every byte 0xFE or 0xFF lowered to 0xFD (the smaller of the byte and 0xFD), then in each
 * block of four words (from the first) byte 0 set to 0x00 (the DC) and byte 31 to 0xFE (the end of block).
 * The AVX-512 loop also needs AVX-512BW (vpminub).
 * iogen_fill_words_init() must run once before iogen_fill_words.
 */
#ifndef IOGEN_FILL_WORDS_H
#define IOGEN_FILL_WORDS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define IOGEN_FILL_GAMMA 0x9E3779B97F4A7C15ULL
#define IOGEN_FILL_MIX_C1 0xBF58476D1CE4E5B9ULL
#define IOGEN_FILL_MIX_C2 0x94D049BB133111EBULL

static int iogen_fill_avx512_ok = 0;

static inline void iogen_fill_store_le64(unsigned char *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    memcpy(p, &w, 8);
}

static void iogen_fill_words_scalar(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    uint64_t bg = block * IOGEN_FILL_GAMMA;
    for (size_t i = 0; i < nwords; i++, bg += IOGEN_FILL_GAMMA) {
        uint64_t z = bg ^ key;
        z = (z ^ (z >> 30)) * IOGEN_FILL_MIX_C1;
        z = (z ^ (z >> 27)) * IOGEN_FILL_MIX_C2;
        iogen_fill_store_le64(dst + 8 * i, z ^ (z >> 31));
    }
}

/* Each byte of w the smaller of it and 0xFD: a byte of 0xFE or 0xFF has its top 7 bits set; m holds 0x01 in each
 * such byte (an exact per-byte zero test of ~(w | 0x01..01), no carry between bytes), and w - m - (w & m) takes 1 from
 * 0xFE and 2 from 0xFF (no borrow: those bytes are >= 2). */
static inline uint64_t iogen_fill_min_fd(uint64_t w)
{
    const uint64_t lo7 = 0x7F7F7F7F7F7F7F7FULL, ones = 0x0101010101010101ULL;
    uint64_t y = ~(w | ones);                     /* byte 0 where w's byte is 0xFE or 0xFF */
    uint64_t nz = ((y & lo7) + lo7) | y;          /* bit 7 of each byte: the byte of y is not 0 */
    uint64_t m = (~nz & ~lo7) >> 7;               /* 0x01 where it is 0 */
    return w - m - (w & m);
}

/* Word i % 4 of a scan block: (w & keep) | set (little-endian: byte 0 is the word's low byte) */
#define IOGEN_SCAN_KEEP_0 (~0xFFULL)
#define IOGEN_SCAN_KEEP_3 (~(0xFFULL << 56))
#define IOGEN_SCAN_SET_3 (0xFEULL << 56)

static void iogen_fill_words_scan_scalar(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    static const uint64_t keep[4] = {IOGEN_SCAN_KEEP_0, ~0ULL, ~0ULL, IOGEN_SCAN_KEEP_3};
    static const uint64_t set[4] = {0, 0, 0, IOGEN_SCAN_SET_3};
    uint64_t bg = block * IOGEN_FILL_GAMMA;
    for (size_t i = 0; i < nwords; i++, bg += IOGEN_FILL_GAMMA) {
        uint64_t z = bg ^ key;
        z = (z ^ (z >> 30)) * IOGEN_FILL_MIX_C1;
        z = (z ^ (z >> 27)) * IOGEN_FILL_MIX_C2;
        z = iogen_fill_min_fd(z ^ (z >> 31));
        iogen_fill_store_le64(dst + 8 * i, (z & keep[i & 3]) | set[i & 3]);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define IOGEN_FILL_HAVE_AVX512_CODE 1
#include <immintrin.h>

__attribute__((target("avx512f,avx512dq")))
static void iogen_fill_words_avx512(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    const __m512i c1 = _mm512_set1_epi64((long long)IOGEN_FILL_MIX_C1);
    const __m512i c2 = _mm512_set1_epi64((long long)IOGEN_FILL_MIX_C2);
    const __m512i k = _mm512_set1_epi64((long long)key);
    const __m512i step = _mm512_set1_epi64((long long)(8 * IOGEN_FILL_GAMMA));
    __m512i bg = _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64((long long)block),
                                                     _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
                                    _mm512_set1_epi64((long long)IOGEN_FILL_GAMMA));
    size_t i = 0;
    for (; i + 8 <= nwords; i += 8) {
        __m512i z = _mm512_xor_si512(bg, k);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
        _mm512_storeu_si512((void *)(dst + 8 * i), _mm512_xor_si512(z, _mm512_srli_epi64(z, 31)));
        bg = _mm512_add_epi64(bg, step);
    }
    iogen_fill_words_scalar(dst + 8 * i, block + i, nwords - i, key);
}

static int iogen_fill_scan_avx512_ok = 0;

__attribute__((target("avx512f,avx512dq,avx512bw")))
static void iogen_fill_words_scan_avx512(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    const __m512i c1 = _mm512_set1_epi64((long long)IOGEN_FILL_MIX_C1);
    const __m512i c2 = _mm512_set1_epi64((long long)IOGEN_FILL_MIX_C2);
    const __m512i k = _mm512_set1_epi64((long long)key);
    const __m512i fd = _mm512_set1_epi8((char)0xFD);
    /* two blocks a vector: lanes 0 and 4 start one (DC byte 0x00), lanes 3 and 7 end it (0xFE) */
    const __m512i keep = _mm512_setr_epi64((long long)IOGEN_SCAN_KEEP_0, -1, -1, (long long)IOGEN_SCAN_KEEP_3,
                                           (long long)IOGEN_SCAN_KEEP_0, -1, -1, (long long)IOGEN_SCAN_KEEP_3);
    const __m512i set = _mm512_setr_epi64(0, 0, 0, (long long)IOGEN_SCAN_SET_3, 0, 0, 0, (long long)IOGEN_SCAN_SET_3);
    const __m512i step = _mm512_set1_epi64((long long)(8 * IOGEN_FILL_GAMMA));
    __m512i bg = _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64((long long)block),
                                                     _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
                                    _mm512_set1_epi64((long long)IOGEN_FILL_GAMMA));
    size_t i = 0;
    for (; i + 8 <= nwords; i += 8) {
        __m512i z = _mm512_xor_si512(bg, k);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
        z = _mm512_min_epu8(_mm512_xor_si512(z, _mm512_srli_epi64(z, 31)), fd);
        /* (z & keep) | set in one ternary-logic op: A = z, B = keep, C = set -> 0xEA */
        _mm512_storeu_si512((void *)(dst + 8 * i), _mm512_ternarylogic_epi64(z, keep, set, 0xEA));
        bg = _mm512_add_epi64(bg, step);
    }
    iogen_fill_words_scan_scalar(dst + 8 * i, block + i, nwords - i, key);  /* i % 4 == 0: the same phase */
}

static int iogen_cpu_has_avx512dq(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512dq") != 0;
}

static int iogen_cpu_has_avx512bw_dq(void)
{
    __builtin_cpu_init();
    return iogen_cpu_has_avx512dq() && __builtin_cpu_supports("avx512bw") != 0;
}
#else
#define IOGEN_FILL_HAVE_AVX512_CODE 0
static void iogen_fill_words_avx512(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    iogen_fill_words_scalar(dst, block, nwords, key);
}
static int iogen_fill_scan_avx512_ok = 0;
static void iogen_fill_words_scan_avx512(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    iogen_fill_words_scan_scalar(dst, block, nwords, key);
}
static int iogen_cpu_has_avx512dq(void) { return 0; }
static int iogen_cpu_has_avx512bw_dq(void) { return 0; }
#endif

static void iogen_fill_words_init(void)
{
    iogen_fill_avx512_ok = iogen_cpu_has_avx512dq();
    iogen_fill_scan_avx512_ok = iogen_cpu_has_avx512bw_dq();
}

/* The dispatching entry point: vectors when the CPU has them, one word at a time otherwise. */
static inline void iogen_fill_words(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    if (iogen_fill_avx512_ok)
        iogen_fill_words_avx512(dst, block, nwords, key);
    else
        iogen_fill_words_scalar(dst, block, nwords, key);
}

/* The JPEG scan's fill (see the header comment); iogen_fill_avx512_ok off (probes.use_vector_fill) turns it scalar. */
static inline void iogen_fill_words_scan(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    if (iogen_fill_avx512_ok && iogen_fill_scan_avx512_ok)
        iogen_fill_words_scan_avx512(dst, block, nwords, key);
    else
        iogen_fill_words_scan_scalar(dst, block, nwords, key);
}

#endif
