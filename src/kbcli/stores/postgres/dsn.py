"""Where the PostgreSQL store connects: the DSN from ``store.dsn`` or ``$KB_PG_DSN``, and its
redacted form, the only one that may appear in output, errors, logs or ``kb stats``."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

from ...errors import ConfigError

ENV_DSN = "KB_PG_DSN"

_URI_PASSWORD = re.compile(r"^(\w+://[^:/@?#]*:)([^@/?#]*)(@)")
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def resolve_dsn(dsn: str | None) -> str:
    """``dsn``, else ``$KB_PG_DSN``; raises :class:`ConfigError` when neither is set."""
    value = dsn or os.environ.get(ENV_DSN)
    if not value or not value.strip():
        raise ConfigError(
            f"The postgres store needs a server: set store.dsn in jianmu.yaml or ${ENV_DSN} "
            "(e.g. postgresql://kb@db.example.com/kb; keep the password in ~/.pgpass or "
            "PGPASSWORD)"
        )
    return value.strip()


def passwords(dsn: str) -> list[str]:
    """Every password written in ``dsn`` (raw and URL-decoded), longest first."""
    found: list[str] = []
    for pattern in (_URI_PASSWORD, _KEYWORD_PASSWORD, _QUERY_PASSWORD):
        for match in pattern.finditer(dsn):
            raw = match.group(2).strip("'")
            found.extend(v for v in (raw, unquote(raw)) if v)
    return sorted(set(found), key=len, reverse=True)


def redact(text: str, dsn: str) -> str:
    """``text`` with every password of ``dsn`` (and any ``password=...``) replaced by ``***``."""
    for secret in passwords(dsn):
        text = text.replace(secret, "***")
    text = _URI_PASSWORD.sub(lambda m: m.group(1) + "***" + m.group(3), text)
    text = _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + "***", text)
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) + "***", text)


def first_line(exc: BaseException, dsn: str) -> str:
    """The first line of an error's message, every password of ``dsn`` redacted."""
    text = str(exc).strip().splitlines()
    return redact(text[0] if text else type(exc).__name__, dsn)


def describe(dsn: str) -> str:
    """A redacted ``postgresql://user@host:port/dbname`` naming the server, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # a DSN libpq cannot parse: never echo it
        return "postgresql://<unreadable DSN>"
    user = parts.get("user") or ""
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    db = parts.get("dbname") or user
    return redact(f"postgresql://{user + '@' if user else ''}{host}{port}/{db}", dsn)
