"""The limits that keep an HTTP surface of kb (``kb mcp --http``, ``kb ui``) answering its
token holders while sockets without a token hang on it: a deadline for each request, a bound on
open connections, room made by closing the connection that has waited longest, and the
listening socket bound before the server says it is serving.

uvicorn alone has no header-read timeout: its keep-alive timer starts after a first response
and any byte received cancels it, so a socket that sends nothing, or one header byte a second,
holds a connection and a file descriptor for as long as it likes. At the open-file limit
``accept()`` fails and every client waits. Here (:class:`Limits`):

* a request must arrive whole (request line, headers and body) within ``request_timeout``
  seconds of its connection opening or of the previous response on it, else the connection is
  closed; so is one that has sent ``max_header_bytes`` without finishing its headers;
* an idle keep-alive connection is closed after ``keep_alive`` seconds (uvicorn's timer);
* at most ``max_connections`` are open, and at most a third of the open-file limit, which is
  raised toward the hard limit at start; asyncio accepts a quarter of that bound in one go
  (:func:`accept_burst`): accepted sockets take descriptors for two or three loop turns
  before the server sees them, and a closed one is freed a turn later. A connection beyond
  the bound closes the one that has waited longest for its request: a flood of slow sockets
  pushes out its own oldest members, while a client that sends its request at once is
  answered. A connection whose request is being answered is never closed for room; when every
  one is, a new connection gets ``503`` and ``Retry-After``;
* should ``accept()`` still find no descriptor free (other files the process holds, a low
  hard limit), asyncio waits a second before accepting again, the connections wait in the
  kernel's queue, and that is counted in the report line (:class:`AcceptFailures`) rather
  than logged as a traceback each time (uvloop sheds such connections itself).

uvicorn's ``limit_concurrency`` is not used: it answers ``503`` to every request once the bound
is reached, which is what a flood wants. The deadline is kept by a subclass of the HTTP protocol
uvicorn picks (httptools or h11), which both expose the request cycle it reads.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kbcli.errors import InvalidOptionError, KBError, ListenError

if TYPE_CHECKING:  # starlette comes with the mcp and ui extras, imported when serving
    from starlette.types import ASGIApp

logger = logging.getLogger("kbcli.mcp")  # the name kb mcp's log filters already use

RESERVED_FILES = 256  # descriptors kept for the database, its threads and the process itself
OPEN_FILES_TARGET = 65536  # the soft open-file limit asked for at start (at most the hard one)
LISTEN_BACKLOG = 2048  # the kernel's queue of connections not yet accepted (uvicorn's default)
REPORT_EVERY = 30.0  # seconds between log lines about connections closed by these limits
ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's context message
OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
BUSY += b"Content-Length: 0\r\n\r\n"
REASONS = {
    "slow": "sent no whole request in time",
    "headers": "sent headers that were too large",
    "room": "made room for newer connections",
    "full": "were refused with 503 (every connection busy)",
    "invalid": "sent something that is not HTTP (answered 400)",
}
INVALID = "Invalid HTTP request received."  # what uvicorn logs once per such connection


@dataclass(frozen=True)
class Limits:
    """The bounds of the HTTP server (seconds, counts, bytes); see the module docstring."""

    request_timeout: float = 10.0
    keep_alive: int = 5
    max_connections: int = 1000
    max_header_bytes: int = 64 * 1024
    shutdown_timeout: int = 5


def raise_open_files(target: int = OPEN_FILES_TARGET) -> int:
    """Raise the soft open-file limit toward ``target`` (never above the hard limit); returns
    the soft limit now in force."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to raise
        return target
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft == resource.RLIM_INFINITY:
        return target
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # a platform cap below the hard limit: keep the soft one
            pass
    return soft


def connection_cap(limits: Limits, open_files: int) -> int:
    """How many connections may be open at once under ``open_files`` descriptors."""
    return max(1, min(limits.max_connections, (open_files - RESERVED_FILES) // 3))


def accept_burst(cap: int) -> int:
    """How many connections asyncio accepts in one loop turn under a bound of ``cap``."""
    return max(1, cap // 4)


class Connection(Protocol):
    """One HTTP connection as the guard sees it (the protocol :func:`guarded` makes)."""

    def drop(self, reason: str) -> None:
        """Close the connection now, counting it under ``reason``."""
        ...


class Guard:
    """What every connection of one server shares: the bound, the open connections, those
    waiting for their request (oldest first) and the count of connections closed, by reason,
    logged at most every :data:`REPORT_EVERY` seconds."""

    def __init__(
        self, cap: int, limits: Limits, open_files: int | None = None, name: str = "kb mcp"
    ):
        self.cap = cap
        self.name = name  # the command its log lines start with
        self.limits = limits
        self.open_files = open_files
        self.open: set[Connection] = set()
        self.waiting: OrderedDict[Connection, None] = OrderedDict()
        self.closed: Counter[str] = Counter()
        self.pauses = 0  # times accept() found no descriptor free since the last report
        self._report: asyncio.TimerHandle | None = None

    def admit(self, connection: Connection) -> bool:
        """Count a new connection in, closing the longest-waiting one when at the bound;
        False when every open connection is busy (the new one is then refused)."""
        if len(self.open) >= self.cap:
            if not self.waiting:
                self.note("full")
                return False
            oldest, _ = self.waiting.popitem(last=False)
            self.open.discard(oldest)
            oldest.drop("room")
        self.open.add(connection)
        return True

    def wait(self, connection: Connection) -> None:
        """``connection`` now waits for a request (and may be closed to make room)."""
        self.waiting[connection] = None
        self.waiting.move_to_end(connection)

    def busy(self, connection: Connection) -> None:
        """``connection`` has sent its request's headers: it is never closed for room."""
        self.waiting.pop(connection, None)

    def gone(self, connection: Connection) -> None:
        """``connection`` is closed."""
        self.open.discard(connection)
        self.waiting.pop(connection, None)

    def note(self, reason: str) -> None:
        """Count a connection closed for ``reason`` (a key of :data:`REASONS`); the first of a
        quiet spell is logged at once, the rest every :data:`REPORT_EVERY` seconds."""
        self.closed[reason] += 1
        if self._report is None:
            self._log()

    def pause(self) -> None:
        """Count an ``accept()`` that found no descriptor free (asyncio waits 1 s before
        accepting again); reported as :meth:`note` reports closed connections."""
        self.pauses += 1
        if self._report is None:
            self._log()

    def flush(self) -> None:
        """Log what is counted now (at shutdown)."""
        if self._report is not None:
            self._report.cancel()
        self._log()
        if self._report is not None:
            self._report.cancel()
            self._report = None

    def _log(self) -> None:
        if not self.closed and not self.pauses:
            self._report = None
            return
        if self.closed:
            parts = [f"{n:,} {REASONS[reason]}" for reason, n in sorted(self.closed.items())]
            self.closed.clear()
            logger.warning(
                "%s: closed HTTP connections: %s (a request must arrive within %g s; at "
                "most %d connections)",
                self.name,
                "; ".join(parts),
                self.limits.request_timeout,
                self.cap,
            )
        if self.pauses:
            limit = f"{self.open_files:,} " if self.open_files else ""
            logger.warning(
                "%s: the open-file limit (%sdescriptors) was reached %s: new connections "
                "waited 1 s in the kernel's queue each time (raise it: ulimit -n)",
                self.name,
                limit,
                "once" if self.pauses == 1 else f"{self.pauses:,} times",
            )
            self.pauses = 0
        self._report = asyncio.get_running_loop().call_later(REPORT_EVERY, self._log)


class AcceptFailures:
    """The event loop's exception handler while serving: asyncio's report of an ``accept()``
    that found no descriptor free (with a traceback, each time) becomes a count in the
    guard's report line; anything else goes to the handler there was before."""

    def __init__(
        self,
        guard: Guard,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None,
    ):
        self.guard = guard
        self.previous = previous

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            context.get("message") == ACCEPT_FAILED
            and isinstance(exc, OSError)
            and exc.errno in OUT_OF_RESOURCES
        ):
            self.guard.pause()
        elif self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


class CountInvalid(logging.Filter):
    """Turns uvicorn's warning per malformed request into a count in the guard's report, so a
    flood of garbage is a line every :data:`REPORT_EVERY` seconds, not a line per socket."""

    def __init__(self, guard: Guard):
        super().__init__()
        self.guard = guard

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != INVALID:
            return True
        self.guard.note("invalid")
        return False


def guarded(base: type, guard: Guard) -> type:
    """A subclass of uvicorn's HTTP protocol class ``base`` that keeps ``guard``'s limits."""

    class GuardedProtocol(base):  # type: ignore[misc, unused-ignore]  # uvicorn's class, known at run time
        _deadline: asyncio.TimerHandle | None = None
        _armed: object = None  # the request cycle when the deadline was set
        _received = 0

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if not guard.admit(self):
                transport.write(BUSY)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._deadline is None:
                return
            cycle = self.cycle
            if cycle is self._armed:  # the next request's headers are not all here yet
                self._received += len(data)
                if self._received > guard.limits.max_header_bytes:
                    self.drop("headers")
                return
            guard.busy(self)
            if not cycle.more_body or cycle.response_complete:
                self._disarm()  # the request is in: what the app takes is not limited here

        def on_response_complete(self) -> None:
            super().on_response_complete()
            closing = self.transport is None or self.transport.is_closing()
            if not closing and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # no pipelined request started: wait for the next one

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            guard.gone(self)
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._armed = self.cycle
            self._received = 0
            self._deadline = self.loop.call_later(guard.limits.request_timeout, self.drop, "slow")
            guard.wait(self)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def drop(self, reason: str) -> None:
            """Close the connection now (its request is late or too large, or room is
            needed)."""
            self._disarm()
            guard.gone(self)
            guard.note(reason)
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()

    return GuardedProtocol


def address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(host: str, port: int, name: str = "kb mcp") -> list[socket.socket]:
    """Sockets bound to every address of ``host`` at ``port`` (not yet listening).

    Raises :class:`ListenError` naming the address and the fix when the port is taken, needs
    privileges or the address is not this machine's, and :class:`InvalidOptionError` for a
    host name that does not resolve; ``name`` (the command) starts the message.
    """
    where = address(host, port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidOptionError(
            f"--http {where}: cannot resolve {host!r} ({exc.strerror}): give an address such "
            "as 127.0.0.1"
        ) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ListenError(_cannot_listen(host, port, exc, name)) from None
    return sockets


def _cannot_listen(host: str, port: int, exc: OSError, name: str) -> str:
    where = address(host, port)
    if exc.errno == errno.EADDRINUSE:
        other = where.rsplit(":", 1)[0] + ":PORT"
        why = (
            f"the port is already in use (another {name}, or another server): stop it, or give "
            f"another port with --http {other}"
        )
    elif exc.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need privileges): use a port from 1024 up"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is not an address of this machine: use 127.0.0.1 or one of its own"
    else:
        why = f"{exc.strerror or exc}"
    return f"{name} cannot listen on {where}: {why}"


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    limits: Limits = Limits(),
    *,
    on_start: Callable[[], None] | None = None,
    http: str = "auto",
    name: str = "kb mcp",
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve the ASGI ``app`` on ``host:port`` under ``limits`` until interrupted; the socket is
    bound first (:func:`bind`; or ``sockets`` already bound, e.g. to learn a free port's
    number), ``on_start`` runs once the server accepts connections. ``name`` (the command)
    starts its messages."""
    sockets = sockets if sockets is not None else bind(host, port, name)
    server = make_server(app, limits, on_start=on_start, http=http, name=name)
    try:
        server.run(sockets=sockets)
    except SystemExit as exc:  # uvicorn's exit when the app's start-up failed
        if exc.code in (0, None):
            raise
        raise KBError(f"{name}: the HTTP server failed to start (see the lines above)") from None
    finally:
        for sock in sockets:
            sock.close()


class GuardedServer(Protocol):
    """What :func:`make_server` returns: a ``uvicorn.Server`` (its class is made when
    uvicorn is imported) with the :class:`Guard` of its connections."""

    guard: Guard
    should_exit: bool

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve on ``sockets`` until :attr:`should_exit` is set or the process is
        interrupted."""
        ...


def make_server(
    app: ASGIApp,
    limits: Limits = Limits(),
    *,
    on_start: Callable[[], None] | None = None,
    http: str = "auto",
    name: str = "kb mcp",
) -> GuardedServer:
    """A ``uvicorn.Server`` for ``app`` with ``limits`` (``http``: uvicorn's protocol name);
    run it with ``run(sockets=bind(host, port))``. Raises the open-file limit."""
    import uvicorn
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    open_files = raise_open_files()
    cap = connection_cap(limits, open_files)
    guard = Guard(cap, limits, open_files, name)
    protocol = guarded(import_from_string(HTTP_PROTOCOLS[http]), guard)
    config = uvicorn.Config(
        app,
        http=protocol,
        ws="none",  # neither streamable HTTP nor kb ui has websockets
        lifespan="on",
        log_level="warning",
        access_log=False,  # a request line may carry a token (kb ui's ?token=): never logged
        backlog=accept_burst(cap),  # how many connections asyncio accepts in one go
        timeout_keep_alive=limits.keep_alive,
        timeout_graceful_shutdown=limits.shutdown_timeout,
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )

    count_invalid = CountInvalid(guard)

    class Server(uvicorn.Server):
        guard: Guard

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            logging.getLogger("uvicorn.error").addFilter(count_invalid)  # configured by now
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(AcceptFailures(guard, loop.get_exception_handler()))
            await super().startup(sockets=sockets)
            for sock in sockets or ():
                # asyncio listened with the accept burst (``backlog``); the kernel's queue of
                # connections not yet accepted may be longer, so a flood does not drop SYNs
                sock.listen(LISTEN_BACKLOG)
            if self.started and on_start is not None:
                on_start()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets=sockets)
            logging.getLogger("uvicorn.error").removeFilter(count_invalid)
            guard.flush()

    server = Server(config)
    server.guard = guard
    return server
