/* The bulk of iogen's generated content (fill.pyx): nwords 64-bit words
 *     word(b) = mix64((b * GAMMA) ^ key),  b = block, block + 1, ..., block + nwords - 1,
 * stored little-endian, with mix64 the splitmix64 finaliser (Steele, Lea, Flood, OOPSLA 2014).
 *
 * Two paths with the same results: scalar, and AVX-512 (F + DQ, for the 64-bit multiply) eight
 * words per instruction, compiled with a target attribute so the module builds without -mavx512*
 * and chosen at run time only when the CPU (and the OS) support it. b * GAMMA advances by adding
 * GAMMA (8 * GAMMA for a vector): the same value modulo 2^64, one multiply fewer per word.
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

static int iogen_cpu_has_avx512dq(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512dq") != 0;
}
#else
#define IOGEN_FILL_HAVE_AVX512_CODE 0
static void iogen_fill_words_avx512(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    iogen_fill_words_scalar(dst, block, nwords, key);
}
static int iogen_cpu_has_avx512dq(void) { return 0; }
#endif

static void iogen_fill_words_init(void)
{
    iogen_fill_avx512_ok = iogen_cpu_has_avx512dq();
}

/* The dispatching entry point: vectors when the CPU has them, one word at a time otherwise. */
static inline void iogen_fill_words(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
{
    if (iogen_fill_avx512_ok)
        iogen_fill_words_avx512(dst, block, nwords, key);
    else
        iogen_fill_words_scalar(dst, block, nwords, key);
}

#endif
