/* Packing of the JPEG noise scan (fill.pyx jpeg_scan; iogen/formats/jpeg.py holds the format).
 *
 * A block is 108 bits, MSB first: "0" (DC), 15 x ("0" + the low 6 bits of one field byte), "10"
 * (EOB). As two numbers:
 *     A = DC and fields 0..7   57 bits: field k in bits 7*(7-k) .. +5 (each 7-bit slot's top bit 0)
 *     B = fields 8..14, EOB    51 bits: field 8+i in bits 7*(6-i)+2 .. +7, then "10"
 * Two blocks are 216 bits, exactly 27 bytes: three big-endian 64-bit words and 3 bytes, with no
 * bit accumulator and no per-field branch. A number is built from 8 field bytes at once: loaded
 * as one little-endian word, byte-swapped (field k to byte 7-k), masked to 6 bits a byte, and the
 * byte lanes squeezed to 7-bit lanes in three shift-and-mask steps, or, where the CPU has BMI2
 * (checked at run time: iogen_jpeg_pack_init; not on AMD before Zen 3, whose pext is microcoded),
 * by one pext with 0x7F7F...7F: the same bits, the pack about twice as fast.
 * The fields buffer must hold 8 readable bytes past the last block's field 14. Where the CPU has AVX-512 VBMI,
 * four blocks at a time in vector registers (iogen_jpeg_pack_avx512 below), the same bytes.
 */
#ifndef IOGEN_JPEG_PACK_H
#define IOGEN_JPEG_PACK_H

#include <stdint.h>
#include <string.h>

static inline uint64_t iogen_jpeg_load_be64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    w = __builtin_bswap64(w);
#endif
    return w;
}

static inline void iogen_jpeg_store_be64(unsigned char *p, uint64_t w)
{
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    w = __builtin_bswap64(w);
#endif
    memcpy(p, &w, 8);
}

/* byte j (bits 8j..8j+7, each < 0x40) -> bits 7j..7j+6 */
static inline uint64_t iogen_jpeg_squeeze(uint64_t x)
{
    x &= 0x3F3F3F3F3F3F3F3FULL;
    x = (x & 0x007F007F007F007FULL) | ((x & 0x7F007F007F007F00ULL) >> 1);
    x = (x & 0x00003FFF00003FFFULL) | ((x & 0x3FFF00003FFF0000ULL) >> 2);
    x = (x & 0x000000000FFFFFFFULL) | ((x & 0x0FFFFFFF00000000ULL) >> 4);
    return x;
}

static inline uint64_t iogen_jpeg_a(const unsigned char *f)
{
    return iogen_jpeg_squeeze(iogen_jpeg_load_be64(f));  /* field k is byte 7-k of the big-endian load */
}

static inline uint64_t iogen_jpeg_b(const unsigned char *f)
{
    /* fields 8..14 and one byte past them (dropped by the shift) */
    return (iogen_jpeg_squeeze(iogen_jpeg_load_be64(f + 8) >> 8) << 2) | 2;
}

/* The pack loop over two numbers A(f) and B(f) of a block's fields (the portable or the BMI2 ones). */
#define IOGEN_JPEG_PACK_BODY(A, B)                                                          \
    unsigned char *out = dst;                                                               \
    int64_t b = 0;                                                                          \
    for (; b + 2 <= blocks; b += 2, f += 30, out += 27) {                                   \
        uint64_t a = A(f), bb = B(f);                                                       \
        uint64_t c = A(f + 15), d = B(f + 15);                                              \
        iogen_jpeg_store_be64(out, (a << 7) | (bb >> 44));                                  \
        iogen_jpeg_store_be64(out + 8, (bb << 20) | (c >> 37));                             \
        iogen_jpeg_store_be64(out + 16, (c << 27) | (d >> 24));                             \
        out[24] = (unsigned char)(d >> 16);                                                 \
        out[25] = (unsigned char)(d >> 8);                                                  \
        out[26] = (unsigned char)d;                                                         \
    }                                                                                       \
    if (b < blocks) {                                                                       \
        uint64_t a = A(f), bb = B(f);                                                       \
        uint64_t r = bb & ((1ULL << 44) - 1);                                               \
        iogen_jpeg_store_be64(out, (a << 7) | (bb >> 44));                                  \
        out[8] = (unsigned char)(r >> 36);                                                  \
        out[9] = (unsigned char)(r >> 28);                                                  \
        out[10] = (unsigned char)(r >> 20);                                                 \
        out[11] = (unsigned char)(r >> 12);                                                 \
        out[12] = (unsigned char)(r >> 4);                                                  \
        out[13] = (unsigned char)(((r & 0xF) << 4) | 0xF);                                  \
        out += 14;                                                                          \
    }                                                                                       \
    return (int64_t)(out - dst);

/* Pack `blocks` blocks of fields (15 bytes a block) to dst; an odd last block is padded with
 * 1-bits to a whole byte (only the scan's last call may pass an odd count). Returns the bytes
 * written, (blocks * 108 + 7) / 8. */
static int64_t iogen_jpeg_pack_portable(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    IOGEN_JPEG_PACK_BODY(iogen_jpeg_a, iogen_jpeg_b)
}

static int iogen_jpeg_bmi2_ok = 0;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

__attribute__((target("bmi2"), always_inline))
static inline uint64_t iogen_jpeg_squeeze_bmi2(uint64_t x)
{
    return _pext_u64(x & 0x3F3F3F3F3F3F3F3FULL, 0x7F7F7F7F7F7F7F7FULL);
}

__attribute__((target("bmi2"), always_inline))
static inline uint64_t iogen_jpeg_a_bmi2(const unsigned char *f)
{
    return iogen_jpeg_squeeze_bmi2(iogen_jpeg_load_be64(f));
}

__attribute__((target("bmi2"), always_inline))
static inline uint64_t iogen_jpeg_b_bmi2(const unsigned char *f)
{
    return (iogen_jpeg_squeeze_bmi2(iogen_jpeg_load_be64(f + 8) >> 8) << 2) | 2;
}

__attribute__((target("bmi2")))
static int64_t iogen_jpeg_pack_bmi2(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    IOGEN_JPEG_PACK_BODY(iogen_jpeg_a_bmi2, iogen_jpeg_b_bmi2)
}

static int iogen_jpeg_cpu_has_fast_pext(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("bmi2"))
        return 0;
    /* AMD before Zen 3 runs pext in microcode (hundreds of cycles) */
    return !(__builtin_cpu_is("amdfam17h") || __builtin_cpu_is("amdfam15h"));
}
#else
static int64_t iogen_jpeg_pack_bmi2(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    return iogen_jpeg_pack_portable(dst, f, blocks);
}
static int iogen_jpeg_cpu_has_fast_pext(void) { return 0; }
#endif

/* AVX-512 VBMI: four blocks (two pairs, 60 field bytes -> 54 bytes) an iteration. One vpermb puts
 * the field bytes of the eight numbers A, B, C, D of both pairs into eight 64-bit lanes in the order
 * the scalar loads and byte swaps give them (B's and D's top byte from a zero lane), the squeeze
 * runs on all eight lanes (two multiply-adds and a bit select), B and D get their "10", and each pair's four output words
 * (A<<7 | B>>44, B<<20 | C>>37, C<<27 | D>>24, D<<40) are one variable shift of a lane and of its
 * next lane; a second vpermb byte-swaps them and drops the gaps, and a masked store writes 54
 * bytes. The masked load reads the 61 bytes the four blocks need (the 61st is dropped, as in the
 * scalar B), so no byte past them is touched. What is left (fewer than four blocks) goes through
 * the BMI2 or portable loop. */
static int iogen_jpeg_avx512_ok = 0;
static unsigned char iogen_jpeg_gather[64], iogen_jpeg_scatter[64];  /* the two vpermb tables (init) */

static void iogen_jpeg_tables(void)
{
    int j, lane;
    /* lane 4p + k holds pair p's number k (A, B, C, D); byte j of a lane as the scalar code has it */
    for (lane = 0; lane < 8; lane++) {
        int p = lane / 4, k = lane % 4, base = 30 * p + (k >= 2 ? 15 : 0);
        for (j = 0; j < 8; j++) {
            if (k % 2 == 0)       /* A(f): byte j = f[7 - j] */
                iogen_jpeg_gather[8 * lane + j] = (unsigned char)(base + 7 - j);
            else if (j < 7)       /* B(f): byte j = f[14 - j], byte 7 = 0 */
                iogen_jpeg_gather[8 * lane + j] = (unsigned char)(base + 14 - j);
            else
                iogen_jpeg_gather[8 * lane + j] = 63;  /* a byte past the 61 loaded: zero (masked load) */
        }
    }
    for (j = 0; j < 64; j++) {  /* output byte i of the 54: pair i / 27, word r / 8, big-endian byte r % 8 */
        int i = j < 54 ? j : 53, p = i / 27, r = i % 27;
        iogen_jpeg_scatter[j] = (unsigned char)((4 * p + r / 8) * 8 + 7 - r % 8);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static int64_t iogen_jpeg_pack_avx512(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    unsigned char *out = dst;
    int64_t b = 0;
    const __m512i g = _mm512_loadu_si512((const void *)iogen_jpeg_gather);
    const __m512i s = _mm512_loadu_si512((const void *)iogen_jpeg_scatter);
    const __m512i m6 = _mm512_set1_epi64(0x3F3F3F3F3F3F3F3FLL);
    const __m512i k7 = _mm512_set1_epi16(0x8001);      /* bytes 1, 128: maddubs' unsigned operand */
    const __m512i k14 = _mm512_set1_epi32(0x40000001);  /* words 1, 16384 */
    const __m512i m28 = _mm512_set1_epi64(0x000000000FFFFFFFLL);
    const __m512i eob_shift = _mm512_set_epi64(2, 0, 2, 0, 2, 0, 2, 0);
    const __m512i eob = _mm512_set_epi64(2, 0, 2, 0, 2, 0, 2, 0);
    const __m512i next = _mm512_set_epi64(7, 7, 6, 5, 3, 3, 2, 1);
    const __m512i left = _mm512_set_epi64(40, 27, 20, 7, 40, 27, 20, 7);
    const __m512i right = _mm512_set_epi64(0, 24, 37, 44, 0, 24, 37, 44);
    for (; b + 4 <= blocks; b += 4, f += 60, out += 54) {
        __m512i x = _mm512_maskz_loadu_epi8((__mmask64)((1ULL << 61) - 1), (const void *)f);
        x = _mm512_and_si512(_mm512_permutexvar_epi8(g, x), m6);
        /* the squeeze: byte pairs to 14-bit words (b0 + 128 b1), word pairs to 28-bit dwords
         * (w0 + 16384 w1), then d0 | d1 << 28 (bits of x >> 4 where m28 is clear) */
        x = _mm512_madd_epi16(_mm512_maddubs_epi16(k7, x), k14);
        x = _mm512_ternarylogic_epi64(x, _mm512_srli_epi64(x, 4), m28, 0xE4);
        x = _mm512_or_si512(_mm512_sllv_epi64(x, eob_shift), eob);
        __m512i nx = _mm512_maskz_permutexvar_epi64((__mmask8)0x77, next, x);
        __m512i w = _mm512_or_si512(_mm512_sllv_epi64(x, left), _mm512_srlv_epi64(nx, right));
        _mm512_mask_storeu_epi8((void *)out, (__mmask64)((1ULL << 54) - 1), _mm512_permutexvar_epi8(s, w));
    }
    if (b < blocks)
        out += iogen_jpeg_bmi2_ok ? iogen_jpeg_pack_bmi2(out, f, blocks - b) : iogen_jpeg_pack_portable(out, f, blocks - b);
    return (int64_t)(out - dst);
}

static int iogen_jpeg_cpu_has_avx512vbmi(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("avx512vbmi");
}
#else
static int64_t iogen_jpeg_pack_avx512(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    return iogen_jpeg_pack_portable(dst, f, blocks);
}
static int iogen_jpeg_cpu_has_avx512vbmi(void) { return 0; }
#endif

/* Choose the pack: level 2 the best the CPU has (AVX-512 VBMI, else BMI2 where pext is fast, else
 * portable), 1 BMI2 at most, 0 the portable one. Returns the level now in use (0, 1 or 2). */
static int iogen_jpeg_pack_init(int level)
{
    iogen_jpeg_bmi2_ok = level >= 1 && iogen_jpeg_cpu_has_fast_pext();
    iogen_jpeg_tables();
    iogen_jpeg_avx512_ok = level >= 2 && iogen_jpeg_cpu_has_avx512vbmi();
    return iogen_jpeg_avx512_ok ? 2 : iogen_jpeg_bmi2_ok ? 1 : 0;
}

static inline int64_t iogen_jpeg_pack(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    if (iogen_jpeg_avx512_ok)
        return iogen_jpeg_pack_avx512(dst, f, blocks);
    if (iogen_jpeg_bmi2_ok)
        return iogen_jpeg_pack_bmi2(dst, f, blocks);
    return iogen_jpeg_pack_portable(dst, f, blocks);
}

#endif
