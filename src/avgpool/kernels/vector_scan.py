"""Window sums along a line, eight at a time, as LLVM vector code.

Along a contiguous axis the running sum ``s += v[o + k] - v[o]`` is one chain of dependent
additions, about 0.8 cycles per output however it is interleaved. Eight outputs at once are an
inclusive prefix sum of eight differences (three shifts and adds within a vector register) plus
the sum carried from the previous eight: the chain then costs one addition per eight outputs.
The carry stays in a vector register, every lane holding it, and grows by the block's total
broadcast from its last lane (one shuffle: moving it through a scalar register took three;
1x16x256x256 k31 planes 0.366 ms against 0.383). Taking that total from memory instead
(a store and a broadcast load, no shuffle) gained nothing in the plane sweep: the shuffles are
not the scan's only limit (without any, a block still took 2.5 cycles against 3.75).
numba cannot hold a vector value, so the whole loop is written here in LLVM IR.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
_VECTOR = ir.VectorType(ir.IntType(64), LANES)
_INDEX = ir.IntType(32)
_MASK = ir.VectorType(_INDEX, LANES)


def _broadcast(builder, vector, lane):
    """Every lane set to ``vector``'s lane ``lane``."""
    return builder.shuffle_vector(vector, ir.Constant(_VECTOR, ir.Undefined), ir.Constant(_MASK, [lane] * LANES))


def _vector_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return builder.bitcast(cgutils.get_item_pointer(context, builder, array_type, ary, [index]), _VECTOR.as_pointer())


@intrinsic
def window_blocks(typingctx, line, i, k, sums, j, blocks, carry):
    """For ``b < blocks`` and ``n < 8``: ``sums[j + 8b + n] = carry + sum(line[i + m + k] -
    line[i + m] for m <= 8b + n)`` (int64 arrays, C-contiguous; the caller keeps every index in
    bounds: no check here)."""

    def codegen(context, builder, signature, args):
        line_type, _, _, sums_type, _, _, _ = signature.args
        line_ary, start, taps, sums_ary, target, count, carried = args
        lane0 = builder.insert_element(ir.Constant(_VECTOR, ir.Undefined), carried, ir.Constant(_INDEX, 0))
        slot = cgutils.alloca_once(builder, _VECTOR)  # the carry: promoted to a register by LLVM
        builder.store(_broadcast(builder, lane0, 0), slot)
        zero = ir.Constant(_VECTOR, None)
        with cgutils.for_range(builder, count) as loop:
            offset = builder.mul(loop.index, ir.Constant(loop.index.type, LANES))
            first = builder.add(start, offset)
            entering = builder.load(
                _vector_pointer(context, builder, line_type, line_ary, builder.add(first, taps)), align=8
            )
            leaving = builder.load(_vector_pointer(context, builder, line_type, line_ary, first), align=8)
            steps = builder.sub(entering, leaving)
            for shift in (1, 2, 4):  # lane n gains lane n - shift: after three steps, the prefix sums
                mask = ir.Constant(_MASK, [LANES if n < shift else n - shift for n in range(LANES)])
                steps = builder.add(steps, builder.shuffle_vector(steps, zero, mask))
            carry = builder.load(slot)
            builder.store(
                builder.add(steps, carry),
                _vector_pointer(context, builder, sums_type, sums_ary, builder.add(target, offset)),
                align=8,
            )
            builder.store(builder.add(carry, _broadcast(builder, steps, LANES - 1)), slot)
        return context.get_dummy_value()

    return types.none(line, i, k, sums, j, blocks, carry), codegen
