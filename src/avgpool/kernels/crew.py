"""Compiled side of avgpool's work sharing: a job board in shared memory, claimed with atomics.

The caller's :func:`lead` posts a job (``kernel``, the input and output addresses, ``items`` cut
into ``pieces``) and takes pieces itself until none is left; helper threads in :func:`serve`
watch the board, spinning (no GIL held) for a while after each job, and take pieces too. Neither
side returns to Python between pieces, so a helper that is spinning joins a job within about a
microsecond, where waking a sleeping thread (and taking the GIL) costs tens of microseconds.

Board words (int64):
    CLAIM   job number << 20 | next unclaimed piece (one compare-and-swap claims a piece of that
            job, so a helper can never take a piece of a job whose fields it did not read)
    PIECES, ITEMS, POOL, X, OUT   the job: piece count, items, pool id, input and output address
    DONE    pieces finished (the caller waits for DONE == PIECES: only pieces already claimed by
            a running helper are ever waited for, never a helper that has not started)
    FAILED  set when a piece raised; the caller then reruns the whole job on its own thread
    CPU     the CPU the caller posted the job from (-1: unknown)
    HELPER  the CPU a helper last ran on (-1: unknown)

A job's fields are written before its CLAIM word and only after every piece of the previous job
is finished, so a helper that read CLAIM = (job, i < pieces), then the fields, and then claimed
piece i with a compare-and-swap on that same word, read that job's fields.
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import INLINED, JIT, compiled, flat_signature, kernel

CLAIM, PIECES, ITEMS, POOL, X, OUT, DONE, FAILED, CPU, HELPER = range(10)
BOARD_WORDS = 16  # the board spans its own cache lines
_PIECE_BITS = 20
_PIECE_MASK = (1 << _PIECE_BITS) - 1
MAX_PIECES = _PIECE_MASK

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_POSIX = platform.system() != "Windows"
_LINUX = platform.system() == "Linux"
#: uint64 words of a Linux CPU set (cpu_set_t: 1024 CPUs)
_CPU_SET_WORDS = 16
#: Idle reads between two offers of the core to the OS scheduler.
_READS_PER_YIELD = 64


def _word_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index])


@intrinsic
def _load(typingctx, board, index):
    """``board[index]``, an atomic acquire load (never hoisted out of a loop)."""

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_word_pointer(context, builder, signature.args[0], *args), "acquire", 8)

    return types.int64(board, index), codegen


@intrinsic
def _store(typingctx, board, index, value):
    """``board[index] = value``, an atomic release store."""

    def codegen(context, builder, signature, args):
        builder.store_atomic(
            args[2], _word_pointer(context, builder, signature.args[0], args[0], args[1]), "release", 8
        )
        return context.get_dummy_value()

    return types.none(board, index, types.int64), codegen


@intrinsic
def _add(typingctx, board, index, value):
    """Atomically ``board[index] += value``."""

    def codegen(context, builder, signature, args):
        builder.atomic_rmw(
            "add", _word_pointer(context, builder, signature.args[0], args[0], args[1]), args[2], "seq_cst"
        )
        return context.get_dummy_value()

    return types.none(board, index, types.int64), codegen


@intrinsic
def _swap(typingctx, board, index, expected, value):
    """Compare-and-swap ``board[index]`` from ``expected`` to ``value``: True if it was done."""

    def codegen(context, builder, signature, args):
        pointer = _word_pointer(context, builder, signature.args[0], args[0], args[1])
        result = builder.cmpxchg(pointer, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(result, 1)

    return types.boolean(board, index, types.int64, types.int64), codegen


def _call_c(builder, name, returns):
    """Call the C function (or LLVM intrinsic) ``name``, which takes no argument."""
    return builder.call(cgutils.get_or_insert_function(builder.module, ir.FunctionType(returns, []), name), [])


@intrinsic
def _pause(typingctx):
    """x86 ``pause``: a spin-wait hint that frees the core's resources between reads."""

    def codegen(context, builder, signature, args):
        if _X86:
            _call_c(builder, "llvm.x86.sse2.pause", ir.VoidType())
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _yield_core(typingctx):
    """``sched_yield()``: let another thread that is ready on this core run. A thread woken from
    sleep may land on its waker's core; spinning there would keep the other from running until
    the OS preempts the spinner (milliseconds)."""

    def codegen(context, builder, signature, args):
        if _POSIX:
            _call_c(builder, "sched_yield", ir.IntType(32))
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _this_cpu(typingctx):
    """``sched_getcpu()``: the CPU this thread runs on (-1 where the system cannot tell)."""

    def codegen(context, builder, signature, args):
        if _LINUX:
            return builder.sext(_call_c(builder, "sched_getcpu", ir.IntType(32)), ir.IntType(64))
        return ir.Constant(ir.IntType(64), -1)

    return types.int64(), codegen


def _affinity_call(name):
    """An intrinsic calling ``name(0, size, mask)`` (sched_getaffinity or sched_setaffinity of
    this thread) with a CPU set in a uint64 array: 0 on success (-1 off Linux)."""

    @intrinsic
    def call(typingctx, mask):
        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            if not _LINUX:
                return ir.Constant(i64, -1)
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            function_type = ir.FunctionType(i32, [i32, i64, ir.IntType(8).as_pointer()])
            function = cgutils.get_or_insert_function(builder.module, function_type, name)
            status = builder.call(
                function,
                [
                    ir.Constant(i32, 0),
                    ir.Constant(i64, 8 * _CPU_SET_WORDS),
                    builder.bitcast(data, ir.IntType(8).as_pointer()),
                ],
            )
            return builder.sext(status, i64)

        return types.int64(mask), codegen

    return call


_get_affinity = _affinity_call("sched_getaffinity")
_set_affinity = _affinity_call("sched_setaffinity")


@kernel(**JIT)
def _step_off(cpu, mask):
    """Move this thread off ``cpu``, the CPU it runs on, if it may run elsewhere, free to run
    anywhere it could before (its CPU set is restored at once: a nudge, not a pin). ``mask``:
    a CPU set's worth of scratch. Linux wakes a thread on its waker's CPU: a helper woken for a
    job, or woken by the caller's handing back the GIL, then spins beside the caller on one CPU
    while another stays idle, for whole batches of calls (threads.py has the timings). A CPU set
    given to the thread from outside meanwhile (``os.sched_setaffinity`` on its id) is kept: the
    set is restored only if it is still the one written here."""
    if _get_affinity(mask) != 0:
        return
    word, bit = cpu // 64, np.uint64(1) << np.uint64(cpu % 64)
    if word >= mask.size or not mask[word] & bit:
        return
    mask[word] &= ~bit
    elsewhere = False
    for w in mask:
        elsewhere = elsewhere or w != 0
    if not elsewhere or _set_affinity(mask) != 0:  # the system moves this thread before it returns
        return
    now = np.empty_like(mask)
    if _get_affinity(now) != 0:
        return
    for i in range(mask.size):
        if now[i] != mask[i]:
            return
    mask[word] |= bit
    _set_affinity(mask)


@kernel(**JIT)
def _keep_apart(board, cpu_set):
    """A helper's check, between reads and before a piece: step off the caller's CPU if it runs
    there (``cpu_set``: scratch), and note where it runs (the caller yields its CPU to a helper
    that shares it, so that the helper can move)."""
    here = _this_cpu()
    if here >= 0 and here == _load(board, CPU):
        _step_off(here, cpu_set)
        here = _this_cpu()
    _store(board, HELPER, here)


@kernel(**INLINED)
def _idle(rounds):
    """One idle read's wait: a pause, and every few reads the core offered to other threads."""
    _pause()
    if rounds % _READS_PER_YIELD == _READS_PER_YIELD - 1:
        _yield_core()


@intrinsic
def _pointer_like(typingctx, address, like):
    """The integer ``address`` as a pointer to elements of array type ``like``."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return types.CPointer(like.dtype)(address, like), codegen


@intrinsic
def call_native(typingctx, address, x, out, lo, hi, args):
    """Call the compiled kernel at ``address`` as ``kernel(x, out, lo, hi, *args)``: True unless
    it raised. The kernel is reached through its address, not linked in: linking a kernel into
    this loop would have LLVM optimise the whole kernel again, for half a minute, per kernel."""
    argtypes = (x, out, lo, hi, *args.types)

    def codegen(context, builder, signature, llargs):
        values = [*llargs[1:5], *(builder.extract_value(llargs[5], i) for i in range(len(args.types)))]
        function_type = context.call_conv.get_function_type(types.none, argtypes)
        function = builder.inttoptr(llargs[0], function_type.as_pointer())
        status, _ = context.call_conv.call_function(builder, function, types.none, argtypes, values)
        return builder.not_(status.is_error)

    return types.boolean(address, x, out, lo, hi, args), codegen


@kernel(**JIT)
def _run_piece(kernel, board, claim, x_like, out_like, args):
    """Run the claimed piece ``claim & mask`` of the posted job with the kernel at address
    ``kernel``; count it done (failed or not)."""
    piece, pieces, items = claim & _PIECE_MASK, _load(board, PIECES), _load(board, ITEMS)
    x = carray(_pointer_like(_load(board, X), x_like), x_like.shape)
    out = carray(_pointer_like(_load(board, OUT), out_like), out_like.shape)
    if not call_native(kernel, x, out, items * piece // pieces, items * (piece + 1) // pieces, args):
        _store(board, FAILED, 1)
    _add(board, DONE, 1)


@kernel(**JIT)
def _claim(board):
    """Claim an unclaimed piece of the posted job: its CLAIM word, or -1 when none is left."""
    while True:
        claim = _load(board, CLAIM)
        if (claim & _PIECE_MASK) >= _load(board, PIECES):
            return -1
        if _swap(board, CLAIM, claim, claim + 1):
            return claim


@kernel(**JIT)
def lead(kernel, board, pool, x, out, items, pieces, *args):
    """Post ``kernel(x, out, lo, hi, *args)`` over ``items`` in ``pieces`` (``kernel``: the address
    from :func:`native_address`) and take pieces until none is left; return when all are
    finished: True, or False if one raised."""
    board[PIECES] = pieces
    board[ITEMS] = items
    board[POOL] = pool
    board[X] = x.ctypes.data
    board[OUT] = out.ctypes.data
    board[DONE] = 0
    board[FAILED] = 0
    here = _this_cpu()
    board[CPU] = here
    job = (_load(board, CLAIM) >> _PIECE_BITS) + 1
    _store(board, CLAIM, job << _PIECE_BITS)
    if here >= 0 and _load(board, HELPER) == here:
        _yield_core()  # a helper that shares this CPU runs only when this thread lets it: it steps off
    while True:
        claim = _claim(board)
        if claim < 0:
            break
        _run_piece(kernel, board, claim, x, out, args)
    rounds = 0
    while _load(board, DONE) < pieces:  # pieces a helper is still running
        _idle(rounds)
        rounds += 1
    return _load(board, FAILED) == 0


@kernel(**JIT)
def serve(kernel, board, pool, x_like, out_like, rounds, *args):
    """Take pieces of the jobs of pool ``pool`` (kernel at address ``kernel``, input and output
    shaped like ``x_like`` and ``out_like``); return 0 after ``rounds`` idle reads, or the pool
    id of a job of another pool."""
    idle = 0
    cpu_set = np.zeros(_CPU_SET_WORDS, np.uint64)
    while idle < rounds:
        claim = _load(board, CLAIM)
        if (claim & _PIECE_MASK) < _load(board, PIECES):
            other = _load(board, POOL)
            if _load(board, CLAIM) != claim:  # what was read may belong to another job
                continue
            if other != pool:
                return other
            if _swap(board, CLAIM, claim, claim + 1):
                _keep_apart(board, cpu_set)
                _run_piece(kernel, board, claim, x_like, out_like, args)
                idle = 0
            continue
        if idle % _READS_PER_YIELD == 0:
            _keep_apart(board, cpu_set)
        _idle(idle)
        idle += 1
    return 0


def native_address(kernel, x, out, args) -> int:
    """The address of ``kernel`` compiled (or loaded from the cache) for C-contiguous arrays like
    ``x`` and ``out``, int64 bounds and ``args``: what :func:`lead` and :func:`serve` call."""
    from numba import typeof

    if x.ndim == 1 and out.ndim == 1:
        signature = flat_signature(x.dtype, out.dtype, args)
    else:
        signature = (
            types.Array(typeof(x).dtype, x.ndim, "C"),
            types.Array(typeof(out).dtype, out.ndim, "C"),
            types.int64,
            types.int64,
            *(typeof(a) for a in args),
        )
    result = compiled(kernel, signature)
    address = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"no native code for {kernel.__name__}{signature}")
    return int(address)
