"""Where the PostgreSQL store connects: the DSN from ``store.dsn`` or ``$KB_PG_DSN``, and its
redacted form, the only one that may appear in output, errors, logs or ``kb stats``."""

from __future__ import annotations

import os

from kbcli.errors import ConfigError
from kbcli.system.redaction import passwords, redact

ENV_DSN = "KB_PG_DSN"
__all__ = ["ENV_DSN", "describe", "first_line", "passwords", "redact", "resolve_dsn"]


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
    user = str(parts.get("user") or "")
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    db = parts.get("dbname") or user
    return redact(f"postgresql://{user + '@' if user else ''}{host}{port}/{db}", dsn)
