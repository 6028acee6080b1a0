"""2-D NCX planes with 3 x 3 "same" windows at stride 1 (or a single tap along an axis), and small
planes with windows of 2 or 3 taps at stride 2: the later pooling nodes of image models (7x7,
14x14, 28x28 planes, hundreds of channels).

The separable passes (:mod:`.separable`) run a vector loop per row; rows of 7 to 28 values are
mostly loop overhead for that, and a fifth to a half of such a plane's outputs are edge windows,
which they sum one row or one column at a time. Here each pass is one loop over a plane or a
block of planes, and every window is summed from its first valid tap, left to right, as the
separable passes sum it, so the finite results have their bits and a NaN or Inf reaches the same
windows (tests/test_small_planes.py compares the paths on random data with zeros, NaNs of several
payloads and Inf). Which NaN a window holding two gives is the order LLVM picks for its additions
(README, "Semantics"), here as in the separable passes, where it already differs between builds
and between groups of planes. Only a window's first and last tap can fall outside the plane (the
engine takes this kernel where the middle tap is the output's own position), in one of two ways:

- Rows of Tuning.flat_plane_min_width values or more (:func:`_pool_flat`): the first axis's
  loop runs over a plane's rows between its first and last as if they were one row, the second
  axis's over a block of planes, and the windows at the edges are summed again apart,
  overwriting. ``factors`` = each axis's scale at its first window, the windows between and its
  last; no masks.
- Narrower rows (:func:`_pool_blocks`): each pass is a single loop over a block of planes whose
  edge taps come through per-position masks, which LLVM turns into masked vector loads. Along
  the first axis an absent tap is -0.0, which leaves every sum as it was (``-0.0 + y == y`` for
  all y); along the second the sums are selects of sums (``a + b if valid else b``). A mask on
  every tap cost 15-20% more. The masks and the divisor scales of a block of planes are the
  engine's cached tables (``tables.small_plane_tables``): ``masks`` = 4 uint8 rows of ``block``
  values (first and last tap along the first axis, then the second), ``factors`` = 2 float64 rows
  (each axis's scale), laid out for consecutive planes from a block's first plane, so that
  threads may split the planes anywhere.

Planes at stride 2 (DenseNet's 2 x 2 transitions on 14 x 14, ShuffleNet's 3 x 3 pads 1) go by
:func:`_pool_stride_two` instead: an output row is one vector of 16 columns (rows of up to 16
values, up to 8 outputs), and a plane's rows are one loop that keeps the tap row two windows
share (3 taps). LLVM's loop vectoriser leaves loops over 14 values scalar, which is what makes
the separable passes slow there (bench.py's densenet121 node 3 and shufflenet node 3 rows;
tuning.stride_two_min_columns has the timings), so these rows are written as LLVM vector code
(:func:`_plane_code`). A row's 16 values are loaded as they are, the next row's values in the
lanes past it, which reach only outputs past the row or taps a window's select leaves out; an
output row is stored as 8 lanes, the lanes past it landing on outputs the same call writes
later. Only where that would read past the input (its last plane) or write past the call's
outputs (its last row) do loads and stores go through lane masks: AVX2 runs those as
``vmaskmov``, which an AMD EPYC (Zen 3) runs slowly (masked everywhere, 1x272x14x14 3x3 s2 p1
took 57 us serial against 20.5 now, 1x512x14x14 2x2 s2 101 against 37).
"""

from __future__ import annotations

import llvmlite
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .columns import LENGTH, OUTPUTS, PLANE_PAD, STRIDE
from .jit import COMPUTE, U, kernel


@kernel(**COMPUTE)
def pool_small_planes(x, out, start, stop, axes, masks, factors, sums):
    """Pool planes ``start..stop`` of the flat input ``x`` (see the module's conditions), a block
    of planes at a time: the first axis into ``sums`` (float64, the block and a value of margin
    at each end), the second from it into ``out``. ``axes[d, PLANE_PAD]``: the pad_begin of axis
    ``d`` (1: three taps, 0: one). Planes at stride 2 go by :func:`_pool_stride_two`, planes
    given no masks (rows of Tuning.flat_plane_min_width values or more) by :func:`_pool_flat`."""
    if axes[0, STRIDE] == 2:
        _pool_stride_two(x, out, start, stop, axes, masks, factors)
        return
    height, width = axes[0, LENGTH], axes[1, LENGTH]
    plane = height * width
    planes = (sums.shape[0] - 2) // plane
    tall, wide = axes[0, PLANE_PAD] > 0, axes[1, PLANE_PAD] > 0
    if masks.shape[0] == 0:
        _pool_flat(x, out, start, stop, planes, height, width, tall and height > 1, wide, factors, sums)
        return
    block = planes * plane
    # each table as an array of its own: LLVM vectorised the loops over one shared array 5x slower
    _pool_blocks(
        x,
        out,
        start,
        stop,
        planes,
        plane,
        width,
        tall,
        wide,
        masks[:block],
        masks[block : 2 * block],
        masks[2 * block : 3 * block],
        masks[3 * block :],
        factors[:block],
        factors[block:],
        sums,
    )


@kernel(**COMPUTE)
def _pool_flat(x, out, start, stop, planes, height, width, tall, wide, factors, sums):
    """:func:`pool_small_planes` where rows are long enough to need no masks: every loop runs over
    a whole plane (the first axis) or block of planes (the second) as if it were one row, and the
    windows at the plane's edges are summed again apart, overwriting. ``factors``: the first
    axis's scale at the first row, the rows between and the last row, then the second axis's at
    the first column, the columns between and the last column."""
    f64 = np.float64
    top, middle, bottom, left, centre, right = (factors[0], factors[1], factors[2], factors[3], factors[4], factors[5])
    w, one, two = U(width), U(1), U(2)
    plane = U(height) * w
    for b in range(start, stop, planes):
        base = U(b) * plane
        n = U(min(stop - b, planes))
        for p in range(n):
            sum_at, x_at = one + U(p) * plane, base + U(p) * plane
            if tall:
                for i in range(w):
                    sums[sum_at + i] = (f64(x[x_at + i]) + f64(x[x_at + w + i])) * top
                for i in range(w, plane - w):
                    q = x_at + i
                    sums[sum_at + i] = (f64(x[q - w]) + f64(x[q]) + f64(x[q + w])) * middle
                for i in range(plane - w, plane):
                    sums[sum_at + i] = (f64(x[x_at + i - w]) + f64(x[x_at + i])) * bottom
            else:
                for i in range(plane):
                    sums[sum_at + i] = f64(x[x_at + i]) * top
        if wide:
            for i in range(n * plane):
                out[base + i] = (sums[i] + sums[one + i] + sums[two + i]) * centre
            for r in range(n * U(height)):
                first = U(r) * w
                last = first + w - one
                out[base + first] = (sums[one + first] + sums[two + first]) * left
                out[base + last] = (sums[last] + sums[one + last]) * right
        else:
            for i in range(n * plane):
                out[base + i] = sums[one + i] * centre


@kernel(**COMPUTE)
def _pool_blocks(x, out, start, stop, planes, plane, width, tall, wide, up, down, left, right, factor0, factor1, sums):
    """:func:`pool_small_planes` with its tables apart: ``up``/``down`` mask the taps a row above
    and below (``tall``: the first axis has three taps), ``left``/``right`` those a column to
    either side (``wide``)."""
    f64 = np.float64
    negative_zero = -0.0
    w, one = U(width), U(1)
    for b in range(start, stop, planes):
        base = U(b * plane)
        n = U(min(stop - b, planes) * plane)
        if tall:
            for i in range(n):
                q = base + i
                above = f64(x[q - w]) if up[i] else negative_zero
                below = f64(x[q + w]) if down[i] else negative_zero
                sums[one + i] = (above + f64(x[q]) + below) * factor0[i]
        else:
            for i in range(n):
                sums[one + i] = f64(x[base + i]) * factor0[i]
        if wide:
            for i in range(n):
                q = one + i
                front = sums[q - one] + sums[q] if left[i] else sums[q]
                out[base + i] = (front + sums[q + one] if right[i] else front) * factor1[i]
        else:
            for i in range(n):
                out[base + i] = sums[one + i] * factor1[i]


# --- stride 2 ---

#: Columns of a row vector: planes up to this wide, up to half as many outputs.
LANES = 16
I8, I32, I64, F64 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.DoubleType()


def _splat(builder, value, n):
    vector = builder.insert_element(ir.Constant(ir.VectorType(value.type, n), ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(I32, n), [0] * n))


def _masked(builder, name, value_type, arguments):
    """A call of llvm.masked.load or llvm.masked.store (a masked lane touches no memory)."""
    vector = value_type if name == "load" else arguments[0].type
    element = {ir.FloatType(): "f32", F64: "f64"}[vector.element]
    pointer_type = "p0"
    if not getattr(llvmlite, "opaque_pointers_enabled", True):
        # llvmlite before 0.45 (numba before 0.62) has typed pointers: the intrinsic takes a
        # pointer to the vector, and its name spells that pointer's type
        at = 0 if name == "load" else 1
        pointer = builder.bitcast(arguments[at], vector.as_pointer())
        arguments = [*arguments[:at], pointer, *arguments[at + 1 :]]
        pointer_type = f"p0v{vector.count}{element}"
    function_type = ir.FunctionType(value_type, [a.type for a in arguments])
    function = cgutils.get_or_insert_function(
        builder.module, function_type, f"llvm.masked.{name}.v{vector.count}{element}.{pointer_type}"
    )
    return builder.call(function, arguments)


def _tap_row(builder, xs, x_type, start, inside, valid, plain):
    """The row of taps at ``xs[start]`` (values of ``x_type``), as two float64 vectors of LANES // 2
    (all -0.0 where ``valid`` is false, which leaves a sum as it was). ``plain``: the 16 values
    from ``start`` are in the array, loaded as they are (lanes past the row hold the next row's
    values, which reach only outputs past the row's or windows' ends); else lanes outside the row
    are -0.0, loaded through lane masks."""
    half = LANES // 2
    vector = ir.VectorType(x_type, half)

    def load(h, mask):
        pointer = builder.gep(xs, [builder.add(start, ir.Constant(I64, half * h))])
        if mask is None:
            v = builder.load(builder.bitcast(pointer, vector.as_pointer()), align=4)
        else:
            v = _masked(
                builder, "load", vector, [pointer, ir.Constant(I32, 4), mask, ir.Constant(vector, [-0.0] * half)]
            )
        return builder.fpext(v, ir.VectorType(F64, half)) if x_type != F64 else v

    if not plain:
        return [
            load(h, inside[h] if valid is None else builder.and_(inside[h], _splat(builder, valid, half)))
            for h in range(2)
        ]
    if valid is None:
        return [load(h, None) for h in range(2)]
    slots = [cgutils.alloca_once(builder, ir.VectorType(F64, half)) for _ in range(2)]
    with builder.if_else(valid) as (taps, padding):
        with taps:
            for h in range(2):
                builder.store(load(h, None), slots[h])
        with padding:
            for h in range(2):
                builder.store(ir.Constant(ir.VectorType(F64, half), [-0.0] * half), slots[h])
    return [builder.load(slot) for slot in slots]


def _window_columns(builder, lo, hi, three, from_before, valid_left, valid_right):
    """Each output column's sum along the second axis from a row of first-axis sums (``lo``,
    ``hi``: its two halves): 3 taps from pad_begin 1 (``three``), else 2 from pad_begin 1
    (``from_before``) or 0, each window from its first valid tap."""
    half = LANES // 2

    def taps(offset):  # the columns offset, offset + 2, ...: one tap of every window
        return builder.shuffle_vector(
            lo, hi, ir.Constant(ir.VectorType(I32, half), [max(0, offset + 2 * i) for i in range(half)])
        )

    before, at, after = taps(-1), taps(0), taps(1)
    with builder.if_else(three) as (wide, pair):
        with wide:
            front = builder.select(valid_left, builder.fadd(before, at), at)
            wide_sum = builder.select(valid_right, builder.fadd(front, after), front)
            wide_block = builder.block
        with pair:
            a, b = builder.select(from_before, before, at), builder.select(from_before, at, after)
            pair_sum = builder.select(valid_left, builder.select(valid_right, builder.fadd(a, b), a), b)
            pair_block = builder.block
    total = builder.phi(lo.type)
    total.add_incoming(wide_sum, wide_block)
    total.add_incoming(pair_sum, pair_block)
    return total


def _plane_code(tall, plain):
    """The LLVM code of one plane at stride 2, for a window of 3 taps along the first axis
    (``tall``, pad_begin 1; else 2 taps). Along the second axis, ``second`` = 3 (3 taps, pad_begin
    1), 1 (2 taps, pad_begin 1) or 0 (2 taps, pad_begin 0), the same for every row: a branch LLVM
    takes out of the loop. ``plain``: every row the windows read may be loaded 16 values at a time
    (:func:`_tap_row`)."""

    @intrinsic
    def plane(typingctx, x, q0, width, rows, up, down, f0, out, o, cols, left, right, f1, second, o_end):
        """Output rows ``0..rows`` of the plane whose first tap row starts at ``x[q0]`` (maybe
        before the array: a row of padding is not loaded) into ``out[o:]``, writing nothing at or
        past ``out[o_end]``; the tables as in :func:`_pool_stride_two`."""
        signature = types.void(x, q0, width, rows, up, down, f0, out, o, cols, left, right, f1, second, o_end)

        def codegen(context, builder, sig, args):
            x, q0, width, rows, up, down, f0, out, o, cols, left, right, f1, second, o_end = args
            data = [
                context.make_array(t)(context, builder, v).data if isinstance(t, types.Array) else None
                for t, v in zip(sig.args, args)
            ]
            xs, ups, downs, f0s, outs, lefts, rights, f1s = (data[i] for i in (0, 4, 5, 6, 7, 10, 11, 12))
            x_type, out_type = (context.get_value_type(sig.args[i].dtype) for i in (0, 7))
            half, lanes = LANES // 2, ir.VectorType(I64, LANES // 2)
            d8, m8 = ir.VectorType(F64, half), ir.VectorType(I8, half)
            index = ir.Constant(lanes, list(range(half)))
            widths = _splat(builder, width, half)
            inside = [
                builder.icmp_unsigned("<", index, widths),
                builder.icmp_unsigned("<", builder.add(index, ir.Constant(lanes, [half] * half)), widths),
            ]
            zero = ir.Constant(I8, 0)
            no = ir.Constant(m8, [0] * half)
            valid_left, valid_right = (
                builder.icmp_unsigned("!=", builder.load(builder.bitcast(m, m8.as_pointer()), align=1), no)
                for m in (lefts, rights)
            )
            scale1 = builder.load(builder.bitcast(f1s, d8.as_pointer()), align=8)
            stored = builder.icmp_unsigned("<", index, _splat(builder, cols, half))
            three = builder.icmp_signed("==", second, ir.Constant(second.type, 3))
            from_before = builder.icmp_signed("!=", second, ir.Constant(second.type, 0))  # pad_begin 1

            carried = [cgutils.alloca_once(builder, d8) for _ in range(2)]  # the last tap row, next first
            sums = [cgutils.alloca_once(builder, d8) for _ in range(2)]
            if tall:
                first = builder.icmp_unsigned("!=", builder.load(ups), zero)
                for h, v in enumerate(_tap_row(builder, xs, x_type, q0, inside, first, plain)):
                    builder.store(v, carried[h])
            two_rows = builder.add(width, width)
            with cgutils.for_range(builder, rows) as loop:
                r = loop.index
                q = builder.add(q0, builder.mul(r, two_rows))
                first = builder.icmp_unsigned("!=", builder.load(builder.gep(ups, [r])), zero)
                last = builder.icmp_unsigned("!=", builder.load(builder.gep(downs, [r])), zero)

                def first_axis(edge):
                    if tall:
                        a = [builder.load(c) for c in carried]
                        m = _tap_row(builder, xs, x_type, builder.add(q, width), inside, None, plain)
                        z = _tap_row(
                            builder, xs, x_type, builder.add(q, two_rows), inside, last if edge else None, plain
                        )
                        for h in range(2):
                            builder.store(z[h], carried[h])
                        total = [builder.fadd(builder.fadd(a[h], m[h]), z[h]) for h in range(2)]
                    else:
                        a = _tap_row(builder, xs, x_type, q, inside, first if edge else None, plain)
                        m = _tap_row(builder, xs, x_type, builder.add(q, width), inside, last if edge else None, plain)
                        total = [builder.fadd(a[h], m[h]) for h in range(2)]
                    for h in range(2):
                        builder.store(total[h], sums[h])

                # rows with every tap valid load through the lane masks alone (computing the
                # masks of each row's flags cost 25% of a 2 x 2 plane)
                with builder.if_else(last if tall else builder.and_(first, last), likely=True) as (inner, edge):
                    with inner:
                        first_axis(False)
                    with edge:
                        first_axis(True)
                scale0 = _splat(builder, builder.load(builder.gep(f0s, [r])), half)
                lo, hi = (builder.fmul(builder.load(s), scale0) for s in sums)
                v = builder.fmul(_window_columns(builder, lo, hi, three, from_before, valid_left, valid_right), scale1)
                if out_type != F64:
                    v = builder.fptrunc(v, ir.VectorType(out_type, half))
                at = builder.add(o, builder.mul(r, cols))
                target = builder.gep(outs, [at])
                # lanes past the row land on outputs this call writes later: stored as they are
                fits = builder.icmp_unsigned("<=", builder.add(at, ir.Constant(I64, half)), o_end)
                with builder.if_else(fits, likely=True) as (whole, tail):
                    with whole:
                        builder.store(v, builder.bitcast(target, v.type.as_pointer()), align=4)
                    with tail:
                        _masked(builder, "store", ir.VoidType(), [v, target, ir.Constant(I32, 4), stored])
            return context.get_dummy_value()

        return signature, codegen

    return plane


_tall_plane, _plane = _plane_code(True, False), _plane_code(False, False)
_tall_plain, _plain = _plane_code(True, True), _plane_code(False, True)


@kernel(**COMPUTE)
def _pool_stride_two(x, out, start, stop, axes, masks, factors):
    """Planes ``start..stop`` at stride 2 along both axes, each window of 2 or 3 taps from pad_begin
    1 or 0 (3 taps: pad_begin 1), one output row at a time. Tables (tables.small_plane_tables):
    ``masks`` = the kernel along each axis, then per output row whether its first and last tap
    are valid (``rows`` each), then per output column the same (``LANES // 2`` each); ``factors``
    = each output row's scale, then each column's (``LANES // 2``). Planes before the last one
    or two (``loadable``) go by the code with plain loads (:func:`_plane_code`)."""
    height, width, rows, cols = axes[0, LENGTH], axes[1, LENGTH], axes[0, OUTPUTS], axes[1, OUTPUTS]
    half = LANES // 2
    up, down = masks[2 : 2 + rows], masks[2 + rows : 2 + 2 * rows]
    left, right = masks[2 + 2 * rows : 2 + 2 * rows + half], masks[2 + 2 * rows + half : 2 + 2 * rows + 2 * half]
    f0, f1 = factors[:rows], factors[rows : rows + half]
    tall, second = masks[0] == 3, (masks[1] == 3) * 2 + axes[1, PLANE_PAD]
    plane_in, plane_out, w, n, m = U(height * width), U(rows * cols), U(width), U(rows), U(cols)
    back = U(axes[0, PLANE_PAD]) * w
    o_end = U(stop) * plane_out
    # planes whose rows may be loaded 16 values at a time without reading past the array
    loadable = (U(x.size) + w - U(LANES)) // plane_in if x.size + width >= LANES else U(0)
    for b in range(start, stop):
        q0, o = U(b) * plane_in - back, U(b) * plane_out
        if U(b) < loadable:
            if tall:
                _tall_plain(x, q0, w, n, up, down, f0, out, o, m, left, right, f1, second, o_end)
            else:
                _plain(x, q0, w, n, up, down, f0, out, o, m, left, right, f1, second, o_end)
        elif tall:
            _tall_plane(x, q0, w, n, up, down, f0, out, o, m, left, right, f1, second, o_end)
        else:
            _plane(x, q0, w, n, up, down, f0, out, o, m, left, right, f1, second, o_end)
