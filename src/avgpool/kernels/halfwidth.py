"""float16 and bfloat16 in and out of the float32/float64 kernels (numba has no 16-bit floats).

Widening is exact: float16 goes through LLVM's ``fpext half`` (one F16C instruction on x86),
bfloat16 is its float32's upper half. Narrowing rounds a float64 once, to nearest with ties to
even: float64 -> float32 rounding to ODD, then float32 -> 16 bits to nearest. Rounding to odd at
a precision of at least two more bits makes the second rounding give the correctly rounded
result (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
using rounding to odd", 2008); float32 keeps 24 bits against 11 and 8. Straight float64 ->
float32 -> 16-bit rounding would round twice (ml_dtypes' bfloat16 cast does). Every step is
branch-free, so the loops vectorise (numpy's casts of these types cost 2 ns per element here;
these loops a few tenths).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import INLINED, JIT, kernel

_U = np.uint64


@intrinsic
def _half_to_float(typingctx, bits):
    """The float32 value of a float16 bit pattern (exact)."""

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _float_to_half(typingctx, value):
    """float32 -> float16 bit pattern, rounded to nearest even (the hardware conversion)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(types.float32), codegen


@intrinsic
def _float_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _bits_float(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@kernel(**JIT)
def widen(bits, start, stop, bfloat16, out):
    """``out[i - start]`` = the float32 value of the 16-bit pattern ``bits[i]``, ``start <= i < stop``."""
    base, n = _U(start), _U(stop - start)  # unsigned indices: no wraparound test, so LLVM vectorises
    if bfloat16:
        for i in range(n):
            out[i] = _bits_float(np.uint32(bits[base + i]) << np.uint32(16))
    else:
        for i in range(n):
            out[i] = _half_to_float(bits[base + i])


@kernel(**INLINED)
def _to_float32_odd(v):
    """float64 -> float32 bit pattern rounded to odd: truncated, with the last bit set if
    inexact. NaN stays NaN; past the float32 range it gives the largest finite float32, odd,
    which the next rounding takes to infinity as it should."""
    t = np.float32(v)  # to nearest
    w = np.float64(t)
    bits = _float_bits(t) - np.uint32(abs(w) > abs(v))  # rounded away from zero: step back
    return bits | np.uint32(w != v)


@kernel(**JIT)
def narrow(values, out, start, bfloat16):
    """Round float64 ``values`` once to float16 or bfloat16, into ``out[start:]`` (bit patterns).

    NaN stays NaN (quiet), the sign of zero is kept, and values past the largest finite one
    round to infinity.
    """
    base, n = _U(start), _U(values.shape[0])
    if bfloat16:
        for i in range(n):
            bits = _to_float32_odd(values[i])
            nearest = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
            out[base + i] = np.uint16(((bits >> np.uint32(16)) | np.uint32(0x40)) if is_nan else nearest)
    else:
        for i in range(n):
            out[base + i] = _float_to_half(_bits_float(_to_float32_odd(values[i])))
