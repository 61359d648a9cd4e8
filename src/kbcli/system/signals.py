"""Termination signals handled like Ctrl-C.

cron, systemd, ``timeout`` and a closed terminal stop a process with SIGTERM or SIGHUP, not
SIGINT. Inside :func:`interrupt_on_termination` those raise :class:`Terminated`, a
``KeyboardInterrupt``, so code that keeps its work on Ctrl-C (``kb ingest`` writes every file
it prepared, then says what it kept) does the same for them; the process then exits with
``128 + signal number`` (143 for SIGTERM, 129 for SIGHUP), as a shell reports a process the
signal ended. A :func:`deferred` block (a commit and the count of what it wrote) holds all
three, Ctrl-C too, until it ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# (Windows has no SIGHUP)
TERMINATION = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process was (see the module docstring)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_number(stop: BaseException) -> int:
    """The signal behind an interrupt: its own for :class:`Terminated`, else SIGINT."""
    return getattr(stop, "signum", signal.SIGINT)


def exit_code(stop: BaseException) -> int:
    """What a process ended by ``stop`` exits with: 130 for Ctrl-C, 143 for SIGTERM, ..."""
    return 128 + signal_number(stop)


def signal_name(stop: BaseException) -> str:
    """``"SIGINT"``, ``"SIGTERM"`` or ``"SIGHUP"``."""
    return signal.Signals(signal_number(stop)).name


# Signals received inside the current interrupt_on_termination block, and those held back
# by a deferred() block until it ends.
_received: list[int] = []
_held: list[int] = []
_deferring = 0


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if _deferring:
        _held.append(signum)
        return
    raise _interrupt(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block, Ctrl-C, SIGTERM and SIGHUP (inside :func:`interrupt_on_termination`)
    wait: the block runs to its end and the interrupt is raised after it. For bookkeeping
    that must happen together with a commit (a write and the count of what it wrote: an
    interrupt between them would have the write redone and counted twice)."""
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        # Handlers run in the main thread only: a block elsewhere (an MCP worker's write,
        # a reader thread) must not hold the main thread's interrupt, nor raise it here.
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if not _deferring and _held:
        signum = _held[-1]
        _held.clear()
        raise _interrupt(signum)


def stop_if_terminated() -> None:
    """Raise :class:`Terminated` again when a termination signal arrived in this block but
    its exception was lost: Python discards an exception raised while a file object closes
    itself in a finalizer. Long loops call it at their safe points (between files)."""
    if _received:
        raise _interrupt(_received[-1])


@contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread
    (Ctrl-C its KeyboardInterrupt, through the same handler so that :func:`deferred` holds
    it too); the previous handlers come back afterwards. A signal the process ignores stays ignored
    (``nohup kb ingest`` must survive a closed terminal). Off the main thread (where Python
    cannot set handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    _held.clear()
    previous = {
        signum: signal.signal(signum, _raise)
        for signum in TERMINATION
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # Ctrl-C raises KeyboardInterrupt as Python's own handler does, and waits like the
        # others in a deferred() block (an embedding program's own handler is left alone).
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()


@contextmanager
def stop_between(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP only set ``stop`` (and record the signal
    in :data:`stopped_by`), so a loop that checks it between its units of work finishes the
    one in flight, then ends (``kb watch``). Ignored signals stay ignored; off the main thread
    the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _note(signum: int, frame: FrameType | None) -> None:
        stopped_by.append(signum)
        stop.set()

    stopped_by.clear()
    previous = {
        signum: signal.signal(signum, _note)
        for signum in (signal.SIGINT, *TERMINATION)
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# The signals received inside the current stop_between block.
stopped_by: list[int] = []
