"""Ctrl-C (SIGINT) while the command line runs, and SIGTERM when the command line is the program:
one KeyboardInterrupt, never an output half replaced (:class:`Interrupts`; avgpool.cli's ``main``
installs it first of all).

Imports only the standard library: the console script imports avgpool.cli, and with it this
module, before ``main`` can handle Ctrl-C (tests/test_interrupts.py).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

_BEFORE, _RUNNING, _COMMITTING, _DONE = "before", "running", "committing", "done"


def set_sigint(handler: Any) -> None:
    """``signal.signal(SIGINT, handler)`` with SIGINT held back meanwhile. A SIGINT arriving while
    Python swaps the handlers trips Python's C handler and then finds SIG_IGN, which Python prints
    as "Signal 2 ignored due to race condition" with a traceback (tests/test_interrupts.py, a Ctrl-C
    every 2 ms as the command ends, met it in one full run). Held, it reaches the old handler
    (``pthread_sigmask`` runs the handlers of signals that came before it) or, after, the new one,
    or the system drops it when the new one ignores it."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:  # no signal masks (Windows)
        signal.signal(signal.SIGINT, handler)
        return
    previous = mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        signal.signal(signal.SIGINT, handler)
    finally:
        mask(signal.SIG_SETMASK, previous)


class Interrupts:
    """Ctrl-C (SIGINT) while :func:`main` runs: one KeyboardInterrupt, never an output half replaced.

    - Ctrl-C raises KeyboardInterrupt in the main thread once, as soon as the command runs (one that
      came while main() was starting is raised then); later ones are ignored, so that they cannot
      cut short the removal of a temporary file or the last message.
    - Python raises it wherever the main thread is, which can be a Python function called back by
      compiled code (llvmlite's object cache while numba compiles: ctypes prints "Exception ignored
      on calling ctypes callback function" with a traceback, drops the exception and carries on)
      or a ``__del__``. Such a KeyboardInterrupt reaches ``sys.unraisablehook`` instead, where it
      is not printed and is raised again a moment later; :meth:`check` (between batches) and each
      commit raise it too if it has still not got through (an import can also turn it into an
      ImportError that a library catches). After a Ctrl-C nothing unraisable is printed: objects
      it left half built fail in their ``__del__`` (llvmlite's), which is no error of the command.
    - Outputs are renamed into place under :meth:`committing`: a Ctrl-C that came before is raised
      instead, and the old file stays; one during the rename is raised after it (the file is
      complete), or after the command's last output ignored: the work is done, the command
      completes normally. Once the command's work has ended, Ctrl-C is ignored too.
    - When main() is the program (no argv: the console script, ``python -m avgpool``), SIGINT stays
      ignored after it returns: Python puts SIGINT's default action back before its teardown
      (0.1 to 0.2 s once numba has run), where a Ctrl-C would kill the process (exit status -2).

    Only the main thread handles Ctrl-C, and only over Python's own handler: not when SIGINT was
    ignored by whoever started the process (a background job), nor over an application's handler.
    """

    def __init__(self) -> None:
        self.owner: int | None = None  # the thread whose main() handles Ctrl-C
        self.phase = _DONE
        self.requested = False  # a Ctrl-C came while the command could still be stopped
        self.signum = signal.SIGINT  # the signal that requested it: SIGINT, or SIGTERM in the program
        self.again = False  # its KeyboardInterrupt was swallowed: raise it once more
        self.in_hook = False
        self.unraisablehook: Any = None
        self.timers: list[threading.Timer] = []

    def __call__(self, signum: int, frame: Any) -> None:
        if self.phase == _DONE or (self.requested and not self.again):
            return
        if self.in_hook:  # raised here, it would be swallowed once more
            self._later()
            return
        if not self.requested:
            self.signum = signum
        self.requested, self.again = True, False
        if self.phase == _RUNNING:
            raise KeyboardInterrupt

    def _unraisable(self, unraisable: Any) -> None:
        if not self.requested:
            self.unraisablehook(unraisable)
        elif isinstance(unraisable.exc_value, KeyboardInterrupt) and self.phase != _DONE:
            self.again, self.in_hook = True, True
            try:
                self._later()
            finally:
                self.in_hook = False

    def _later(self) -> None:
        """SIGINT once more in a millisecond, from another thread: raised now, or sent now, it
        would be raised in the hook or in the callback that has just swallowed one."""
        timer = threading.Timer(0.001, self._interrupt)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def _interrupt(self) -> None:
        if self.phase != _DONE:
            _thread.interrupt_main(signal.SIGINT)

    def _mine(self) -> bool:
        return self.owner is not None and self.owner == threading.get_ident()

    @contextlib.contextmanager
    def handling(self, *, program: bool) -> Iterator[bool]:
        """Handle Ctrl-C while the block runs, if this thread can; yields whether it does. The
        program (not a caller's process) takes SIGTERM as Ctrl-C too, also as a background job,
        whose SIGINT the shell ignores: a job scheduler's cancel, ``kill`` or ``timeout`` then
        removes the temporary output as well, where the default action killed the process and
        left it beside the old file (tests/test_robustness_files.py)."""
        takes_sigint = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        takes_sigterm = program and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        if (
            self.owner is not None
            or threading.current_thread() is not threading.main_thread()
            or not (takes_sigint or takes_sigterm)
        ):
            yield False
            return
        self.owner, self.phase, self.requested, self.again = threading.get_ident(), _BEFORE, False, False
        self.signum = signal.SIGINT
        self.unraisablehook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        if takes_sigint:
            signal.signal(signal.SIGINT, self)
        if takes_sigterm:
            signal.signal(signal.SIGTERM, self)
        try:
            yield True
        finally:
            self.phase = _DONE  # first: an interrupt from here on is ignored
            if takes_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for timer in self.timers:  # none may interrupt the caller once main() has returned
                timer.cancel()
                timer.join()
            self.timers.clear()
            if takes_sigint:
                set_sigint(signal.SIG_IGN if program else signal.default_int_handler)
            if not (program and self.requested):  # the program's teardown stays quiet after a Ctrl-C
                sys.unraisablehook = self.unraisablehook
            self.owner = None

    def start(self) -> None:
        """The command runs: a Ctrl-C raises KeyboardInterrupt (now, if one came before)."""
        self.phase = _RUNNING
        self.check()

    def stop(self) -> None:
        """The command's work has ended: a Ctrl-C is too late to stop any of it."""
        self.phase = _DONE

    def check(self) -> None:
        """Raise the KeyboardInterrupt of a Ctrl-C that has not got through."""
        if self.requested and self.phase == _RUNNING and self._mine():
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def committing(self, *, last: bool) -> Iterator[None]:
        """Around the rename of a complete output into place (``commit`` of :func:`files.replacing`);
        ``last``: the command's last work, after which a Ctrl-C is ignored."""
        if self.phase != _RUNNING or not self._mine():
            yield
            return
        self.phase = _COMMITTING
        try:
            if self.requested:  # it came before the output was complete: the old one stays
                raise KeyboardInterrupt
            yield
        except BaseException:
            self.phase = _RUNNING
            raise
        self.phase = _DONE if last else _RUNNING
        if last:  # a Ctrl-C during the final rename: the output is in place, the command has done its work
            self.requested = False
        elif self.requested:  # during the rename: this output is in place, the rest is not
            raise KeyboardInterrupt


#: The one handler of this process.
INTERRUPTS = Interrupts()
