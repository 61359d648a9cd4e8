"""MCP SDK clients of a real ``kb mcp`` (stdio subprocess or streamable HTTP with bearer
tokens), held open on their own event loop so a module's tests share one server; shared by the
MCP tests in agent/ and the scoped-statistics tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


TOKENS = {
    "acme": "acme-token-4f1c9a7e2b",
    "globex": "globex-token-83d2e61f0a",
    "admin": "admin-token-5be07c4d19",
}


def _env(home: Path) -> dict[str, str]:
    from conftest import API_KEY_VARS

    env = {k: v for k, v in os.environ.items() if k not in API_KEY_VARS and k != "KB_CONFIG"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
    )
    return env


class ClientThread:
    """An MCP client session held open on its own event loop, so tests share one server."""

    def __init__(self, connect: Any):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._ready: Future[Any] = Future()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(connect), self.loop)
        while not self._ready.done():
            if self._held.done():
                self._held.result()  # raises what went wrong
            time.sleep(0.01)
        self.client = self._ready.result()

    async def _hold(self, connect: Any) -> None:
        self._stop = asyncio.Event()
        async with connect() as client:
            self._ready.set_result(client)
            await self._stop.wait()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        result = self.run(self.client.call_tool(name, arguments))
        text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        return text, bool(result.is_error)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(Exception):
            self._held.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def _stdio_client(db: Path, home: Path, *mcp_args: str) -> ClientThread:
    """An SDK client session with ``kb --db DB mcp MCP_ARGS`` started as a subprocess."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kbcli", "--db", str(db), "mcp", *mcp_args],
        env=_env(home),
        cwd=str(home),
    )
    return ClientThread(lambda: Client(params, read_timeout_seconds=60))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_http(
    db: Path, home: Path, tokens: Path, *extra: str, hide: tuple[str, ...] = (), **popen: Any
) -> tuple[Any, int]:
    """``kb --db DB mcp --http ... EXTRA`` on a free loopback port, once it accepts
    connections: ``(process, port)``; the modules in ``hide`` cannot be imported there (as
    where they are not installed: uvicorn then takes asyncio's loop, or h11)."""
    port = _free_port()
    env = _env(home)
    if hide:
        stubs = home / "hidden-modules"
        for module in hide:
            (stubs / module).mkdir(parents=True, exist_ok=True)
            (stubs / module / "__init__.py").write_text(f"raise ImportError('{module} hidden')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(stubs), env["PYTHONPATH"]])
    process = subprocess.Popen(
        [sys.executable, "-m", "kbcli", "--db", str(db), "mcp"]
        + ["--http", f"127.0.0.1:{port}", "--tokens", str(tokens), *extra],
        env=env,
        cwd=str(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )
    _wait_for_port(process, port)
    return process, port


def _stop(process: subprocess.Popen[bytes]) -> str:
    """Terminate the server; its stderr."""
    process.terminate()
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    text: str = err.decode(errors="replace")
    return text


def _wait_for_port(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            out, err = process.communicate(timeout=5) if process.poll() is not None else ("", "")
            pytest.fail(f"kb mcp --http did not start: {err!r}")
        time.sleep(0.05)


def _http_client(url: str, token: str | None) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[Any]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        async with create_mcp_http_client(headers=headers) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, read_timeout_seconds=60) as client:
                yield client

    return connect


def _raw_post(url: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "knowledge_search", "arguments": {"query": "password"}},
        }
    ).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)
