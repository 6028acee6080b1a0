"""Window sums along a line, eight at a time, as LLVM vector code.

Along a contiguous axis the running sum ``s += v[o + k] - v[o]`` is one chain of dependent
additions, about 0.8 cycles per output however it is interleaved. Eight outputs at once are an
inclusive prefix sum of eight differences (three shifts and adds within a vector register) plus
the sum carried from the previous eight: the chain then costs one addition per eight outputs.
numba cannot hold a vector value, so the eight-lane step is written here in LLVM IR.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
_VECTOR = ir.VectorType(ir.IntType(64), LANES)
_MASK = ir.VectorType(ir.IntType(32), LANES)


def _vector_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return builder.bitcast(cgutils.get_item_pointer(context, builder, array_type, ary, [index]),
                           _VECTOR.as_pointer())


@intrinsic
def window_block(typingctx, line, i, k, sums, j, carry):
    """``sums[j + n] = carry + sum(line[i + m + k] - line[i + m] for m <= n)`` for ``n < 8``
    (int64 arrays, C-contiguous; the caller keeps every index in bounds: no check here).
    Returns the sum of the eight differences, to be carried to the next block."""

    def codegen(context, builder, signature, args):
        line_type, _, _, sums_type, _, _ = signature.args
        line_ary, start, taps, sums_ary, target, carried = args
        entering = builder.load(_vector_pointer(context, builder, line_type, line_ary, builder.add(start, taps)),
                                align=8)
        leaving = builder.load(_vector_pointer(context, builder, line_type, line_ary, start), align=8)
        steps = builder.sub(entering, leaving)
        zero = ir.Constant(_VECTOR, None)
        for shift in (1, 2, 4):  # lane n gains lane n - shift: after three steps, the prefix sums
            mask = ir.Constant(_MASK, [LANES if n < shift else n - shift for n in range(LANES)])
            steps = builder.add(steps, builder.shuffle_vector(steps, zero, mask))
        lane0 = builder.insert_element(ir.Constant(_VECTOR, ir.Undefined), carried, ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(lane0, ir.Constant(_VECTOR, ir.Undefined), ir.Constant(_MASK, [0] * LANES))
        builder.store(builder.add(steps, splat), _vector_pointer(context, builder, sums_type, sums_ary, target),
                      align=8)
        return builder.extract_element(steps, ir.Constant(ir.IntType(32), LANES - 1))

    return types.int64(line, i, k, sums, j, carry), codegen
