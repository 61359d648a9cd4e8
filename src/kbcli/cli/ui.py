"""``kb ui``: a local web page to search and read the knowledge base (:mod:`kbcli.ui`)."""

import ipaddress
import secrets
import sys
from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options
from kbcli.errors import InvalidOptionError, require
from kbcli.serve.tokens import Identity, load_tokens, parse_host_port

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb ui --open",
        "kb ui --http 127.0.0.1:8766",
        "kb ui --http 0.0.0.0:8766 --tokens tokens.yaml",
        "kb ui --http 127.0.0.1:8766 --tokens tokens.yaml --allow-host kb.example.org:443",
    ),
)
@global_options()
def ui(
    ctx: typer.Context,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Listen on HOST:PORT [default: 127.0.0.1 and a free port]; an address other "
            "than loopback needs --tokens.",
        ),
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            metavar="FILE",
            help="YAML file of tokens and their scopes, as for kb mcp --tokens (each person "
            "opens the page with ?token=THEIRS; a scoped token sees only its scope).",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME[:PORT]",
            help="Also answer requests addressed to NAME (a reverse proxy's public name; "
            "repeatable). Others get 421 (DNS rebinding).",
        ),
    ] = None,
    open_: Annotated[
        bool,
        typer.Option("--open", help="Open the page in the default web browser."),
    ] = False,
) -> None:
    """Serve a web page to search and read the knowledge base (read-only).

    Prints the page's address, http://127.0.0.1:PORT/?token=T, with a token made at each
    start that every request must carry, and serves until Ctrl-C. The page searches as you
    type (modes, filters, folders, scores), shows documents at the hit's lines, the index's
    figures and, with a chat model configured, kb ask's answers. Requests naming another host
    (DNS rebinding) or coming from another site are refused. An address that cannot be
    listened on (a port in use) exits 4."""

    require("starlette", extra="ui", feature="kb ui")
    require("uvicorn", extra="ui", feature="kb ui")
    # lazy: these import starlette and uvicorn, optional (the ui extra): require() says so first
    from kbcli.serve.limits import Limits, bind, serve
    from kbcli.ui.server import UI, Settings, host_names

    host, port = parse_host_port(http) if http is not None else ("127.0.0.1", 0)
    if tokens is None and not _loopback(host):
        raise InvalidOptionError(
            f"kb ui --http {http}: an address beyond this machine needs --tokens FILE (each "
            "person their own token), or use 127.0.0.1"
        )
    if tokens is not None:
        identities = load_tokens(tokens)
        token = None
    else:
        token = secrets.token_urlsafe(24)
        identities = {token: Identity("ui", None)}
    sockets = bind(host, port, "kb ui")  # port 0: the system picks a free one
    port = sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    kb = None
    try:
        kb = open_kb(ctx, create=False)
        server = UI(kb)
        extra = tuple(_host_name(name) for name in allow_host or [])
        settings = Settings(host_names(host, port, extra), identities)

        def started() -> None:
            print(f"kb ui: {url}", flush=True)
            if open_:
                _open_browser(url)

        try:
            serve(
                server.app(settings), host, port, Limits(), on_start=started, name="kb ui",
                sockets=sockets,
            )
        finally:
            server.close()
    finally:
        for sock in sockets:
            sock.close()
        if kb is not None:
            kb.close()


def _host_name(value: str) -> str:
    """An ``--allow-host`` value, checked: a host name or address, an optional port."""
    name = value.strip()
    if not name or len(name) > 255 or any(c.isspace() or c in "/?#@" for c in name):
        raise InvalidOptionError(
            f"--allow-host needs a host name such as kb.example.org, got {value[:60]!r}"
        )
    return name


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _open_browser(url: str) -> None:
    """Open ``url`` in a browser; no browser (a server, a container) is not a failure."""
    import webbrowser

    try:
        if not webbrowser.open(url):
            print("kb ui: no web browser found: open the address above", file=sys.stderr)
    except Exception as exc:  # webbrowser may raise anything its launcher raises
        print(f"kb ui: could not open a web browser ({exc}): open the address above",
              file=sys.stderr)
