"""Pure-Python twin of iogen._core.permute: the same keyed index shuffle, with numpy.

See permute.pyx for the construction (Feistel network on h-bit halves, cycle walking, one
tweak per window). uint64 array arithmetic wraps modulo 2**64 exactly like C.
"""
import numpy as np

from iogen._core._common import GAMMA, MIN_HALF_BITS, NEGATIVE, check_permute_args
from iogen._core._common import mix64_array as _mix64

TWEAK_SALT = 0xA54FF53A5F1D36F1


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
