"""Kernels that call other kernels through their machine-code address, not by linking them in.

numba compiles a call from one kernel to another by linking the callee's LLVM module into the
caller's and optimising the whole again: every caller pays for all it calls, once per caller
and per signature, and a kernel that could call any of its variants pays for all of them
(the separable passes' single entry compiled for 80 s per dtype). A kernel reached through
:func:`call_at` is compiled once, on its own, when the engine takes its :func:`address` for a
plan, so a first call compiles only the variants its plan runs
(tests/test_compile_counts.py counts them).
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import compiled


@intrinsic
def call_at(typingctx, address, args):
    """Call the kernel at ``address`` as ``kernel(*args)``: it must have been compiled for the
    types of ``args`` (:func:`address`; an array's read-only flag may differ, which changes only
    typing), and return nothing. An exception it raises propagates, as from a linked call."""
    argtypes = tuple(args.types)

    def codegen(context, builder, signature, llargs):
        values = [builder.extract_value(llargs[1], i) for i in range(len(argtypes))]
        function_type = context.call_conv.get_function_type(types.none, argtypes)
        function = builder.inttoptr(llargs[0], function_type.as_pointer())
        status, _ = context.call_conv.call_function(builder, function, types.none, argtypes, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.none(address, args), codegen


def address(dispatcher: Any, signature: tuple) -> int:
    """The machine-code address of ``dispatcher`` compiled (or loaded from the cache) for
    ``signature``, for :func:`call_at`."""
    result = compiled(dispatcher, signature)
    pointer = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
    if not pointer:
        raise RuntimeError(f"no machine code for {dispatcher.__name__}{signature}")
    return int(pointer)


def flat(dtype: Any) -> Any:
    """numba's type of a writable flat C-contiguous array of ``dtype``."""
    import numpy as np
    from numba import typeof

    return types.Array(typeof(np.empty(0, dtype)).dtype, 1, "C")
