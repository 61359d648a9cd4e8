"""``kb ui``'s HTTP server: the page, its assets and its JSON API (:mod:`kbcli.ui.api`) over one
knowledge base opened once, read-only, behind a token, a Host check and an Origin check.

Every request is checked before any route sees it (:class:`Gate`):

* its ``Host`` must name the server (the bound ``host:port``, and on loopback
  ``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT``), else ``421``: a page on another
  site whose name was rebound to this address (DNS rebinding) is not answered;
* an ``Origin`` header, when sent, must be the server's own origin, else ``403``;
* a token, ``?token=T`` in the URL or ``Authorization: Bearer T``: none ``401``, unknown
  ``403``; never a redirect. The token's :class:`~kbcli.serve.tokens.Identity` gives the scope
  every answer is made in (a filter from the server's token file, never from the request).

Every answer carries a strict Content-Security-Policy (only this server's scripts, styles and
fetches; no frames, forms or base URL), ``nosniff``, ``no-referrer`` (the page's URL holds the
token) and ``no-store``. Searches run in a small pool of worker threads so the event loop
stays free, at most :data:`MAX_PENDING` waiting, each under a deadline. No route writes.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kbcli.agent.get import LinesCache
from kbcli.protocols import ChatModelProtocol
from kbcli.serve.tokens import IDENTITY_KEY, Identity, compare_token
from kbcli.ui import api
from kbcli.views import KnowledgeView, Reader, as_view

if TYPE_CHECKING:  # starlette is imported when kb ui serves
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")

ASSETS = Path(__file__).parent / "assets"
ASSET_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
ASSET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")
TOKEN_MARK = "{{token}}"  # in index.html: replaced by the request's token, URL- and HTML-escaped
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
]
WORKERS = 4  # searches run at once (a 2-core machine: more only queue inside SQLite)
ASK_WORKERS = 2  # questions at once, in threads of their own: a slow chat model never holds
# the threads searches run in
MAX_PENDING = 32  # requests waiting for a worker; beyond, 503
DEADLINE = 30.0  # seconds a request may take in a worker before the answer is 504
MAX_BODY = 16 * 1024  # bytes of a POST body (a question)
MAX_URL = 8 * 1024  # bytes of a request's path and query string


@dataclass(frozen=True)
class Settings:
    """What one ``kb ui`` server answers for: its addresses (``hosts``: the ``Host`` values
    accepted) and its tokens."""

    hosts: frozenset[str]
    tokens: dict[str, Identity]

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)


WILDCARDS = ("0.0.0.0", "::", "")


def host_names(host: str, port: int, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The ``Host`` header values a server bound to ``host:port`` answers: that address; for
    a loopback bind the loopback names; for a wildcard bind (``0.0.0.0``, ``::``) also this
    machine's names and addresses (:func:`machine_names`); and ``extra`` names (``NAME`` or
    ``NAME:PORT``: a reverse proxy's public name; without a port, this port)."""
    names = {_with_port(host, port)}
    if host in ("localhost", "::1") or host.startswith("127.") or host in WILDCARDS:
        names |= {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    if host in WILDCARDS:
        names |= {_with_port(name, port) for name in machine_names()}
    for name in extra:
        names.add(name if _has_port(name) else _with_port(name.strip("[]"), port))
    return frozenset(name.lower() for name in names)


def _has_port(name: str) -> bool:
    """``NAME:PORT`` or ``[ADDRESS]:PORT`` (a bare IPv6 address has colons, no port)."""
    if name.startswith("["):
        return "]:" in name and name.rsplit(":", 1)[1].isdigit()
    return name.count(":") == 1 and name.rsplit(":", 1)[1].isdigit()


def _with_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def machine_names() -> set[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to,
    and the address it reaches other machines from (what a colleague types to reach a server
    bound to every address)."""
    import socket

    names: set[str] = set()
    for name in {socket.gethostname(), socket.getfqdn()}:
        if not name:
            continue
        names.add(name)
        try:
            names |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # a UDP "connection" sends nothing: it picks the outgoing address
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                names.add(str(sock.getsockname()[0]))
        except OSError:
            pass
    return {name.split("%", 1)[0] for name in names}  # an IPv6 zone is not in a Host header


def _origin(value: bytes) -> str:
    """An ``Origin`` header as ``http://host:port`` (a browser leaves out port 80)."""
    origin = value.decode("latin-1").strip().lower()
    scheme, sep, host = origin.partition("://")
    if sep and scheme == "http" and host and not _has_port(host):
        return f"http://{_with_port(host.strip('[]'), 80)}"
    return origin


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


def _token_of(scope: Scope) -> tuple[bytes | None, str]:
    """The token a request presents and where: ``Authorization: Bearer T`` (``header``), else
    ``?token=T`` (``query``)."""
    header = _header(scope, b"authorization")
    if header is not None and header[:7].lower() == b"bearer ":
        return header[7:].strip(), "header"
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("token")
    return (values[-1].encode("utf-8", "replace") if values else None), "query"


async def _refuse(send: Send, status: int, message: str, api: bool) -> None:
    if api:
        body = json.dumps({"error": message}).encode()
        kind = b"application/json"
    else:
        body = f"{status}: {message}\n".encode()
        kind = b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Gate:
    """ASGI middleware: the Host, Origin and token checks of the module docstring, and the
    security headers on every answer."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings
        self._tokens = [(token.encode(), identity) for token, identity in settings.tokens.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        is_api = path.startswith("/api/")
        host = (_header(scope, b"host") or b"").decode("latin-1").strip().lower()
        if host and not _has_port(host):
            host = _with_port(host.strip("[]"), 80)  # a browser leaves out the default port
        if host not in self.settings.hosts:
            await _refuse(send, 421, "this server does not answer for that host name", is_api)
            return
        origin = _header(scope, b"origin")
        if origin is not None and _origin(origin) not in self.settings.origins:
            await _refuse(send, 403, "requests from another site are refused", is_api)
            return
        if len(path) + len(scope.get("query_string", b"")) > MAX_URL:
            await _refuse(send, 414, f"the URL is longer than {MAX_URL:,} bytes", is_api)
            return
        presented, where = _token_of(scope)
        if not presented:
            await _refuse(send, 401, "a token is needed: open the address kb ui printed", is_api)
            return
        identity = compare_token(presented, self._tokens)
        if identity is None:
            await _refuse(send, 403, "unknown token: open the address kb ui printed", is_api)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {key.lower() for key, _ in message.get("headers") or ()}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(
            {
                **scope,
                IDENTITY_KEY: identity,
                "kbcli.token": presented.decode("utf-8", "replace"),
                "kbcli.token_from": where,
            },
            receive,
            with_headers,
        )


class UI:
    """The routes of ``kb ui`` over ``kb`` (opened once, read-only), each caller reading the
    view of its token's scope."""

    def __init__(self, kb: Reader, *, chat: Callable[[], ChatModelProtocol] | None = None):
        self.kb = kb
        self.base = as_view(kb)
        self.chat = chat  # makes the chat model of questions (None: the index's rag.answer)
        self.lines = LinesCache()  # the lines of the last few documents read again
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="kb-ui")
        self.ask_pool = ThreadPoolExecutor(max_workers=ASK_WORKERS, thread_name_prefix="kb-ui-ask")
        self.pending = 0
        self._views: dict[str, KnowledgeView] = {}

    def view_for(self, identity: Identity) -> KnowledgeView:
        """The view ``identity`` reads (built once per distinct scope)."""
        if not identity.filter:
            return self.base
        key = repr(identity.filter)
        if key not in self._views:
            self._views[key] = self.base.scoped(identity.filter)
        return self._views[key]

    async def run(self, work: Callable[[], T], pool: ThreadPoolExecutor | None = None) -> T:
        """``work()`` in a worker thread (of ``pool``, default the searches'), under
        :data:`DEADLINE`; :class:`api.ApiError` 503 when :data:`MAX_PENDING` requests already
        wait."""
        if self.pending >= MAX_PENDING:
            raise api.ApiError(503, "kb ui is busy: try again in a moment")
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(pool or self.pool, work)
            try:
                return await asyncio.wait_for(future, DEADLINE)
            except asyncio.TimeoutError:
                raise api.ApiError(504, f"the request took over {DEADLINE:g} s") from None
        finally:
            self.pending -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.ask_pool.shutdown(wait=False, cancel_futures=True)

    # --- routes -------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        from starlette.responses import HTMLResponse

        page = (ASSETS / "index.html").read_text(encoding="utf-8")
        token = urllib.parse.quote(request.scope.get("kbcli.token", ""), safe="")
        return HTMLResponse(page.replace(TOKEN_MARK, html.escape(token, quote=True)))

    async def asset(self, request: Request) -> Response:
        from starlette.responses import PlainTextResponse, Response

        name = str(request.path_params.get("name", ""))
        kind = ASSET_TYPES.get(Path(name).suffix.lower())
        file = ASSETS / name
        if kind is None or not ASSET_NAME.match(name) or not file.is_file():
            return PlainTextResponse("404: no such asset\n", status_code=404)
        return Response(file.read_bytes(), media_type=kind)

    async def api_search(self, request: Request) -> Response:
        view = self.view_for(request.scope[IDENTITY_KEY])
        params = _params(request)
        return await self._answer(lambda: api.search(view, params), timed=True)

    async def api_document(self, request: Request) -> Response:
        view = self.view_for(request.scope[IDENTITY_KEY])
        params = _params(request)
        return await self._answer(lambda: api.document(view, params, self.lines))

    async def api_status(self, request: Request) -> Response:
        view = self.view_for(request.scope[IDENTITY_KEY])
        return await self._answer(lambda: api.status(view, self.chat))

    async def api_ask(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if request.scope.get("kbcli.token_from") != "header":
            return JSONResponse(
                {"error": "a question needs the token in the Authorization header"},
                status_code=403,
            )
        try:
            body = json.loads(await _read_body(request, MAX_BODY))
        except api.ApiError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except ValueError:
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        view = self.view_for(request.scope[IDENTITY_KEY])
        return await self._answer(lambda: api.ask(view, body, self.chat), pool=self.ask_pool)

    async def _answer(
        self,
        work: Callable[[], dict[str, Any]],
        timed: bool = False,
        pool: ThreadPoolExecutor | None = None,
    ) -> Response:
        from starlette.responses import JSONResponse

        started = time.perf_counter()
        try:
            data = await self.run(work, pool)
        except api.ApiError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        took = (time.perf_counter() - started) * 1000
        headers = {"server-timing": f"app;dur={took:.2f}"} if timed else None
        return JSONResponse(data, headers=headers)

    def app(self, settings: Settings) -> Gate:
        """The ASGI app: these routes behind :class:`Gate`."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        routes = [
            Route("/", self.index, methods=["GET", "HEAD"]),
            Route("/assets/{name}", self.asset, methods=["GET", "HEAD"]),
            Route("/api/search", self.api_search, methods=["GET"]),
            Route("/api/document", self.api_document, methods=["GET"]),
            Route("/api/status", self.api_status, methods=["GET"]),
            Route("/api/ask", self.api_ask, methods=["POST"]),
        ]
        return Gate(Starlette(routes=routes), settings)


async def _read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes (:class:`api.ApiError` 413 beyond: a
    declared length is refused before anything is read, a longer stream as it arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise api.ApiError(413, f"the body is larger than {limit:,} bytes")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise api.ApiError(413, f"the body is larger than {limit:,} bytes")
    return bytes(body)


def _params(request: Request) -> dict[str, list[str]]:
    """The query string as ``name -> values`` (the token left out)."""
    out: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        if key != "token":
            out.setdefault(key, []).append(value)
    return out
