"""Bearer tokens of kb's HTTP surfaces (``kb mcp --http``, ``kb ui``): the token file, who a
token belongs to and the scope it may read, the ASGI check of ``kb mcp``, and ``--http
HOST:PORT``.

Token file (YAML)::

    tokens:
      - token: "a-long-random-secret-for-acme"   # at least 16 characters
        name: acme                               # in the audit file and on its notes
        filter: {tenant: acme}                   # a kbcli filter; or ["tenant=acme"]
      - token: "another-long-random-secret"
        name: admin
        filter: {}                               # explicit: the whole index
        write: true                              # kb mcp's write tools (kb ui never writes)
        write_limits: {notes_per_minute: 10, note_bytes: 16384, total_bytes: 2000000}

The scope comes from the server's side (the file), never from the request.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kbcli.agent.tools.write import WriteLimits
from kbcli.errors import ConfigError, InvalidOptionError
from kbcli.filters.model import canonical_paths, validate_filter
from kbcli.filters.syntax import parse_filter_expressions

if TYPE_CHECKING:  # starlette comes with the mcp and ui extras; nothing here imports it
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

MIN_TOKEN_CHARS = 16
MAX_NAME_CHARS = 64  # a token's name: in the audit file and on every note it writes
IDENTITY_KEY = "kbcli.identity"  # the ASGI scope entry the bearer check fills in


class RefusalLog(Protocol):
    """Where refused requests are counted (``kb mcp --audit``'s AuditLog)."""

    def refused(self, reason: str, peer: str | None = None) -> None: ...

    def summarise(self) -> None: ...


@dataclass(frozen=True)
class Identity:
    """Who a bearer token belongs to and the filter it may read (None: the whole index)."""

    name: str
    filter: dict[str, Any] | None
    write: bool = False  # knowledge_add / knowledge_delete, when the server allows writing
    limits: WriteLimits | None = None  # its write_limits (None: the server's)


def _scope_from(value: Any, where: str) -> dict[str, Any] | None:
    """The scope of an entry's ``filter:`` (``value``: whatever the YAML held), checked."""
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
    """An entry's ``write_limits:`` (``value``: whatever the YAML held), checked."""
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


class BearerTokens:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <known token>``.

    A known token's :class:`Identity` goes into the request's ASGI scope under
    :data:`IDENTITY_KEY`, where the tools read it; anything else is answered ``401`` with an
    empty body before the app sees it. Tokens are compared in constant time.
    """

    def __init__(self, app: ASGIApp, tokens: dict[str, Identity], audit: RefusalLog | None = None):
        self.app = app
        self.audit = audit
        self._tokens = [(token.encode(), identity) for token, identity in tokens.items()]

    def _at_shutdown(self, receive: Receive) -> Receive:
        """``receive`` of the lifespan, writing the audit's last summary of refused requests
        when the server shuts down (uvicorn then re-raises SIGTERM: no later code runs)."""

        async def receiving() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown" and self.audit is not None:
                self.audit.summarise()
            return message

        return receiving

    def identify(self, header: bytes | None) -> Identity | None:
        """The identity of an ``Authorization`` header value, or None."""
        if not header or not header[:7].lower() == b"bearer ":
            return None
        return compare_token(header[7:].strip(), self._tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            if self.audit is not None:  # counted, summarised once a minute (kb mcp --audit)
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


def parse_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6) as a pair; raises InvalidOptionError."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidOptionError(f"--http needs HOST:PORT, e.g. 127.0.0.1:8765, got {value!r}")
    return host, int(port)


def compare_token(presented: bytes, tokens: list[tuple[bytes, Identity]]) -> Identity | None:
    """The identity whose token is ``presented``, compared in constant time (no early exit:
    timing says nothing about which token came close), or None."""
    found = None
    for token, identity in tokens:
        if hmac.compare_digest(token, presented):
            found = identity
    return found
