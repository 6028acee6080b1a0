"""The ``avgpool`` command: ``demo``, ``shape``, ``explain``, ``pool``, ``run`` and ``warmup``,
each in its own module beside its flags (:mod:`avgpool.cli.flags` holds those they share). A
command's module has its ``SUMMARY``, ``DESCRIPTION`` and ``EXAMPLES`` for ``--help``,
``add_flags(parser)`` and ``command(args, stdout)``, which returns the exit code.

>>> main(["shape", "1x3x32x32", "-k", "3,3", "-s", "2,2", "--ceil-mode"])
1x3x16x16
0

Errors in the user's input (attributes, files, shapes) print one line on stderr and exit with 2,
never a traceback; ``run --check`` exits with 1 when onnxruntime disagrees beyond the tolerance.
Ctrl-C prints one line and exits with 130 with every output file as it was, or, once the output is
in place, lets the command end normally (:class:`avgpool.cli.interrupts.Interrupts`).
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import TextIO

# Nothing else is imported here: the console script imports this module before main() can handle
# Ctrl-C, so numpy, argparse, the command modules and the rest of avgpool are imported inside the
# functions (after main() has installed its handler, tests/test_interrupts.py).

_COMMANDS = ("demo", "shape", "explain", "pool", "run", "warmup")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: each command's parser from its module's texts and flags."""
    import argparse

    from . import demo, explain, pool, run, shape, warmup
    from .flags import add_command

    parser = argparse.ArgumentParser(
        prog="avgpool",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the examples keep their lines
        description="Average pooling exactly as ONNX, ONNX Runtime, OpenVINO and oneDNN define it.",
        epilog="examples:\n"
        "  avgpool demo\n"
        "  avgpool shape 1x3x32x32 -k 3,3 -s 2,2 --ceil-mode\n"
        "  avgpool explain 1x1x4 -k 3 -s 3 --ceil-mode\n"
        "  avgpool pool photo.png small.png -k 2,2 -s 2,2\n"
        "  avgpool run model.onnx --output-dir out --check\n"
        "  avgpool warmup\n"
        "run 'avgpool COMMAND --help' for each command's flags",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in zip(_COMMANDS, (demo, shape, explain, pool, run, warmup)):
        add_command(commands, name, command)
    return parser


def _command(args: argparse.Namespace, stdout: TextIO) -> int:
    from . import demo, explain, pool, run, shape, warmup

    commands = {"demo": demo, "shape": shape, "explain": explain, "pool": pool, "run": run, "warmup": warmup}
    return commands[args.command].command(args, stdout)


def _failure(prefix: str, err: Exception) -> int:
    """Exit code 2 and one line for an error in the user's input or files; other errors go on."""
    from ..errors import AvgPoolError
    from .files import FileFormatError
    from .flags import UsageError

    if isinstance(err, (AvgPoolError, FileFormatError, UsageError, ImportError)):
        message = str(err)
    elif isinstance(err, MemoryError):  # e.g. absurd pads: an output of terabytes
        message = f"not enough memory: {err or 'MemoryError'}"
    elif isinstance(err, OSError):
        message = f"{err.filename}: " if err.filename else ""
        message += f"{err.strerror or err}"
    else:
        raise err
    print(f"{prefix}: error: {message}", file=sys.stderr)
    return 2


def _skip_the_collections_at_exit() -> None:
    """Freeze the garbage collector once every other exit handler has run (registered first, this
    one runs last): the interpreter's collections at exit walk every object numba made, 0.3 s of a
    1.3 s command on the 2-core machine. Frozen, those objects are still freed, but by reference
    count; only objects in cycles are left to the OS, and by then the command's files are closed
    (benchmarks/cold_start.py times whole processes)."""
    import atexit
    import gc

    atexit.register(gc.freeze)


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run one command and return its exit code. Without ``argv`` this is the program itself (the
    console script, ``python -m avgpool``): the command line is ``sys.argv``, and SIGINT stays
    ignored once this returns, until the process has exited (:class:`avgpool.cli.interrupts.Interrupts`)."""
    if argv is None:
        _skip_the_collections_at_exit()
    with INTERRUPTS.handling(program=argv is None) as handled:
        words = sys.argv[1:] if argv is None else list(argv)
        prefix = f"avgpool {words[0]}" if words and words[0] in _COMMANDS else "avgpool"
        code: int | None = None
        try:
            try:
                if handled:
                    INTERRUPTS.start()
                args = build_parser().parse_args(argv)
                code = _command(args, stdout or sys.stdout)
            finally:
                if handled:
                    INTERRUPTS.stop()
                files = sys.modules.get(f"{__name__}.files")  # loaded if the command wrote anything
                if files is not None:
                    files.remove_pending()  # what an interrupt in its clean-up left
        except KeyboardInterrupt:  # the outputs are already cleaned up (files.replacing)
            code = None
        except Exception as err:  # noqa: BLE001 - _failure reports the user's errors and raises the others
            # an import can turn a KeyboardInterrupt into an ImportError
            code = None if handled and INTERRUPTS.requested else _failure(prefix, err)
        if code is None or (handled and INTERRUPTS.requested):
            terminated = handled and INTERRUPTS.signum == signal.SIGTERM
            print(f"{prefix}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
            return 128 + (signal.SIGTERM if terminated else signal.SIGINT)  # the shell's convention: 143, 130
        return code
