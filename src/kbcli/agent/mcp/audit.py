"""The audit trail of a shared ``kb mcp`` server (``--audit FILE``): one JSON line per tool
call, appended as it happens, and a summary of the requests refused for their token.

A call's line says who called (the token's name; ``stdio`` for the stdio transport), which
tool, how large each argument was, which metadata keys the caller's filter named, which chunk
ids were returned, and whether the call was refused (an error answer). It never holds document
text, nor the query or filter values, unless the server was started with ``--audit-queries``:
an audit file may be read by people who must not read the knowledge base, so it keeps what
identifies a call, not what the call read. Ids are of chunks the caller's scope shows (the
tools never return others). Every field is bounded (the ``MAX_*`` constants), so no argument
a caller sends makes a line long.

Each line is written with one ``write`` on a file opened for appending (``0600`` when
created), under a lock: lines of concurrent calls never interleave. A call's line that cannot
be written fails the call (an audit that silently stops is worse than an error).

Requests without a valid token are not written one line each (anyone can send them, and a
flood would fill the disk and then, through the rule above, refuse every token holder). They
are counted in memory, by reason and by peer address, and summarised in one line every
:data:`SUMMARY_EVERY` seconds in which there were any, and at shutdown: the total, the counts
by reason, the :data:`TOP_PEERS` busiest peers and what the others sent. A summary that cannot
be written is logged and dropped; it never refuses a call.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbcli.agent.tools.base import ToolResult
from kbcli.errors import ConfigError, StoreError

QUERY_KEYS = ("query", "input")  # arguments whose text is the caller's question
SUMMARY_EVERY = 60.0  # seconds between summaries of refused requests
TOP_PEERS = 10  # peers named in a summary; the others are counted together
MAX_PEERS = 1000  # distinct peers counted in one interval; requests of more go to "others"
MAX_KEY_CHARS = 64  # an argument name, a filter key, a peer address, a token name, a tool
MAX_KEYS = 32  # argument sizes and filter keys in one line
MAX_IDS = 100  # chunk ids in one line (a search returns at most 50)
MAX_ID_CHARS = 200
MAX_QUERY_CHARS = 2000  # --audit-queries: the query kept, and the filter's JSON text

logger = logging.getLogger("kbcli.mcp")


def filter_keys(value: Any, most: int = MAX_KEYS) -> list[str]:
    """The metadata keys a filter names (operators and their nesting left out), sorted, each
    cut to :data:`MAX_KEY_CHARS` characters, at most ``most`` of them."""
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, inner in node.items():
                if isinstance(key, str) and not key.startswith("$"):
                    keys.add(key[:MAX_KEY_CHARS])
                walk(inner)
        elif isinstance(node, list):
            for inner in node:
                walk(inner)

    walk(value)
    return sorted(keys)[:most]


def argument_sizes(arguments: dict[str, Any], most: int = MAX_KEYS) -> dict[str, int]:
    """Each argument's size: characters of a string, of its JSON text otherwise; names cut to
    :data:`MAX_KEY_CHARS` characters, at most ``most`` arguments (the first given)."""
    sizes = {}
    for key, value in list(arguments.items())[:most]:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        sizes[str(key)[:MAX_KEY_CHARS]] = len(text)
    return sizes


class AuditLog:
    """Appends audit lines to ``path`` (see the module docstring); ``queries`` also records
    the query and the caller's filter as given (each cut to :data:`MAX_QUERY_CHARS`).
    Refused requests are summarised every ``summary_every`` seconds by a background thread
    and at :meth:`close`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        queries: bool = False,
        summary_every: float = SUMMARY_EVERY,
    ):
        self.path = Path(path).expanduser()
        self.queries = queries
        self.summary_every = summary_every
        self._lock = threading.Lock()  # the file
        self._counting = threading.Lock()  # the refusals counted since the last summary
        self._since: str | None = None
        self._reasons: Counter[str] = Counter()
        self._peers: Counter[str] = Counter()
        self._uncounted = 0  # requests from peers beyond MAX_PEERS
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"Cannot open the audit file {self.path}: {exc.strerror or exc}"
            ) from None
        self._stop = threading.Event()
        self._summariser = threading.Thread(
            target=self._summarise_every, name="kb-audit-summary", daemon=True
        )
        self._summariser.start()

    def call(
        self, who: str, tool: str, arguments: dict[str, Any], result: ToolResult, elapsed_ms: float
    ) -> None:
        """Record one tool call and its ``result`` (a :class:`~kbcli.agent.tools.read.ToolResult`);
        raises StoreError when the line cannot be written."""
        entry: dict[str, Any] = {
            "time": _now(),
            "token": str(who)[:MAX_KEY_CHARS],
            "tool": str(tool)[:MAX_KEY_CHARS],
            "arguments": argument_sizes(arguments),
            "filter_keys": filter_keys(arguments.get("filter")),
            "ids": [str(c.id)[:MAX_ID_CHARS] for c in result.citations][:MAX_IDS],
            "refused": result.is_error,
            "ms": round(elapsed_ms, 1),
        }
        if len(arguments) > MAX_KEYS:
            entry["more_arguments"] = len(arguments) - MAX_KEYS
        if self.queries:
            query = next((arguments[k] for k in QUERY_KEYS if k in arguments), None)
            if query is not None and not isinstance(query, str):
                query = json.dumps(query, default=str)
            entry["query"] = _cut(query, entry, "query")
            flt = arguments.get("filter")
            text = json.dumps(flt, ensure_ascii=False, default=str)
            entry["filter"] = flt if len(text) <= MAX_QUERY_CHARS else _cut(text, entry, "filter")
        self._write(entry)

    def refused(self, reason: str, peer: str | None = None) -> None:
        """Count a request refused before any tool ran (no valid token), from ``peer`` (its
        address); written in the next summary. Never raises, never writes."""
        peer = (peer or "unknown")[:MAX_KEY_CHARS]
        with self._counting:
            if self._since is None:
                self._since = _now()
            self._reasons[reason[:MAX_KEY_CHARS]] += 1
            if peer in self._peers or len(self._peers) < MAX_PEERS:
                self._peers[peer] += 1
            else:
                self._uncounted += 1

    def summarise(self) -> None:
        """Write the summary of the requests refused since the last one, if any (one line);
        a line that cannot be written is logged, not raised."""
        with self._counting:
            if self._since is None:
                return
            since, reasons, peers = self._since, self._reasons, self._peers
            uncounted = self._uncounted
            self._since, self._reasons, self._peers = None, Counter(), Counter()
            self._uncounted = 0
        top = peers.most_common(TOP_PEERS)
        total = sum(reasons.values())
        entry = {
            "time": _now(),
            "token": None,
            "refused": "not authenticated",
            "since": since,
            "requests": total,
            "reasons": dict(sorted(reasons.items())),
            "peers": dict(top),
            "other_peers": len(peers) - len(top),
            "other_requests": total - sum(n for _, n in top),
        }
        if uncounted:
            entry["peers_not_counted"] = True  # more than MAX_PEERS peers in the interval
        try:
            self._write(entry)
        except StoreError as exc:
            logger.warning("kb mcp: %s: %d refused requests not summarised", exc, total)

    def _summarise_every(self) -> None:
        while not self._stop.wait(self.summary_every):
            self.summarise()

    def _write(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode(
            "utf-8", "backslashreplace"
        )
        with self._lock:
            try:
                if self._fd < 0:
                    raise OSError("the audit file is closed")
                os.write(self._fd, line)
            except OSError as exc:
                raise StoreError(
                    f"Cannot write the audit file {self.path}: {exc.strerror or exc}"
                ) from None

    def close(self) -> None:
        """Write the last summary and close the file."""
        self._stop.set()
        if self._summariser.is_alive() and self._summariser is not threading.current_thread():
            self._summariser.join(timeout=5)
        self.summarise()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _cut(text: str | None, entry: dict[str, Any], name: str) -> str | None:
    """``text`` cut to :data:`MAX_QUERY_CHARS`; when cut, ``entry[name + "_chars"]`` says how
    long it was."""
    if text is None or len(text) <= MAX_QUERY_CHARS:
        return text
    entry[f"{name}_chars"] = len(text)
    return text[:MAX_QUERY_CHARS]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
