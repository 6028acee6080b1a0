"""``avgpool warmup``: each kind of first call made once, so that later processes start warm."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from typing import TextIO


SUMMARY = "load or compile the kernels ahead of the first call (container images, CI)"
DESCRIPTION = (
    "Make each kind of first call once, so that later processes start warm: it compiles the kernels "
    "(a few seconds per kind) into the cache folder it prints (NUMBA_CACHE_DIR chooses it), or loads "
    "them from there."
)
EXAMPLES = [
    "avgpool warmup",
    "avgpool warmup float32 qlinear-uint8",
    "NUMBA_CACHE_DIR=/opt/cache avgpool warmup    # e.g. in a Dockerfile",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    from .._warmup import KINDS

    parser.epilog += f"\nkinds: {', '.join(KINDS)}"  # after the examples
    parser.add_argument("kinds", nargs="*", metavar="KIND", help="kinds to warm up (default: all)")


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    """Warm up the chosen kinds, a line each, then where compiled kernels are kept."""
    from .._warmup import cache_location, warmup

    warmup(
        args.kinds or None, report=lambda kind, seconds: print(f"{kind:26s} {seconds:6.2f} s", file=stdout, flush=True)
    )
    print(
        f"kernels compiled here are kept in: {cache_location() or 'no writable folder (set NUMBA_CACHE_DIR)'}",
        file=stdout,
    )
    return 0
