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
 * The fields buffer must hold 8 readable bytes past the last block's field 14.
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

/* Choose the BMI2 pack where the CPU runs pext fast (enabled), else the portable one. */
static void iogen_jpeg_pack_init(int enabled)
{
    iogen_jpeg_bmi2_ok = enabled && iogen_jpeg_cpu_has_fast_pext();
}

static inline int64_t iogen_jpeg_pack(unsigned char *dst, const unsigned char *f, int64_t blocks)
{
    if (iogen_jpeg_bmi2_ok)
        return iogen_jpeg_pack_bmi2(dst, f, blocks);
    return iogen_jpeg_pack_portable(dst, f, blocks);
}

#endif
