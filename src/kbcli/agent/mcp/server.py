"""``kb mcp``: the knowledge tools over the Model Context Protocol (official ``mcp`` SDK 2.x).

Tools: ``knowledge_search``, ``knowledge_get``, ``knowledge_stats`` and ``knowledge_status``
(and, when writing is allowed, ``knowledge_add`` and ``knowledge_delete``) from
:mod:`kbcli.agent.tools` (``read``, ``status``, ``write``),
served as they are: the server lists each tool's own JSON Schema and hands the raw arguments to
the tool, which validates them (unknown keys, bounds, filters) and answers with text. A failure
is an error result with one ``Error: ...`` line, never a traceback. The SDK's low-level
``Server`` is used rather than ``MCPServer`` because the latter derives schemas from Python
signatures and silently drops unknown arguments; here the tools' contract is the schema.

Transports: stdio (default), with the scope fixed at start (``--filter``); or streamable HTTP,
where every request must carry ``Authorization: Bearer <token>``. A token file maps each token
to the scope it may read; the scope comes from the server's side, never from the request.
A missing or unknown token gets ``401`` with an empty body, on every path, and the connection
is closed. The HTTP server runs under :mod:`kbcli.agent.mcp.http_limits` (a request deadline, a
bound on
connections, the address bound before it says it serves).

Token file (YAML)::

    tokens:
      - token: "a-long-random-secret-for-acme"   # at least 16 characters
        name: acme                               # in the audit file and on its notes
        filter: {tenant: acme}                   # a kbcli filter; or ["tenant=acme"]
      - token: "another-long-random-secret"
        name: admin                              # also the writer its notes are counted for
        filter: {}                               # explicit: the whole index
        write: true                              # knowledge_add, knowledge_delete (with
                                                 # kb mcp --allow-write; default false)
        write_limits: {notes_per_minute: 10, note_bytes: 16384, total_bytes: 2000000}

Writing: ``kb mcp --allow-write`` adds ``knowledge_add`` and ``knowledge_delete`` (stdio: for
the one client; HTTP: for the tokens that say ``write: true``); without it no write tool is
listed. They write inside the caller's scope (its metadata forced onto a note, only visible
notes deleted). Each writer (a token's ``name``; ``stdio``) adds under its write limits
(:class:`~kbcli.agent.tools.write.WriteLimits`): the entry's ``write_limits``, else the server's
(``--write-limit KEY=VALUE``), else the defaults. Entries sharing a name (a token being
rotated) share the limits, and must give the same ones.

With ``--audit FILE`` every tool call is one JSON line in FILE (:mod:`kbcli.agent.mcp.audit`: who,
which tool, argument sizes, filter keys, returned ids, refusals; no document text, no query
unless ``--audit-queries``); requests refused for their token are counted and summarised, one
line a minute with the counts per peer address.

``mcp`` is imported only here, and this module only by ``kb mcp``.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbcli import __version__
from kbcli.agent.mcp.audit import AuditLog
from kbcli.agent.mcp.http_limits import Limits, address, serve
from kbcli.agent.tools.base import KnowledgeTool, ToolResult
from kbcli.agent.tools.read import knowledge_tools
from kbcli.agent.tools.status import KnowledgeStatusTool
from kbcli.agent.tools.write import NoteWriter, WriteLimits
from kbcli.errors import ConfigError, InvalidOptionError, KBError, require
from kbcli.filters.model import canonical_paths, validate_filter
from kbcli.filters.syntax import parse_filter_expressions
from kbcli.knowledge_base import ScopedKnowledgeBase
from kbcli.search.freshness import index_watermark
from kbcli.views import Source

MIN_TOKEN_CHARS = 16
MAX_NAME_CHARS = 64  # a token's name: in the audit file and on every note it writes
IDENTITY_KEY = "kbcli.identity"  # the ASGI scope entry the bearer check fills in
SERVER_NAME = "kbcli"

logger = logging.getLogger("kbcli.mcp")


@dataclass(frozen=True)
class Identity:
    """Who a bearer token belongs to and the filter it may read (None: the whole index)."""

    name: str
    filter: dict[str, Any] | None
    write: bool = False  # knowledge_add / knowledge_delete, when the server allows writing
    limits: WriteLimits | None = None  # its write_limits (None: the server's)


def _scope_from(value: Any, where: str) -> dict[str, Any] | None:
    if value is None or value == [] or value == "":
        # "filter:" with the value forgotten must not mean "everything".
        raise ConfigError(f"{where}: filter is empty (write filter: {{}} for the whole index)")
    try:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return canonical_paths(parse_filter_expressions(value))
        return canonical_paths(validate_filter(value))
    except InvalidOptionError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _limits_from(value: Any, where: str) -> WriteLimits:
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{where}: write_limits must be a mapping such as {{notes_per_minute: 10}}"
        )
    try:
        return WriteLimits().with_values(value)
    except InvalidOptionError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_tokens(path: str | os.PathLike[str]) -> dict[str, Identity]:
    """Read a token file (see the module docstring) into ``token -> Identity``.

    Raises :class:`ConfigError` for anything unclear: a short or repeated token, an entry
    without ``filter`` (the whole index must be asked for with ``filter: {}``), a bad filter,
    a name that is not short text, bad ``write_limits``, or entries of one name with different
    ones.
    """
    import yaml

    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"Cannot read token file {file}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"Token file {file} is not valid YAML: {exc}") from None
    entries = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"Token file {file} needs a 'tokens:' list of {{token, name, filter}}")
    tokens: dict[str, Identity] = {}
    for number, entry in enumerate(entries, start=1):
        where = f"{file} entry {number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected token, name and filter")
        token = entry.get("token")
        if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{where}: token must be a string of {MIN_TOKEN_CHARS}+ characters")
        token = token.strip()
        if token in tokens:
            raise ConfigError(f"{where}: the same token appears twice")
        if "filter" not in entry:
            raise ConfigError(f"{where}: no filter (use filter: {{}} for the whole index)")
        name = str(entry.get("name") or f"token {number}").strip()
        if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
            raise ConfigError(
                f"{where}: name must be printable text of 1 to {MAX_NAME_CHARS} characters"
            )
        write = entry.get("write", False)
        if not isinstance(write, bool):
            raise ConfigError(f"{where}: write must be true or false, got {write!r}")
        limits = None
        if entry.get("write_limits") is not None:
            limits = _limits_from(entry["write_limits"], where)
        for other in tokens.values():
            if other.name == name and other.limits != limits:
                raise ConfigError(
                    f"{where}: another entry named {name!r} has other write_limits (entries "
                    "of one name share them): give them the same, or other names"
                )
        tokens[token] = Identity(name, _scope_from(entry["filter"], where), write, limits)
    return tokens


# --- the server ---------------------------------------------------------------------------------


class KnowledgeMCP:
    """The knowledge tools for one knowledge base, per caller scope.

    ``filter`` is the scope bound at start (``--filter``); over HTTP each request's identity
    narrows it further. ``allow_write`` (``--allow-write``) adds the write tools: for the
    stdio client, and over HTTP for identities with ``write``. Tool sets are built once per
    distinct scope.
    """

    def __init__(
        self,
        kb: Source,
        filter: dict[str, Any] | None = None,
        *,
        allow_write: bool = False,
        audit: AuditLog | None = None,
        write_limits: WriteLimits | None = None,
        **search_options: Any,
    ):
        self.kb = kb
        self.base = ScopedKnowledgeBase(kb, filter)
        self.allow_write = allow_write
        self.audit = audit  # one line per call (kbcli.agent.mcp.audit), or None
        self.write_limits = write_limits or WriteLimits()  # stdio's, and a token's default
        self.search_options = search_options
        self._tools: dict[str, dict[str, KnowledgeTool]] = {}
        self._writers: dict[str, NoteWriter] = {}

    def writer(self, identity: Identity | None) -> NoteWriter:
        """The writer of ``identity``'s notes (stdio: ``stdio``), one per name, kept for the
        server's life (its notes of the last minute are counted there)."""
        name = identity.name if identity is not None else "stdio"
        if name not in self._writers:
            limits = identity.limits if identity is not None else None
            self._writers[name] = NoteWriter(name, limits or self.write_limits)
        return self._writers[name]

    def tools_for(self, identity: Identity | None) -> dict[str, KnowledgeTool]:
        """The tools a caller with ``identity`` gets (stdio: None, the start-up scope)."""
        scope = identity.filter if identity is not None else None
        write = self.allow_write and (identity is None or identity.write)
        writer = self.writer(identity) if write else None
        key = repr((scope, write, writer.name if writer is not None else None))
        if key not in self._tools:
            tools = knowledge_tools(
                self.base, scope, allow_write=write, writer=writer, **self.search_options
            )
            view = self.base.scoped(scope) if scope else self.base
            tools.insert(3, KnowledgeStatusTool(view))  # after knowledge_stats
            self._tools[key] = {tool.name: tool for tool in tools}
        return self._tools[key]

    def server(self, *, http: bool = False) -> Any:
        """An SDK low-level ``Server`` serving the tools (``http``: scope per bearer token)."""
        require("mcp", extra="mcp", feature="kb mcp")
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server

        def identity_of(ctx: Any) -> Identity | None:
            if not http:
                return None
            request = getattr(ctx, "request", None)
            identity = getattr(request, "scope", {}).get(IDENTITY_KEY)
            if not isinstance(identity, Identity):
                raise PermissionError("no authenticated identity on this request")
            return identity

        def error(text: str) -> Any:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=True
            )

        async def list_tools(ctx: Any, params: Any) -> Any:
            tools = self.tools_for(identity_of(ctx))
            return types.ListToolsResult(
                tools=[
                    types.Tool(
                        name=tool.name, description=tool.description, input_schema=tool.input_schema
                    )
                    for tool in tools.values()
                ]
            )

        async def call_tool(ctx: Any, params: Any) -> Any:
            try:
                identity = identity_of(ctx)
                tools = self.tools_for(identity)
            except PermissionError:
                if self.audit is not None:
                    self.audit.refused("not authenticated")
                return error("Error: not authenticated")
            arguments = dict(params.arguments or {})
            tool = tools.get(params.name)
            structured: dict[str, Any] | None = None
            if tool is None:
                result = ToolResult(
                    f"Error: Unknown tool {params.name[:60]!r}: use {', '.join(tools)}",
                    is_error=True,
                )
                started = time.perf_counter()
            else:
                started = time.perf_counter()
                result = await anyio.to_thread.run_sync(tool.call, arguments)
                if params.name in WATERMARKED and not result.is_error:
                    mark = await anyio.to_thread.run_sync(index_watermark, self.kb)
                    structured = {"index": mark.as_json()}
            if self.audit is not None:
                who = identity.name if identity is not None else "stdio"
                elapsed = (time.perf_counter() - started) * 1000
                try:
                    self.audit.call(who, params.name, arguments, result, elapsed)
                except KBError as exc:  # an unaudited answer is not given
                    return error(f"Error: {exc}")
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=result.text)],
                structured_content=structured,
                is_error=result.is_error,
            )

        return Server(
            SERVER_NAME,
            version=__version__,
            instructions=(
                "A local knowledge base. Use knowledge_search to find passages (cite their "
                "sources), knowledge_get to read a chunk or a file, knowledge_stats for counts, "
                "knowledge_status to learn whether the index is behind its files"
                + (
                    "; knowledge_add stores a note, knowledge_delete removes one (where allowed)."
                    if self.allow_write
                    else "."
                )
            ),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    # --- transports ---------------------------------------------------------------------------

    def run_stdio(self) -> None:
        """Serve over stdin/stdout until the client closes the connection."""
        import anyio
        from mcp.server.stdio import stdio_server

        server = self.server()

        async def main() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        try:
            anyio.run(main)
        except Exception as exc:
            if not _broken_pipes_only(exc):
                raise
            # the client stopped reading our stdout: the one BrokenPipeError the CLI ends
            # quietly on, rather than the task group's traceback
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)) from None

    def http_app(self, tokens: dict[str, Identity], host: str = "127.0.0.1") -> Any:
        """The streamable HTTP ASGI app at ``/mcp``, behind the bearer-token check."""
        server = self.server(http=True)
        app = server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host
        )
        return BearerTokens(app, tokens, audit=self.audit)

    def run_http(
        self, host: str, port: int, tokens: dict[str, Identity], limits: Limits | None = None
    ) -> None:
        """Serve streamable HTTP on ``host:port`` until interrupted, under ``limits``
        (:mod:`kbcli.agent.mcp.http_limits`). Raises :class:`~kbcli.errors.ListenError` before
        anything
        is served when the address cannot be listened on."""
        url = f"http://{address(host, port)}/mcp"

        def started() -> None:
            print(f"kb mcp: serving {url}", file=sys.stderr, flush=True)

        serve(self.http_app(tokens, host), host, port, limits or Limits(), on_start=started)


class BearerTokens:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <known token>``.

    A known token's :class:`Identity` goes into the request's ASGI scope under
    :data:`IDENTITY_KEY`, where the tools read it; anything else is answered ``401`` with an
    empty body before the app sees it. Tokens are compared in constant time.
    """

    def __init__(self, app: Any, tokens: dict[str, Identity], audit: AuditLog | None = None):
        self.app = app
        self.audit = audit
        self._tokens = [(token.encode(), identity) for token, identity in tokens.items()]

    def _at_shutdown(self, receive: Any) -> Any:
        """``receive`` of the lifespan, writing the audit's last summary of refused requests
        when the server shuts down (uvicorn then re-raises SIGTERM: no later code runs)."""

        async def receiving() -> Any:
            message = await receive()
            if message.get("type") == "lifespan.shutdown" and self.audit is not None:
                self.audit.summarise()
            return message

        return receiving

    def identify(self, header: bytes | None) -> Identity | None:
        """The identity of an ``Authorization`` header value, or None."""
        if not header or not header[:7].lower() == b"bearer ":
            return None
        presented = header[7:].strip()
        found = None
        for token, identity in self._tokens:  # no early exit: timing says nothing
            if hmac.compare_digest(token, presented):
                found = identity
        return found

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":  # not part of streamable HTTP
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, self._at_shutdown(receive), send)
            return
        header = None
        for key, value in scope.get("headers") or ():
            if key.lower() == b"authorization":
                header = value
                break
        identity = self.identify(header)
        if identity is None:
            if self.audit is not None:  # counted, summarised once a minute (kbcli.agent.mcp.audit)
                reason = "no token" if header is None else "unknown token"
                client = scope.get("client")
                self.audit.refused(reason, str(client[0]) if client else None)
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", b"0"),
                        (b"connection", b"close"),  # its body, if any, is never read
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app({**scope, IDENTITY_KEY: identity}, receive, send)


#: the replies that carry the index's watermark, once per reply, as structured content
#: ``{"index": {"changed_at", "syncing", "vectors_pending"}}`` beside their text
WATERMARKED = ("knowledge_search", "knowledge_get", "knowledge_status", "knowledge_add")


def parse_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6) as a pair; raises InvalidOptionError."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidOptionError(f"--http needs HOST:PORT, e.g. 127.0.0.1:8765, got {value!r}")
    return host, int(port)


def _broken_pipes_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``BrokenPipeError``, or an exception group holding only those."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple) and inner:
        return all(_broken_pipes_only(e) for e in inner)
    return isinstance(exc, BrokenPipeError)
