"""Run a parser in a child process with a deadline and a memory ceiling.

Why a process and not a thread: a thread stuck inside pypdf (a malicious PDF can make its
parser loop or allocate without end) can be neither interrupted nor killed, so it would keep
burning CPU and memory after we gave up on it. A child process is killed at the deadline and
its memory is capped with ``RLIMIT_AS`` (where the OS has it).

Why not :mod:`multiprocessing`: its ``spawn`` and ``forkserver`` start methods import the
parent's ``__main__`` again in the child, so a user's script without an
``if __name__ == "__main__":`` guard ran its top level twice (and failed). The child here is a
plain ``python -c`` that imports only :mod:`kbcli` and the parser libraries, whatever the parent
is: a script, ``python -c``, a script read from stdin, a notebook. One child serves a process's
files one after another (no start-up per file), is started at the first file that needs it,
killed at a deadline, a memory overrun or a crash (the next file gets a new one), replaced
when it has grown large, and exits when its parent goes. With ``timeout=None`` the parser runs
in-process, unbounded; so does a function defined in ``__main__``, which a child cannot import
without running the user's script.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any, TypeVar

from kbcli.errors import LoaderError
from kbcli.ingest.files import FileChanged

T = TypeVar("T")


class ParseTimeout(LoaderError):
    """A bounded call ran past its deadline and was stopped (its message names the limit)."""


# Address-space budget for the child on top of what it already maps: generous for real files,
# fatal for decompression bombs.
MEMORY_BUDGET_BYTES = 2 << 30
MEMORY_PER_FILE_BYTE = 20
# A child that maps more than this after a file is replaced, so one huge file's heap does not
# stay with every later one.
RECYCLE_MAPPED_BYTES = 1 << 30
_PRELOAD = ("pypdf", "docx", "bs4", "kbcli.ingest.loaders.office", "kbcli.ingest.loaders.html")
_HEADER = struct.Struct("<Q")

# The child's whole program: take the parent's import path from the first message, then serve.
# Nothing of the parent's __main__ is imported.
# (Unbuffered reads: a buffered one could swallow the start of the first request.)
_BOOTSTRAP = (
    "import os, pickle, struct, sys\n"
    "def read(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        part = os.read(0, n - len(data))\n"
    "        if not part:\n"
    "            sys.exit(0)\n"
    "        data += part\n"
    "    return data\n"
    "sys.path[:] = pickle.loads(read(struct.unpack('<Q', read(8))[0]))\n"
    "from kbcli.ingest.loaders.bounded import serve\n"
    "serve()\n"
)


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    parts = []
    while size:
        part = stream.read(size)
        if not part:
            raise EOFError
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _receive(stream: IO[bytes]) -> Any:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    return pickle.loads(_read_exactly(stream, size))


# --- the child ---------------------------------------------------------------------------------


def _mapped_bytes() -> int | None:
    try:
        import resource

        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError, ValueError):
        return None


_resident = 0  # bytes the child keeps mapped on purpose (a loaded OCR model): not growth


def keep_resident(load: Callable[[], T], extra: int = 0) -> T:
    """In the child: ``load()``, for something kept for every later file (an OCR model). What
    it maps, plus ``extra`` bytes (a working arena it keeps), is not counted as growth toward
    :data:`RECYCLE_MAPPED_BYTES`."""
    global _resident
    before = _mapped_bytes()
    loaded = load()
    after = _mapped_bytes()
    if before is not None and after is not None:
        _resident += max(0, after - before) + extra
    return loaded


def _limit_memory(budget: int | None) -> None:
    """Cap the address space at what is mapped now plus ``budget`` (None: lift the cap)."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = hard
        if budget is not None:
            mapped = _mapped_bytes()
            if mapped is None:
                return  # no /proc (macOS): the deadline still applies
            soft = mapped + budget if hard == resource.RLIM_INFINITY else min(hard, mapped + budget)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (ImportError, OSError, ValueError):
        pass  # no RLIMIT_AS (Windows): the deadline still applies


def _watch_parent(parent: int) -> None:
    """Exit as soon as the parent is gone, even in the middle of a parse that never ends."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def serve() -> None:
    """The child's loop: one request ``(func, args, budget)`` at a time on stdin, one reply
    ``(status, payload)`` on the original stdout. Only :data:`_BOOTSTRAP` calls this."""
    import signal

    # The protocol keeps the pipes; whatever a parser prints goes to stderr, never into a
    # command's JSON output, and nothing can read the requests by accident.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    # Ctrl-C reaches the whole process group: the parent decides what an interrupt stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    for name in _PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass  # an extra that is not installed: the loader says so in the parent
    while True:
        try:
            func, args, budget = _receive(requests)
        except EOFError:
            return
        _limit_memory(budget)
        try:
            result: tuple[str, Any] = ("ok", func(*args))
        except FileChanged as exc:
            result = ("changed", str(exc))
        except LoaderError as exc:
            result = ("error", str(exc))
        except MemoryError:
            result = ("memory", "")
        except BaseException:  # a bug: hand the traceback to the parent, which raises it
            result = ("crash", traceback.format_exc())
        _limit_memory(None)
        mapped = _mapped_bytes()
        if mapped is not None:
            mapped -= _resident
        try:
            _send(replies, (*result, mapped))
        except MemoryError:
            _send(replies, ("memory", "", mapped))
        except (pickle.PicklingError, TypeError, AttributeError):
            _send(replies, ("crash", traceback.format_exc(), mapped))


# --- the parent --------------------------------------------------------------------------------


class ParserProcess:
    """One child process running parsers on request (see the module docstring)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.owner = os.getpid()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.requests: IO[bytes] = self.proc.stdin
        self.replies: IO[bytes] = self.proc.stdout
        _send(self.requests, list(sys.path))

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def call(
        self, func: Callable[..., Any], args: tuple[Any, ...], budget: int, timeout: float
    ) -> Any:
        """``(status, payload, mapped)`` from the child; TimeoutError past ``timeout`` seconds,
        EOFError when the child died."""
        try:
            _send(self.requests, (func, args, budget))
        except (BrokenPipeError, OSError):
            raise EOFError from None
        ready, _, _ = select.select([self.replies], [], [], timeout)
        if not ready:
            raise TimeoutError
        return _receive(self.replies)

    def stop(self, *, kill: bool) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of the parent: the child belongs to the original
        try:
            if kill:
                self.proc.kill()
            self.requests.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.replies.close()

    def exit_code(self) -> int | None:
        try:
            return self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return None


_lock = threading.Lock()
_child: ParserProcess | None = None


def _take_child() -> ParserProcess:
    global _child
    if _child is None or not _child.alive():
        if _child is not None:
            _child.stop(kill=True)
        _child = ParserProcess()
    return _child


def _drop_child(*, kill: bool) -> None:
    global _child
    if _child is not None:
        _child.stop(kill=kill)
        _child = None


def shutdown() -> None:
    """Stop the parser process (it is started again when a file needs it)."""
    with _lock:
        _drop_child(kill=False)


atexit.register(shutdown)


def _runs_in_child(func: Callable[..., Any]) -> bool:
    """A function the child can import by name (not one of the user's ``__main__``)."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", "")
    return module not in (None, "__main__", "__mp_main__") and "<locals>" not in qualname


def run_bounded(
    func: Callable[..., T],
    args: tuple[Any, ...],
    *,
    timeout: float | None,
    label: str,
    file_size: int = 0,
) -> T:
    """Return ``func(*args)``, computed in the parser process, killed after ``timeout`` seconds.

    ``func`` must be importable by name from a module (one defined in ``__main__`` runs in this
    process, unbounded) and return picklable data. Raises LoaderError naming ``label`` on
    timeout (:class:`ParseTimeout`), memory exhaustion or a child that died; LoaderErrors
    raised by ``func`` come back with their message; any other exception becomes a
    RuntimeError carrying the child's traceback (a bug, not a bad file).
    """
    if timeout is None or not _runs_in_child(func):
        return func(*args)
    budget = MEMORY_BUDGET_BYTES + MEMORY_PER_FILE_BYTE * file_size
    with _lock:
        child = _take_child()
        done = False
        try:
            status, payload, mapped = child.call(func, args, budget, timeout)
            done = True
        except TimeoutError:
            raise ParseTimeout(
                f"{label}: parsing took longer than {timeout:g} s and was stopped: "
                "raise limits.file_timeout if the file is just large"
            ) from None
        except EOFError:
            code = child.exit_code()
            _drop_child(kill=True)
            raise LoaderError(
                f"{label}: the parser process died (exit code {code}); the file is probably "
                "malformed"
            ) from None
        finally:
            if not done:  # a deadline, a death or an interrupt: that child is not reused
                _drop_child(kill=True)
        if status == "memory" or (mapped or 0) > RECYCLE_MAPPED_BYTES:
            _drop_child(kill=True)
    if status == "ok":
        result: T = payload  # what func returned, unpickled from the child
        return result
    if status == "changed":
        raise FileChanged(payload)
    if status == "error":
        raise LoaderError(payload)
    if status == "memory":
        raise LoaderError(
            f"{label}: parsing needed more than {budget >> 20} MB of memory and was stopped; "
            "the file is probably malformed"
        )
    raise RuntimeError(f"{label}: the parser crashed in its worker process:\n{payload}")
