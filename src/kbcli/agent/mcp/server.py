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
is closed. The HTTP server runs under :mod:`kbcli.serve.limits` (a request deadline, a bound on
connections, the address bound before it says it serves); the token file, its identities and
the bearer check live in :mod:`kbcli.serve.tokens`, shared with ``kb ui``.

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
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from kbcli import __version__
from kbcli.agent.mcp.audit import AuditLog
from kbcli.agent.tools.base import KnowledgeTool, ToolResult
from kbcli.agent.tools.read import SearchToolOptions, knowledge_tools
from kbcli.agent.tools.status import KnowledgeStatusTool
from kbcli.agent.tools.write import NoteWriter, WriteLimits
from kbcli.errors import KBError, require
from kbcli.knowledge_base import ScopedKnowledgeBase
from kbcli.search.freshness import index_watermark
from kbcli.serve.limits import Limits, address, serve
from kbcli.serve.tokens import IDENTITY_KEY, BearerTokens, Identity
from kbcli.views import Source

if TYPE_CHECKING:  # mcp is imported when kb mcp serves (see the module docstring)
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.types import (
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
    )
    from starlette.types import ASGIApp
    from typing_extensions import Unpack

SERVER_NAME = "kbcli"

logger = logging.getLogger("kbcli.mcp")

#: the replies that carry the index's watermark, once per reply, as structured content
#: ``{"index": {"changed_at", "syncing", "vectors_pending"}}`` beside their text
WATERMARKED = ("knowledge_search", "knowledge_get", "knowledge_status", "knowledge_add")


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
        **search_options: Unpack[SearchToolOptions],
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

    def server(self, *, http: bool = False) -> Server:
        """An SDK low-level ``Server`` serving the tools (``http``: scope per bearer token)."""
        require("mcp", extra="mcp", feature="kb mcp")
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server

        def identity_of(ctx: ServerRequestContext) -> Identity | None:
            if not http:
                return None
            request = getattr(ctx, "request", None)
            identity = getattr(request, "scope", {}).get(IDENTITY_KEY)
            if not isinstance(identity, Identity):
                raise PermissionError("no authenticated identity on this request")
            return identity

        def error(text: str) -> CallToolResult:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=True
            )

        async def list_tools(
            ctx: ServerRequestContext, params: PaginatedRequestParams | None
        ) -> ListToolsResult:
            tools = self.tools_for(identity_of(ctx))
            return types.ListToolsResult(
                tools=[
                    types.Tool(
                        name=tool.name, description=tool.description, input_schema=tool.input_schema
                    )
                    for tool in tools.values()
                ]
            )

        async def call_tool(
            ctx: ServerRequestContext, params: CallToolRequestParams
        ) -> CallToolResult:
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

    def http_app(self, tokens: dict[str, Identity], host: str = "127.0.0.1") -> ASGIApp:
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
        (:mod:`kbcli.serve.limits`). Raises :class:`~kbcli.errors.ListenError` before
        anything
        is served when the address cannot be listened on."""
        url = f"http://{address(host, port)}/mcp"

        def started() -> None:
            print(f"kb mcp: serving {url}", file=sys.stderr, flush=True)

        serve(self.http_app(tokens, host), host, port, limits or Limits(), on_start=started)


def _broken_pipes_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``BrokenPipeError``, or an exception group holding only those."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple) and inner:
        return all(_broken_pipes_only(e) for e in inner)
    return isinstance(exc, BrokenPipeError)
