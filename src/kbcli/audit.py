"""The audit trail of a shared ``kb mcp`` server (``--audit FILE``): one JSON line per tool call
and per refused request, appended as it happens.

A line says who called (the token's name; ``stdio`` for the stdio transport), which tool, how
large each argument was, which metadata keys the caller's filter named, which chunk ids were
returned, and whether the call was refused (an error answer, or a request without a valid
token). It never holds document text, nor the query or filter values, unless the server was
started with ``--audit-queries``: an audit file may be read by people who must not read the
knowledge base, so it keeps what identifies a call, not what the call read. Ids are of chunks
the caller's scope shows (the tools never return others).

Each line is written with one ``write`` on a file opened for appending (``0600`` when
created), under a lock: lines of concurrent calls never interleave. A line that cannot be
written fails the call (an audit that silently stops is worse than an error).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import ConfigError, StoreError

QUERY_KEYS = ("query", "input")  # arguments whose text is the caller's question


def filter_keys(value: Any) -> list[str]:
    """The metadata keys a filter names (operators and their nesting left out), sorted."""
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, inner in node.items():
                if isinstance(key, str) and not key.startswith("$"):
                    keys.add(key)
                walk(inner)
        elif isinstance(node, list):
            for inner in node:
                walk(inner)

    walk(value)
    return sorted(keys)


def argument_sizes(arguments: dict[str, Any]) -> dict[str, int]:
    """Each argument's size: characters of a string, of its JSON text otherwise."""
    sizes = {}
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        sizes[str(key)[:64]] = len(text)
    return sizes


class AuditLog:
    """Appends audit lines to ``path`` (see the module docstring); ``queries`` also records
    the query and the caller's filter as given."""

    def __init__(self, path: str | os.PathLike[str], *, queries: bool = False):
        self.path = Path(path).expanduser()
        self.queries = queries
        self._lock = threading.Lock()
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"Cannot open the audit file {self.path}: {exc.strerror or exc}"
            ) from None

    def call(
        self, who: str, tool: str, arguments: dict[str, Any], result: Any, elapsed_ms: float
    ) -> None:
        """Record one tool call and its ``result`` (a :class:`~kbcli.tools.ToolResult`)."""
        entry: dict[str, Any] = {
            "time": _now(),
            "token": who,
            "tool": tool[:64],
            "arguments": argument_sizes(arguments),
            "filter_keys": filter_keys(arguments.get("filter")),
            "ids": [c.id for c in getattr(result, "citations", [])],
            "refused": bool(getattr(result, "is_error", False)),
            "ms": round(elapsed_ms, 1),
        }
        if self.queries:
            query = next((arguments[k] for k in QUERY_KEYS if k in arguments), None)
            entry["query"] = query
            entry["filter"] = arguments.get("filter")
        self._write(entry)

    def refused(self, reason: str, path: str = "") -> None:
        """Record a request refused before any tool ran (no valid token)."""
        self._write({"time": _now(), "token": None, "refused": reason, "path": path[:200]})

    def _write(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode()
        with self._lock:
            try:
                os.write(self._fd, line)
            except OSError as exc:
                raise StoreError(
                    f"Cannot write the audit file {self.path}: {exc.strerror or exc}"
                ) from None

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
