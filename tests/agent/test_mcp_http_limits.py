"""The limits of ``kb mcp --http`` (kbcli.serve.limits) on a real uvicorn server in a
thread,
over real loopback sockets, with both of uvicorn's HTTP parsers (httptools and h11) and short
timeouts. The 2,000-socket run against the real ``kb mcp --http`` is in agent/test_mcp.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from extras import need

need("mcp")  # uvicorn comes with the mcp extra

from kbcli.errors import InvalidOptionError, ListenError  # noqa: E402
from kbcli.serve.limits import Limits, bind, connection_cap, make_server  # noqa: E402
from kbcli.serve.tokens import BearerTokens, Identity  # noqa: E402

TOKEN = "a-valid-token-0123456789"
SHORT = Limits(request_timeout=0.5, keep_alive=1, max_connections=6, max_header_bytes=4096)
GET = b"GET /x HTTP/1.1\r\nHost: t\r\n"
AUTHORIZED = GET + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
WAIT = 20  # seconds a test waits at most for what must happen within about a second


class App:
    """An ASGI app that answers ``ok``; with ``hold`` set, each request first waits for it."""

    def __init__(self) -> None:
        self.hold: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.gap = 0.0  # seconds between the response's head and its body

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            self.loop = asyncio.get_running_loop()
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        message = await receive()
        while message.get("more_body"):
            message = await receive()
        if message["type"] == "http.disconnect":
            return
        if self.hold is not None:
            await self.hold.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.gap:
            await asyncio.sleep(self.gap)
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=["httptools", "h11"])
def server(request):
    """``(port, app, uvicorn server)`` under :data:`SHORT`, behind the bearer-token check."""
    need(request.param)
    app = App()
    guarded = BearerTokens(app, {TOKEN: Identity("test", None)})
    started = threading.Event()
    uvicorn_server = make_server(guarded, SHORT, on_start=started.set, http=request.param)
    sockets = bind("127.0.0.1", 0)
    port = sockets[0].getsockname()[1]
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": sockets})
    thread.start()
    assert started.wait(WAIT)
    yield port, app, uvicorn_server
    if app.hold is not None:
        app.loop.call_soon_threadsafe(app.hold.set)
    uvicorn_server.should_exit = True
    thread.join(WAIT)
    for sock in sockets:
        sock.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return sock


def _closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails after WAIT s)."""
    received = b""
    sock.settimeout(WAIT)
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _response(sock: socket.socket) -> bytes:
    """One whole response: its head, then its body by Content-Length or chunk by chunk (a
    response may come in several segments: the chunked body after its head)."""
    sock.settimeout(WAIT)
    received = b""

    def more() -> bool:
        nonlocal received
        chunk = sock.recv(65536)
        received += chunk
        return bool(chunk)

    while b"\r\n\r\n" not in received:
        if not more():
            return received
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    if length is not None or not re.search(rb"(?im)^transfer-encoding:\s*chunked\s*$", head):
        while len(received) - len(head) - 4 < int(length[1] if length else 0):
            if not more():
                break
        return received
    at = len(head) + 4  # the next chunk's size line
    while True:
        while b"\r\n" not in received[at:]:
            if not more():
                return received
        line, _, _ = received[at:].partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        end = at + len(line) + 2 + size + 2  # the size line, the data and its CRLF
        while len(received) < end:
            if not more():
                return received
        if size == 0:
            return received
        at = end


def _request(port: int, raw: bytes = AUTHORIZED) -> bytes:
    with _connect(port) as sock:
        sock.sendall(raw)
        return _response(sock)


def test_a_socket_that_sends_nothing_is_closed(server):
    port, _, _ = server
    with _connect(port) as silent:
        assert _closed_by_server(silent) == b""
    assert _request(port).startswith(b"HTTP/1.1 200 ")


def test_a_header_trickled_byte_by_byte_is_closed_before_it_ends(server):
    """Bytes keep coming, which resets uvicorn's keep-alive timer; the request deadline holds."""
    port, _, _ = server
    with _connect(port) as slow:
        closed = False
        for byte in AUTHORIZED:  # at 0.05 s a byte this would take about 4 s
            try:
                slow.send(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)
        assert closed or _closed_by_server(slow) == b""
    assert _request(port).startswith(b"HTTP/1.1 200 ")


def test_after_a_response_the_next_request_has_the_same_deadline(server):
    port, app, _ = server
    app.gap = 0.1  # the body in a later segment than the head, as under load
    with _connect(port) as sock:
        sock.sendall(AUTHORIZED)
        first = _response(sock)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /x HTT")  # then nothing more: closed, keep-alive reset or not
        assert _closed_by_server(sock) == b""


def test_headers_too_large_are_closed(server):
    port, _, _ = server
    with _connect(port) as sock:
        sock.sendall(GET + b"X-Padding: " + b"a" * 5000 + b"\r\n")
        received = _closed_by_server(sock)
    assert received == b"" or received.startswith(b"HTTP/1.1 4")  # h11 answers 400 itself


def test_headers_without_a_token_and_without_their_body_get_401_and_close(server):
    port, _, _ = server
    with _connect(port) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
        received = _closed_by_server(sock)
    assert received.startswith(b"HTTP/1.1 401 ") and b"connection: close" in received.lower()


def test_a_body_that_never_comes_is_closed_too(server):
    port, _, _ = server
    with _connect(port) as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
            + b"only part of it"
        )
        assert _closed_by_server(sock) == b""


def test_at_the_bound_the_longest_waiting_connection_makes_room(server):
    """Six connections at most: a seventh, which sends its request at once, is answered, and
    the first of the silent ones is the one closed for it."""
    port, _, uvicorn_server = server
    silent = [_connect(port) for _ in range(6)]
    try:
        time.sleep(0.1)  # let the server take them in
        assert _request(port).startswith(b"HTTP/1.1 200 ")
        silent[0].settimeout(WAIT)
        assert _closed_by_server(silent[0]) == b""
        assert uvicorn_server.guard.cap == 6
    finally:
        for sock in silent:
            sock.close()


def test_connections_being_answered_are_never_closed_for_room(server):
    """All six connections wait on the app: a seventh is refused with 503 and Retry-After, and
    the six are answered once the app goes on."""
    port, app, _ = server
    app.hold = asyncio.Event()
    busy = [_connect(port) for _ in range(6)]
    try:
        for sock in busy:
            sock.sendall(AUTHORIZED)
        time.sleep(0.3)
        with _connect(port) as late:
            refused = _closed_by_server(late)
        assert refused.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in refused
        app.loop.call_soon_threadsafe(app.hold.set)
        for sock in busy:
            sock.settimeout(WAIT)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in busy:
            sock.close()


def test_the_bound_is_a_third_of_the_open_file_limit():
    assert connection_cap(Limits(max_connections=1000), 65536) == 1000
    assert connection_cap(Limits(max_connections=1000), 1024) == (1024 - 256) // 3
    assert connection_cap(Limits(), 100) == 1


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_NOFILE on Windows")
def test_the_soft_open_file_limit_is_raised_toward_the_hard_one():
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard open-file limit is {hard}: nothing to raise toward")
    code = (
        "import resource; from kbcli.serve.limits import raise_open_files; "
        "print(raise_open_files(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        preexec_fn=low,
        check=True,
        env={**os.environ, "PYTHONPATH": src},
    ).stdout.split()
    expected = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    assert out == [str(expected), str(expected)]


def test_bind_errors_name_the_address_and_the_fix():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(ListenError) as busy:
            bind("127.0.0.1", port)
        assert str(busy.value) == (
            f"kb mcp cannot listen on 127.0.0.1:{port}: the port is already in use (another "
            "kb mcp, or another server): stop it, or give another port with --http "
            "127.0.0.1:PORT"
        )
        assert busy.value.exit_code == 4
    finally:
        taken.close()
    with pytest.raises(ListenError, match="is not an address of this machine"):
        bind("192.0.2.1", port)  # TEST-NET-1: never assigned to a machine
    with pytest.raises(InvalidOptionError, match="cannot resolve 'no-such-host.invalid'"):
        bind("no-such-host.invalid", port)


NO_DESCRIPTORS_SERVER = """
import logging, os, resource, signal, sys, threading
sys.modules["uvloop"] = None  # asyncio's own loop: the one that logged tracebacks
from kbcli.serve.limits import Limits, bind, make_server

logging.basicConfig(level=logging.WARNING, format="%(message)s")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


started = threading.Event()
server = make_server(app, Limits(max_connections=50), on_start=started.set, http="h11")
sockets = bind("127.0.0.1", 0)
threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True).start()
started.wait(30)
taken = []  # every descriptor but two: accept() soon finds none free
while True:
    try:
        taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
for fd in taken[-2:]:
    os.close(fd)
print(sockets[0].getsockname()[1], flush=True)
sys.stdin.readline()  # until the test has connected
server.should_exit = True
"""


def test_an_accept_with_no_descriptor_free_is_counted_not_a_traceback(tmp_path):
    """asyncio's loop, no descriptor left: accept() fails with EMFILE. That is one report line
    naming the limit and the fix (ulimit -n), not a traceback per failure."""
    need("h11")
    src = str(Path(__file__).resolve().parents[2] / "src")
    process = subprocess.Popen(
        [sys.executable, "-c", NO_DESCRIPTORS_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": src},
    )
    try:
        port = int(process.stdout.readline())
        clients = [_connect(port) for _ in range(10)]
        time.sleep(1.5)  # accept() failed, asyncio waits 1 s and fails again
        for sock in clients:
            sock.close()
        _, err = process.communicate("\n", timeout=WAIT)
    finally:
        process.kill()
    assert "Traceback" not in err and "out of system resource" not in err, err
    assert "kb mcp: the open-file limit (" in err and "(raise it: ulimit -n)" in err, err
