"""``kb mcp``: the knowledge base served to agents over MCP."""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.agent.mcp.audit import AuditLog
from kbcli.agent.mcp.server import KnowledgeMCP
from kbcli.agent.tools.write import WriteLimits
from kbcli.cli import render
from kbcli.cli.context import open_kb, search_filter
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import FilterOption, example
from kbcli.cli.state import get_state, global_options
from kbcli.errors import InvalidOptionError, require
from kbcli.filters.syntax import parse_filter_expressions
from kbcli.serve.tokens import load_tokens, parse_host_port

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb mcp --filter team=ops",
        "kb mcp --http 127.0.0.1:8765 --tokens tokens.yaml",
        "kb mcp --allow-write --write-limit notes_per_minute=10 --filter team=ops",
        "kb mcp --http 127.0.0.1:8765 --tokens tokens.yaml --audit audit.jsonl",
    ),
)
@global_options()
def mcp(
    ctx: typer.Context,
    filter: FilterOption = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.",
        ),
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            metavar="FILE",
            help="YAML file mapping bearer tokens to scopes (required with --http).",
        ),
    ] = None,
    allow_write: Annotated[
        bool,
        typer.Option(
            "--allow-write",
            help="Also offer knowledge_add and knowledge_delete (notes, inside the caller's "
            "scope); over HTTP only to tokens with write: true.",
        ),
    ] = False,
    write_limit: Annotated[
        list[str] | None,
        typer.Option(
            "--write-limit",
            metavar="KEY=VALUE",
            help="A limit on notes for the stdio client and for tokens without write_limits: "
            "notes_per_minute (default 30), note_bytes (32768), total_bytes (5000000).",
        ),
    ] = None,
    audit: Annotated[
        Path | None,
        typer.Option(
            "--audit",
            metavar="FILE",
            help="Append one JSON line per tool call to FILE (token name, tool, argument "
            "sizes, filter keys, returned chunk ids, refusal; no text or query), and a line a "
            "minute counting requests refused for their token, by peer.",
        ),
    ] = None,
    audit_queries: Annotated[
        bool,
        typer.Option(
            "--audit-queries",
            help="Also record each call's query and filter in the --audit file.",
        ),
    ] = False,
) -> None:
    """Serve the knowledge base to agents over MCP (stdio or HTTP).

    Tools: knowledge_search, knowledge_get and knowledge_stats, limited to the --filter scope
    (and, over HTTP, each token's scope); with --allow-write also knowledge_add and
    knowledge_delete, writing notes inside that scope, each writer under its write limits
    (per minute, per note, in all). --audit FILE records who called what (one JSON line per
    call, no text or query unless --audit-queries). Over HTTP a request
    must arrive whole within 10 s and at most 1,000 connections are open (the longest-waiting
    makes room); an address that cannot be listened on (a port in use) exits 4."""

    require("mcp", extra="mcp", feature="kb mcp")

    scope = search_filter(parse_filter_expressions(filter), None)
    if http is None and tokens is not None:
        raise InvalidOptionError("--tokens goes with --http (stdio has no tokens)")
    address = parse_host_port(http) if http is not None else None
    if address is not None and tokens is None:
        raise InvalidOptionError(
            "kb mcp --http needs --tokens FILE: every HTTP request must carry a bearer token"
        )
    if audit_queries and audit is None:
        raise InvalidOptionError("--audit-queries goes with --audit FILE")
    if write_limit and not allow_write:
        raise InvalidOptionError("--write-limit goes with --allow-write")
    limits = _write_limits(write_limit or [])
    identities = load_tokens(tokens) if tokens is not None else {}
    writers = sum(1 for identity in identities.values() if identity.write)
    if writers and not allow_write and not get_state(ctx).quiet:
        render.warning(
            f"{writers} token{'' if writers == 1 else 's'} in {tokens} say write: true, but "
            "writing is off: run kb mcp with --allow-write to offer the write tools"
        )

    log = AuditLog(audit, queries=audit_queries) if audit is not None else None
    try:
        kb = open_kb(ctx, create=False)
        try:
            server = KnowledgeMCP(
                kb, scope, allow_write=allow_write, audit=log, write_limits=limits
            )
            if address is None:
                server.run_stdio()
            else:
                server.run_http(*address, identities)
        finally:
            kb.close()
    finally:
        if log is not None:
            log.close()


def _write_limits(values: list[str]) -> WriteLimits:
    """``--write-limit KEY=VALUE`` options as :class:`~kbcli.agent.tools.write.WriteLimits`."""

    given: dict[str, str] = {}
    for value in values:
        key, sep, number = value.partition("=")
        if not sep:
            raise InvalidOptionError(
                f"--write-limit needs KEY=VALUE, e.g. notes_per_minute=10, got {value[:60]!r}"
            )
        given[key.strip()] = number
    try:
        return WriteLimits().with_values(given)
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"--write-limit: {exc}") from None
