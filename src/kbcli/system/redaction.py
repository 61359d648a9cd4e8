"""Passwords out of connection strings: every form a DSN or URL can carry one in
(``scheme://user:secret@host``, ``password=secret``, ``?password=secret``), replaced by ``***``
before a value is printed, logged or put in an error. Dependency-free, so ``kb config`` can use
it without importing a database driver."""

from __future__ import annotations

import re
from urllib.parse import unquote

_URI_PASSWORD = re.compile(r"^(\w+://[^:/@?#]*:)([^@/?#]*)(@)")
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def passwords(dsn: str) -> list[str]:
    """Every password written in ``dsn`` (raw and URL-decoded), longest first."""
    found: list[str] = []
    for pattern in (_URI_PASSWORD, _KEYWORD_PASSWORD, _QUERY_PASSWORD):
        for match in pattern.finditer(dsn):
            raw = match.group(2).strip("'")
            found.extend(v for v in (raw, unquote(raw)) if v)
    return sorted(set(found), key=len, reverse=True)


def redact(text: str, dsn: str = "") -> str:
    """``text`` with every password of ``dsn`` (and any password ``text`` itself writes in a
    URL, a ``password=`` keyword or a query parameter) replaced by ``***``."""
    for secret in passwords(dsn):
        text = text.replace(secret, "***")
    text = _URI_PASSWORD.sub(lambda m: m.group(1) + "***" + m.group(3), text)
    text = _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + "***", text)
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) + "***", text)
