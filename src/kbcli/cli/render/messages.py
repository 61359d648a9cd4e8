"""Messages on stderr, results and JSON on stdout, and the Rich console the tables draw on."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console


def reader_gone(stream: IO[Any] | None = None) -> bool:
    """Whether the reader of ``stream`` (stdout by default), a pipe or a socket, has gone:
    ``kb list | head -1`` once head has exited. A ``BrokenPipeError`` from anywhere else (a
    socket to a provider) is not that."""
    stream = sys.stdout if stream is None else stream
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # not a descriptor (a test's capture)
        return False
    import select

    if not hasattr(select, "poll"):  # Windows: a broken pipe there is the console's own
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def silence(stream: IO[Any]) -> None:
    """Point ``stream``'s descriptor at the null device, so that what is still buffered and
    whatever is written later go nowhere without an error, even at the interpreter's exit
    (the Python documentation's recipe for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def settle_stdout() -> None:
    """Flush stdout; if its reader has gone, send the rest to the null device quietly."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        if not reader_gone():
            raise
        silence(sys.stdout)


@contextmanager
def diagnostics() -> Iterator[None]:
    """Around a write to stderr: if its reader has gone (``kb ingest 2>&1 | head -3``), later
    messages go nowhere and the command carries on; its results still go to stdout."""
    try:
        yield
    except BrokenPipeError:
        if not reader_gone(sys.stderr):
            raise
        silence(sys.stderr)


def error(message: str) -> None:
    """One ``Error: ...`` line on stderr."""
    with diagnostics():
        typer.secho("Error: ", fg="red", bold=True, err=True, nl=False)
        typer.echo(message, err=True)


def warning(message: str) -> None:
    """One ``Warning: ...`` line on stderr."""
    with diagnostics():
        typer.secho("Warning: ", fg="yellow", err=True, nl=False)
        typer.echo(message, err=True)


def message(text: str) -> None:
    """An informational line on stderr (notes, "nothing found")."""
    with diagnostics():
        typer.echo(text, err=True)


def result(text: str) -> None:
    """A plain result line on stdout."""
    typer.echo(text)


def print_json(data: Any, *, one_line: bool = False) -> None:
    """``data`` as JSON on stdout (the only thing ``--json`` writes there); ``one_line`` for
    logs that take one line per run."""
    indent = None if one_line else 2
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=indent, default=str) + "\n")
    sys.stdout.flush()


def print_jsonl(items: Sequence[Any]) -> None:
    """One JSON object per line on stdout."""
    for item in items:
        sys.stdout.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def rich_console(stderr: bool = False) -> Console:
    """A Rich console on stdout (or stderr) whose closed pipe raises ``BrokenPipeError``, as
    every other write does, rather than Rich's own ``SystemExit(1)``."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return PipeConsole(stderr=stderr, highlight=False, soft_wrap=False)


def stderr_is_terminal() -> bool:
    """True when stderr is an interactive terminal (progress bars are drawn only then)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def plural(n: int) -> str:
    return "" if n == 1 else "s"
