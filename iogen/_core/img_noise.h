/* The image formats' noise (JPEG and PNG, iogen/formats/jpeg.py and png.py; fill.pyx): a stream cheaper to make
 * than fill_words.h's, since an image is noise nearly to its last byte.
 *
 * 16-byte block j of the stream with key k (fill.pyx stream_key) is
 *     AESENC(AESENC(j ^ K0, K1), K2)
 * j a 128-bit little-endian integer (low 64 bits j, high 64 bits 0), AESENC one AES round as the x86 instruction
 * computes it (ShiftRows, SubBytes, MixColumns, then the round key xor-ed in), and K0, K1, K2 128-bit keys made
 * from k with the splitmix64 finaliser (iogen_img_key_make). Byte p of the stream is byte p % 16 of block p / 16.
 * Each round is a bijection of 128-bit blocks, so a stream never repeats a block; after two rounds every output
 * byte depends on every byte of j ^ K0: noise that no compressor or deduplication finds anything in. Where the
 * CPU has VAES and AVX-512 (iogen_img_init), four blocks an instruction (64 bytes for two round instructions,
 * about a third of fill_words.h's multiplies); otherwise the portable round below (the same bytes; tests
 * compare them and the pure twin, iogen/_core/pure/fill.py).
 *
 * iogen_img_blocks_adler: the blocks and the Adler-32 of their bytes (PNG's scanlines) in one pass; with VAES the
 * sums are taken from the blocks in registers (adler32.h's AVX-512 steps): making the noise is bound by how fast
 * the cache takes the writes, so the sums' vector work fits beside it.
 *
 * The scan form: the same blocks in JPEG's scan form (fill.pyx "A JPEG scan"): bytes 0xFE and 0xFF lowered to
 * 0xFD, and of each pair of blocks (a 32-byte JPEG block) the first byte 0x00 and the last 0xFE.
 */
#ifndef IOGEN_IMG_NOISE_H
#define IOGEN_IMG_NOISE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "adler32.h"

#define IOGEN_IMG_MIX_C1 0xBF58476D1CE4E5B9ULL
#define IOGEN_IMG_MIX_C2 0x94D049BB133111EBULL

typedef struct {
    unsigned char k[3][16];  /* K0, K1, K2 */
} iogen_img_key;

static unsigned char iogen_aes_sbox[256];
static int iogen_img_vaes_ok = 0;

static inline uint64_t iogen_img_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * IOGEN_IMG_MIX_C1;
    z = (z ^ (z >> 27)) * IOGEN_IMG_MIX_C2;
    return z ^ (z >> 31);
}

/* K_i's low 8 bytes: mix64(k ^ (2i + 1) * S), its high 8: mix64(k ^ (2i + 2) * S), little-endian (S: the golden
 * ratio's 64 bits, as fill_words.h's GAMMA). */
static void iogen_img_key_make(iogen_img_key *ik, uint64_t key)
{
    for (int i = 0; i < 6; i++) {
        uint64_t w = iogen_img_mix64(key ^ ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL));
        for (int b = 0; b < 8; b++)
            ik->k[i / 2][8 * (i % 2) + b] = (unsigned char)(w >> (8 * b));
    }
}

static inline unsigned char iogen_aes_xtime(unsigned char a)
{
    return (unsigned char)((a << 1) ^ ((a & 0x80) ? 0x1B : 0));
}

/* One AES round (AESENC) on s: SubBytes, ShiftRows (byte r + 4c from byte r + 4 ((c + r) % 4)), MixColumns, and rk
 * xor-ed in. */
static inline void iogen_aes_round(unsigned char s[16], const unsigned char rk[16])
{
    unsigned char t[16];
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++)
            t[r + 4 * c] = iogen_aes_sbox[s[r + 4 * ((c + r) % 4)]];
    for (int c = 0; c < 4; c++) {
        unsigned char a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
        unsigned char x0 = iogen_aes_xtime(a0), x1 = iogen_aes_xtime(a1), x2 = iogen_aes_xtime(a2),
                      x3 = iogen_aes_xtime(a3);
        s[4 * c] = (unsigned char)(x0 ^ x1 ^ a1 ^ a2 ^ a3 ^ rk[4 * c]);
        s[4 * c + 1] = (unsigned char)(a0 ^ x1 ^ x2 ^ a2 ^ a3 ^ rk[4 * c + 1]);
        s[4 * c + 2] = (unsigned char)(a0 ^ a1 ^ x2 ^ x3 ^ a3 ^ rk[4 * c + 2]);
        s[4 * c + 3] = (unsigned char)(x0 ^ a0 ^ a1 ^ a2 ^ x3 ^ rk[4 * c + 3]);
    }
}

static inline void iogen_img_block(unsigned char out[16], uint64_t j, const iogen_img_key *ik)
{
    for (int b = 0; b < 16; b++)
        out[b] = (unsigned char)((b < 8 ? (unsigned char)(j >> (8 * b)) : 0) ^ ik->k[0][b]);
    iogen_aes_round(out, ik->k[1]);
    iogen_aes_round(out, ik->k[2]);
}

/* The JPEG scan form of block j (its parity from the scan's first block): see the header comment. */
static inline void iogen_img_scan_form(unsigned char out[16], int odd)
{
    for (int b = 0; b < 16; b++)
        if (out[b] > 0xFD)
            out[b] = 0xFD;
    if (odd)
        out[15] = 0xFE;
    else
        out[0] = 0x00;
}

static void iogen_img_blocks_portable(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik, int scan)
{
    for (size_t i = 0; i < n; i++) {
        iogen_img_block(dst + 16 * i, block + i, ik);
        if (scan)
            iogen_img_scan_form(dst + 16 * i, (int)(i & 1));
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Four blocks a vector; with scan, n even (whole JPEG blocks: two a lane pair). */
__attribute__((target("avx512f,avx512bw,vaes")))
static void iogen_img_blocks_vaes(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik, int scan)
{
    const __m512i k0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[0]));
    const __m512i k1 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[1]));
    const __m512i k2 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[2]));
    const __m512i four = _mm512_setr_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i fd = _mm512_set1_epi8((char)0xFD);
    /* blocks 0 and 2 of a vector start a JPEG block (byte 0: 0x00), 1 and 3 end one (byte 15: 0xFE) */
    const __m512i keep = _mm512_setr_epi64(~0xFFLL, -1, -1, ~(0xFFLL << 56), ~0xFFLL, -1, -1, ~(0xFFLL << 56));
    const __m512i set = _mm512_setr_epi64(0, 0, 0, (long long)(0xFEULL << 56), 0, 0, 0, (long long)(0xFEULL << 56));
    __m512i j = _mm512_setr_epi64((long long)block, 0, (long long)(block + 1), 0, (long long)(block + 2), 0,
                                  (long long)(block + 3), 0);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m512i x = _mm512_aesenc_epi128(_mm512_aesenc_epi128(_mm512_xor_si512(j, k0), k1), k2);
        if (scan)
            x = _mm512_ternarylogic_epi64(_mm512_min_epu8(x, fd), keep, set, 0xEA);  /* (x & keep) | set */
        _mm512_storeu_si512((void *)(dst + 16 * i), x);
        j = _mm512_add_epi64(j, four);
    }
    iogen_img_blocks_portable(dst + 16 * i, block + i, n - i, ik, scan);  /* i % 4 == 0: the same parity */
}

/* n blocks as iogen_img_blocks_vaes (not the scan form); returns adler continued over their 16 n bytes. The sums as
 * adler32.h's iogen_adler32_avx512 takes them, on each vector before it is stored. */
__attribute__((target("avx512f,avx512bw,vaes")))
static uint32_t iogen_img_blocks_adler_vaes(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik,
                                            uint32_t adler)
{
    uint64_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    const __m512i k0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[0]));
    const __m512i k1 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[1]));
    const __m512i k2 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ik->k[2]));
    const __m512i four = _mm512_setr_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi16(1);
    __m512i j = _mm512_setr_epi64((long long)block, 0, (long long)(block + 1), 0, (long long)(block + 2), 0,
                                  (long long)(block + 3), 0);
    size_t vecs = n / 4, done = 0;
    while (done < vecs) {
        size_t steps = vecs - done;
        if (steps > IOGEN_ADLER_STEPS64)
            steps = IOGEN_ADLER_STEPS64;
        __m512i v_s1 = zero, v_ps = zero, v_s2 = zero;
        for (size_t i = 0; i < steps;) {
            size_t group = steps - i < 8 ? steps - i : 8;
            __m512i acc = zero;
            for (size_t g = 0; g < group; g++, dst += 64) {
                __m512i v = _mm512_aesenc_epi128(_mm512_aesenc_epi128(_mm512_xor_si512(j, k0), k1), k2);
                _mm512_storeu_si512((void *)dst, v);
                j = _mm512_add_epi64(j, four);
                iogen_adler_step512(v, &v_s1, &v_ps, &acc);
            }
            v_s2 = _mm512_add_epi32(v_s2, _mm512_madd_epi16(acc, ones));
            i += group;
        }
        done += steps;
        iogen_adler_fold512(v_s1, v_ps, v_s2, steps, &s1, &s2);
    }
    adler = (uint32_t)((s2 << 16) | s1);
    size_t rest = n - 4 * vecs;  /* fewer than 4 blocks: the portable round, then their sums */
    iogen_img_blocks_portable(dst, block + 4 * vecs, rest, ik, 0);
    return iogen_adler32(adler, dst, 16 * rest);
}

static int iogen_img_cpu_has_vaes(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vaes");
}
#else
static void iogen_img_blocks_vaes(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik, int scan)
{
    iogen_img_blocks_portable(dst, block, n, ik, scan);
}
static uint32_t iogen_img_blocks_adler_vaes(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik,
                                            uint32_t adler)
{
    iogen_img_blocks_portable(dst, block, n, ik, 0);
    return iogen_adler32(adler, dst, 16 * n);
}
static int iogen_img_cpu_has_vaes(void) { return 0; }
#endif

/* The S-box from its definition (the inverse in GF(2^8) mod x^8 + x^4 + x^3 + x + 1, then the affine map), and the
 * CPU check; enabled 0 keeps the portable round (probes.use_vector_fill). */
static void iogen_img_init(int enabled)
{
    for (int a = 0; a < 256; a++) {
        unsigned char inv = 0;
        for (int b = 1; b < 256 && a; b++) {  /* the b with a * b == 1 */
            unsigned char x = (unsigned char)a, y = (unsigned char)b, p = 0;
            while (y) {
                if (y & 1)
                    p ^= x;
                x = iogen_aes_xtime(x);
                y >>= 1;
            }
            if (p == 1) {
                inv = (unsigned char)b;
                break;
            }
        }
        unsigned char s = inv;
        for (int r = 1; r <= 4; r++)
            s ^= (unsigned char)((inv << r) | (inv >> (8 - r)));
        iogen_aes_sbox[a] = (unsigned char)(s ^ 0x63);
    }
    iogen_img_vaes_ok = enabled && iogen_img_cpu_has_vaes();
}

/* n 16-byte blocks of the stream from block `block` to dst (scan: in JPEG's scan form, the first block starting a
 * JPEG block). */
static inline void iogen_img_blocks(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik, int scan)
{
    if (iogen_img_vaes_ok)
        iogen_img_blocks_vaes(dst, block, n, ik, scan);
    else
        iogen_img_blocks_portable(dst, block, n, ik, scan);
}

/* n blocks of the stream from block `block` to dst; returns adler continued over their bytes. The fused loop needs
 * Adler-32's AVX-512 steps enabled too (probes.use_adler32 below 2 takes the two passes). */
static inline uint32_t iogen_img_blocks_adler(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik,
                                              uint32_t adler)
{
    if (iogen_img_vaes_ok && iogen_adler32_avx512_ok)
        return iogen_img_blocks_adler_vaes(dst, block, n, ik, adler);
    iogen_img_blocks(dst, block, n, ik, 0);
    return iogen_adler32(adler, dst, 16 * n);
}

#endif
