"""float16 and bfloat16 in and out of the float32/float64 kernels (numba has no 16-bit floats).

Widening reads the 16-bit patterns through a 65536-entry table of their exact float32 values.
Narrowing rounds a float64 once, to nearest with ties to even, straight to the 16-bit format
(going through float32 would round twice), with integer operations on the float64's bits; numpy's
own casts of these types cost 2 ns per element here, five times these loops.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, error_model="numpy", boundscheck=None)


def widening_table(dtype: np.dtype) -> np.ndarray:
    """float32 value of every 16-bit pattern of ``dtype`` (float16 or bfloat16)."""
    with np.errstate(invalid="ignore"):  # the NaN patterns
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).astype(np.float32)


@njit(**_JIT)
def widen(bits, start, stop, table, out):
    """``out[i - start] = table[bits[i]]`` for ``start <= i < stop``."""
    for i in range(start, stop):
        out[i - start] = table[bits[i]]


@njit(**_JIT)
def narrow(values, out, start, mant_bits, exp_bits):
    """Round float64 ``values`` to the 16-bit format into ``out[start:]`` (its bit patterns).

    ``mant_bits``/``exp_bits``: 10/5 for float16, 7/8 for bfloat16. NaN stays NaN (quiet), the
    sign of zero is kept, and values past the largest finite one round to infinity.
    """
    raw = values.view(np.uint64)
    bias = (1 << (exp_bits - 1)) - 1
    inf_bits = ((1 << exp_bits) - 1) << mant_bits
    shift_normal = 52 - mant_bits
    for i in range(raw.shape[0]):
        b = raw[i]
        sign = np.uint16((b >> np.uint64(48)) & np.uint64(0x8000))
        e = np.int64((b >> np.uint64(52)) & np.uint64(0x7FF))
        frac = b & np.uint64(0xFFFFFFFFFFFFF)
        if e == 0x7FF:
            code = inf_bits | (1 << (mant_bits - 1) if frac != 0 else 0)
        elif e == 0:
            code = 0  # zero or a float64 subnormal: far below the 16-bit formats' range
        else:
            unbiased = e - 1023
            if unbiased > bias:
                code = inf_bits
            else:
                full = frac | np.uint64(1 << 52)
                if unbiased >= 1 - bias:  # normal in the target: drop the low fraction bits
                    shift = shift_normal
                    base = (unbiased + bias) << mant_bits
                    kept_frac = True
                else:  # subnormal in the target: the implicit bit becomes a fraction bit
                    shift = shift_normal + (1 - bias - unbiased)
                    base = 0
                    kept_frac = False
                if shift > 62:
                    q = 0
                else:
                    q = np.int64(full >> np.uint64(shift))
                    rem = full & np.uint64((1 << shift) - 1)
                    half = np.uint64(1 << (shift - 1))
                    if rem > half or (rem == half and (q & 1) == 1):
                        q += 1
                if kept_frac:
                    q -= 1 << mant_bits  # the implicit bit; a carry moves into the exponent
                code = base + q  # may reach the infinity pattern, which is then right
        out[start + i] = sign | np.uint16(code)
