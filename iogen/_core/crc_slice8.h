/* Table-driven reflected CRC-32 of any polynomial, slicing-by-8 (eight table lookups per 8 input
 * bytes; Kounavis and Berry, "A Systematic Approach to Building High Performance Software-based
 * CRC Generators", ISCC 2005): the software path of crc32c.h (Castagnoli) and crc32.h (IEEE).
 * The functions work on the raw register (no pre/post inversion); callers invert.
 */
#ifndef IOGEN_CRC_SLICE8_H
#define IOGEN_CRC_SLICE8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t iogen_load_le64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* table[k][n]: the register after byte n followed by k zero bytes, for the reflected poly. */
static void iogen_crc_slice8_init(uint32_t table[8][256], uint32_t poly)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ poly : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[k][n] = c;
        }
    }
}

/* The raw register c advanced over n bytes. */
static uint32_t iogen_crc_slice8(uint32_t table[8][256], uint32_t c, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = iogen_load_le64(p) ^ c;
        c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff]
            ^ table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff]
            ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#endif
