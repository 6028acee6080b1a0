"""Compiled side of avgpool's work sharing: a job board in shared memory, claimed with atomics.

The caller's :func:`lead` posts a job (the kernel's address, its arguments, ``items`` cut into
``pieces``) and takes pieces itself until none is left; helper threads in :func:`serve` watch
the board, spinning (no GIL held) for a while after each job, and take pieces too. Neither side
returns to Python between pieces, so a helper that is spinning joins a job within about a
microsecond, where waking a sleeping thread (and taking the GIL) costs tens of microseconds.

Only :func:`lead`'s copy of the arguments and the job's piece function (:func:`piece_address`)
are compiled per kernel argument types; the rest (the helpers' loop, claiming, keeping apart) is
compiled once for every job: a first threaded call compiles about a second less
(benchmarks/compile_times.py).

Board words (int64):
    CLAIM   job number << 20 | next unclaimed piece (one compare-and-swap claims a piece of that
            job, so a helper can never take a piece of a job whose fields it did not read)
    PIECES, ITEMS   the job's piece count and items
    PIECE, JOB, KERNEL   the addresses of its piece function, of its arguments (the bytes
            :func:`lead` was given) and of its kernel
    DONE    pieces finished (the caller waits for DONE == PIECES: only pieces already claimed by
            a running helper are ever waited for, never a helper that has not started)
    FAILED  set when a piece raised; the caller then reruns the whole job on its own thread
    CPU     the CPU the caller posted the job from (-1: unknown)
    HELPER  the CPU a helper last ran on (-1: unknown)

A job is posted only after every piece of the previous job is finished: its CLAIM word is first
set to the new job number with every piece taken, then its fields and arguments are written,
then CLAIM opens the job (piece 0). So a helper that read CLAIM = (job, i < pieces) and then
claimed piece i with a compare-and-swap on that same word reads that job's fields and
arguments, and a helper that read the previous job's CLAIM cannot claim with it once this job's
PIECES is written (tests/test_threads.py). The caller
holds the arguments' arrays until its job is finished: the copy takes no reference.
"""

from __future__ import annotations

import hashlib
import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import COMPUTE, INLINED, compiled, flat_signature, kernel

CLAIM, PIECES, ITEMS, PIECE, JOB, KERNEL, DONE, FAILED, CPU, HELPER = range(10)
BOARD_WORDS = 16  # the board spans its own cache lines
#: Bytes for a job's arguments as numba holds them (a 2-D array is 7 words; the float passes'
#: tables, the largest, take about 60)
JOB_BYTES = 4096
_PIECE_BITS = 20
_PIECE_MASK = (1 << _PIECE_BITS) - 1
MAX_PIECES = _PIECE_MASK

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_POSIX = platform.system() != "Windows"
_LINUX = platform.system() == "Linux"
#: uint64 words of a Linux CPU set (cpu_set_t: 1024 CPUs)
_CPU_SET_WORDS = 16
#: Scratch words :func:`serve` takes: two CPU sets.
SCRATCH_WORDS = 2 * _CPU_SET_WORDS
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


@kernel(**COMPUTE)
def _step_off(cpu, scratch):
    """Move this thread off ``cpu``, the CPU it runs on, if it may run elsewhere, free to run
    anywhere it could before (its CPU set is restored at once: a nudge, not a pin). ``scratch``:
    two CPU sets' worth of words. Linux wakes a thread on its waker's CPU: a helper woken for a
    job, or woken by the caller's handing back the GIL, then spins beside the caller on one CPU
    while another stays idle, for whole batches of calls (threads.py has the timings). A CPU set
    given to the thread from outside meanwhile (``os.sched_setaffinity`` on its id) is kept: the
    set is restored only if it is still the one written here."""
    if scratch.size < SCRATCH_WORDS:  # the system writes whole CPU sets into both halves
        return
    mask, now = scratch[:_CPU_SET_WORDS], scratch[_CPU_SET_WORDS:SCRATCH_WORDS]
    if _get_affinity(mask) != 0:
        return
    word, bit = cpu // 64, np.uint64(1) << np.uint64(cpu % 64)
    if word >= mask.size or not mask[word] & bit:
        return
    mask[word] &= ~bit
    elsewhere = False
    for i in range(mask.size):
        elsewhere = elsewhere or mask[i] != 0
    if not elsewhere or _set_affinity(mask) != 0:  # the system moves this thread before it returns
        return
    if _get_affinity(now) != 0:
        return
    for i in range(mask.size):
        if now[i] != mask[i]:
            return
    mask[word] |= bit
    _set_affinity(mask)


@kernel(**COMPUTE)
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


#: What a job's piece function takes: the address of the job's arguments, the kernel's address,
#: and the piece's first and stop item (it returns 1 if the kernel ran, 0 if it raised).
_PIECE_ARGS = (types.int64, types.int64, types.int64, types.int64)


@intrinsic
def _call_piece(typingctx, function, job, kernel, lo, hi):
    """Call the piece function at address ``function`` (:func:`piece_address`): 1 if the kernel
    ran, 0 if it (or the piece function) raised."""

    def codegen(context, builder, signature, llargs):
        function_type = context.call_conv.get_function_type(types.int64, _PIECE_ARGS)
        pointer = builder.inttoptr(llargs[0], function_type.as_pointer())
        status, result = context.call_conv.call_function(builder, pointer, types.int64, _PIECE_ARGS, llargs[1:])
        return builder.select(status.is_error, ir.Constant(ir.IntType(64), 0), result)

    return types.int64(function, job, kernel, lo, hi), codegen


def _value_bytes(numba_type) -> int:
    from numba.core.registry import cpu_target

    context = cpu_target.target_context
    return context.get_abi_sizeof(context.get_value_type(numba_type))


@intrinsic
def _stash(typingctx, job, value):
    """Write ``value`` (the job's arrays and tables, as numba holds them: pointers, shapes and
    strides, no reference taken) into the bytes of ``job``, where :func:`piece_address`'s
    function reads it. A job that does not fit is a typing error (the caller then runs serially)."""
    if _value_bytes(value) > JOB_BYTES:
        return None

    def codegen(context, builder, signature, llargs):
        data = context.make_array(signature.args[0])(context, builder, llargs[0]).data
        builder.store(llargs[1], builder.bitcast(data, context.get_value_type(signature.args[1]).as_pointer()))
        return context.get_dummy_value()

    return types.none(job, value), codegen


@kernel(**COMPUTE)
def _run_piece(board, claim):
    """Run the claimed piece ``claim & mask`` of the posted job through its piece function; count
    it done (failed or not)."""
    piece, pieces, items = claim & _PIECE_MASK, _load(board, PIECES), _load(board, ITEMS)
    lo, hi = items * piece // pieces, items * (piece + 1) // pieces
    if _call_piece(_load(board, PIECE), _load(board, JOB), _load(board, KERNEL), lo, hi) == 0:
        _store(board, FAILED, 1)
    _add(board, DONE, 1)


@kernel(**COMPUTE)
def _claim(board):
    """Claim an unclaimed piece of the posted job: its CLAIM word, or -1 when none is left."""
    while True:
        claim = _load(board, CLAIM)
        if (claim & _PIECE_MASK) >= _load(board, PIECES):
            return -1
        if _swap(board, CLAIM, claim, claim + 1):
            return claim


@kernel(**COMPUTE)
def lead(board, job, piece, kernel, items, pieces):
    """Post a job: ``kernel(x, out, lo, hi, *args)`` over ``items`` in ``pieces``, its arguments
    at address ``job`` (:func:`stash`), ``kernel`` the address from :func:`native_address` and
    ``piece`` the one from :func:`piece_address` for its argument types; take pieces until none
    is left, and return when all are finished: True, or False if one raised."""
    # first the new job number with every piece taken: a helper that read the previous job's
    # CLAIM (all its pieces taken) and then this job's PIECES cannot claim with it, because its
    # compare-and-swap expects that previous CLAIM (a seq_cst read-modify-write: the fields below
    # are not written before it)
    previous = _load(board, CLAIM)
    number = (previous >> _PIECE_BITS) + 1
    while not _swap(board, CLAIM, previous, number << _PIECE_BITS | _PIECE_MASK):
        previous = _load(board, CLAIM)
    board[PIECES] = pieces
    board[ITEMS] = items
    board[PIECE] = piece
    board[JOB] = job
    board[KERNEL] = kernel
    board[DONE] = 0
    board[FAILED] = 0
    here = _this_cpu()
    board[CPU] = here
    _store(board, CLAIM, number << _PIECE_BITS)  # the job is open
    if here >= 0 and _load(board, HELPER) == here:
        _yield_core()  # a helper that shares this CPU runs only when this thread lets it: it steps off
    while True:
        claim = _claim(board)
        if claim < 0:
            break
        _run_piece(board, claim)
    rounds = 0
    while _load(board, DONE) < pieces:  # pieces a helper is still running
        _idle(rounds)
        rounds += 1
    return _load(board, FAILED) == 0


@kernel(**COMPUTE)
def stash(x, out, job, *args):
    """Copy a job's arguments into the bytes ``job`` (what :func:`lead` posts): the one function
    compiled per argument types, with the job's piece function. (``x`` first: the compile notice
    names the dtype of a kernel's first data array, jit._data_type.)"""
    _stash(job, (x, out, args))


@kernel(**COMPUTE)
def serve(board, rounds, cpu_set):
    """Take pieces of the jobs posted on ``board``, whatever their kernel; return after
    ``rounds`` idle reads. ``cpu_set``: :data:`SCRATCH_WORDS` words of scratch."""
    idle = 0
    while idle < rounds:
        claim = _load(board, CLAIM)
        if (claim & _PIECE_MASK) < _load(board, PIECES):
            if _swap(board, CLAIM, claim, claim + 1):
                _keep_apart(board, cpu_set)
                _run_piece(board, claim)
                idle = 0
            continue
        if idle % _READS_PER_YIELD == 0:
            _keep_apart(board, cpu_set)
        _idle(idle)
        idle += 1
    return 0


#: The piece functions made so far, by a hash of their job type.
_PIECES: dict[str, object] = {}


def _piece_kernel(job_type, key: str):
    """The piece function of jobs of ``job_type`` (the tuple ``(x, out, args)``): it reads the
    job's arguments back from their address and calls the kernel at its address."""

    @intrinsic
    def fetch(typingctx, job):
        def codegen(context, builder, signature, llargs):
            return builder.load(builder.inttoptr(llargs[0], context.get_value_type(job_type).as_pointer()))

        return job_type(job), codegen

    @kernel(key=("piece", key), **COMPUTE)
    def piece(job, kernel, lo, hi):
        x, out, args = fetch(job)
        return 1 if call_native(kernel, x, out, lo, hi, args) else 0

    return piece


def _signature(x, out, args) -> tuple:
    from numba import typeof

    if x.ndim == 1 and out.ndim == 1:
        return flat_signature(x.dtype, out.dtype, args)
    return (
        types.Array(typeof(x).dtype, x.ndim, "C"),
        types.Array(typeof(out).dtype, out.ndim, "C"),
        types.int64,
        types.int64,
        *(typeof(a) for a in args),
    )


def _address(result) -> int:
    address = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"no native code for {result.fndesc.qualname}")
    return int(address)


#: :func:`lead`'s one signature: the board, then addresses and counts.
LEAD_SIGNATURE = (types.Array(types.int64, 1, "C"), *(types.int64,) * 5)


def native_address(kernel, x, out, args) -> int:
    """The address of ``kernel`` compiled (or loaded from the cache) for C-contiguous arrays like
    ``x`` and ``out``, int64 bounds and ``args``: what the pieces of a job call."""
    return _address(compiled(kernel, _signature(x, out, args)))


def piece_address(x, out, args) -> int:
    """The address of the piece function for jobs whose ``x``, ``out`` and ``args`` have these
    types (as :func:`stash` is called with them: ``x`` read-only), compiled or loaded once."""
    from numba import typeof

    job_type = types.Tuple((typeof(x), typeof(out), typeof(args)))
    key = hashlib.sha256(str(job_type).encode()).hexdigest()[:16]
    piece = _PIECES.get(key)
    if piece is None:
        piece = _PIECES[key] = _piece_kernel(job_type, key)
    return _address(compiled(piece, _PIECE_ARGS))
