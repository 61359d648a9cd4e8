"""Run a parser in a child process with a deadline and a memory ceiling.

Why a process and not a thread: a thread stuck inside pypdf (a malicious PDF can make its
parser loop or allocate without end) can be neither interrupted nor killed, so it would keep
burning CPU and memory after we gave up on it. A child process is killed at the deadline and
its memory is capped with ``RLIMIT_AS`` (where the OS has it). The price is a fork per file:
we use the ``forkserver`` start method with pypdf, python-docx and bs4 preloaded, which costs tens
of milliseconds per file (``spawn`` on platforms without forkserver costs more). With
``timeout=None`` the parser runs in-process, unbounded.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import LoaderError

T = TypeVar("T")

# Address-space budget for the child on top of what it already maps: generous for real files,
# fatal for decompression bombs.
MEMORY_BUDGET_BYTES = 2 << 30
MEMORY_PER_FILE_BYTE = 20
_PRELOAD = ["pypdf", "docx", "bs4", "kbcli.ingest.office", "kbcli.ingest.html"]


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _limit_memory(budget: int) -> None:
    try:
        import resource

        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + budget, resource.RLIM_INFINITY))
    except (ImportError, OSError, ValueError):
        pass  # no /proc or no RLIMIT_AS (macOS, Windows): the deadline still applies


def _worker(conn: Any, func: Callable[..., Any], args: tuple, budget: int | None) -> None:
    try:
        if budget:
            _limit_memory(budget)
        result = ("ok", func(*args))
    except LoaderError as exc:
        result = ("error", str(exc))
    except MemoryError:
        result = ("memory", "")
    except BaseException:  # a bug: hand the traceback to the parent, which raises it
        result = ("crash", traceback.format_exc())
    try:
        conn.send(result)
    finally:
        conn.close()


def run_bounded(
    func: Callable[..., T],
    args: tuple,
    *,
    timeout: float | None,
    label: str,
    file_size: int = 0,
) -> T:
    """Return ``func(*args)``, computed in a child process killed after ``timeout`` seconds.

    ``func`` must be importable by name and return picklable data. Raises LoaderError naming
    ``label`` on timeout, memory exhaustion or a child that died; LoaderErrors raised by
    ``func`` come back with their message; any other exception becomes a RuntimeError carrying
    the child's traceback (a bug, not a bad file).
    """
    if timeout is None:
        return func(*args)
    budget = MEMORY_BUDGET_BYTES + MEMORY_PER_FILE_BYTE * file_size
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(sender, func, args, budget), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise LoaderError(
                f"{label}: parsing took longer than {timeout:g} s and was stopped: "
                "raise limits.file_timeout if the file is just large"
            )
        status, payload = receiver.recv()
    except EOFError:
        proc.join(1)
        raise LoaderError(
            f"{label}: the parser process died (exit code {proc.exitcode}); the file is probably "
            "malformed"
        ) from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()
    if status == "ok":
        return payload
    if status == "error":
        raise LoaderError(payload)
    if status == "memory":
        raise LoaderError(
            f"{label}: parsing needed more than {budget >> 20} MB of memory and was stopped; "
            "the file is probably malformed"
        )
    raise RuntimeError(f"{label}: the parser crashed in its worker process:\n{payload}")
