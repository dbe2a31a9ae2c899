"""Pure-Python twin of iogen._core.permute: the same keyed index shuffle, with numpy.

See permute.pyx for the construction (Feistel network on h-bit halves, cycle walking, one
tweak per window). uint64 array arithmetic wraps modulo 2**64 exactly like C.
"""
import numpy as np

GAMMA = 0x9E3779B97F4A7C15
TWEAK_SALT = 0xA54FF53A5F1D36F1
MIX_C1 = 0xBF58476D1CE4E5B9
MIX_C2 = 0x94D049BB133111EB
# Smallest half width: domains below 2**(2 * MIN_HALF_BITS) walk a cipher of that size.
MIN_HALF_BITS = 3
MAX_ROUNDS = 64


NEGATIVE = "positions must be >= 0"


def check_permute_args(pos, out, window, keys):
    """Validate permute's sizes (shared by both implementations so they fail alike); positions are checked as read."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if int(window) < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if len(out) != len(pos):
        raise ValueError(f"out holds {len(out)} values, pos {len(pos)}")
    if not 1 <= len(keys) <= MAX_ROUNDS:
        raise ValueError(f"keys must hold 1 to {MAX_ROUNDS} round keys, got {len(keys)}")


def _mix64(z):
    z ^= z >> np.uint64(30)
    z *= np.uint64(MIX_C1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(MIX_C2)
    z ^= z >> np.uint64(31)
    return z


def _half_bits(m: int) -> int:
    return max(MIN_HALF_BITS, ((m - 1).bit_length() + 1) // 2)


def _encrypt(x, h, keys, tweak):
    mask = np.uint64((1 << h) - 1)
    left, right = x >> np.uint64(h), x & mask
    for k in keys:
        f = _mix64((right * np.uint64(GAMMA)) ^ np.uint64(k) ^ tweak) & mask
        left, right = right, left ^ f
    return (left << np.uint64(h)) | right


def permute(pos, out, window, keys):
    """out[i] = the image of pos[i] under the windowed permutation keyed by keys (see permute.pyx)."""
    check_permute_args(pos, out, window, keys)
    p = np.asarray(pos, np.int64)
    if p.size and int(p.min()) < 0:
        raise ValueError(NEGATIVE)
    m = int(window)
    w = p // m
    base = w * m
    if m <= 1:
        out[:] = p
        return
    tweak = _mix64(w.astype(np.uint64) ^ np.uint64(TWEAK_SALT))
    keys = [int(k) for k in np.asarray(keys, np.uint64)]
    h = _half_bits(m)
    x = (p - base).astype(np.uint64)
    todo = np.arange(x.size)
    while todo.size:  # cycle walking: re-encrypt what fell outside [0, m)
        x[todo] = _encrypt(x[todo], h, keys, tweak[todo])
        todo = todo[x[todo] >= np.uint64(m)]
    out[:] = base + x.astype(np.int64)
