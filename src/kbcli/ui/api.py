"""The JSON of ``kb ui``'s API: search, document, status and ask, each over one
:class:`~kbcli.views.KnowledgeView` (the whole index, or the scope of the caller's token).

Handlers are plain functions of a view and the request's parameters; they run in a worker
thread (:mod:`kbcli.ui.server`) and raise :class:`ApiError` (a status and one line, the line
``kb search`` or ``kb get`` would print) for anything the caller got wrong. Nothing here
writes to the index.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbcli.cli.render.snippets import snippet_lines, term_pattern
from kbcli.errors import InvalidOptionError, KBError
from kbcli.filters.model import MAX_FILTER_CONDITIONS, ensure_checked
from kbcli.filters.syntax import parse_filter_expressions, under_folders, with_source_paths
from kbcli.search.query import Hit
from kbcli.search.query import search as run_search
from kbcli.system.paths import canonical_source
from kbcli.types import SearchOptions, note_author
from kbcli.views import KnowledgeView

MAX_K = 100  # hits a page asks for at most (a person reads 10)
MAX_QUERY_CHARS = 1000  # a search box's text, at most
MAX_FILTERS = 20  # filter= and folder= parameters in one request, each
MAX_PARAM_CHARS = 2000  # any other parameter's text
MODES = ("keyword", "semantic", "hybrid", "sparse", "vector", "dense")


class ApiError(Exception):
    """An answer of ``status`` with ``{"error": message}`` (one line, no traceback)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _one(params: Mapping[str, Sequence[str]], name: str, default: str | None = None) -> str | None:
    values = params.get(name) or []
    if not values:
        return default
    value = values[-1]
    if len(value) > MAX_PARAM_CHARS:
        raise ApiError(400, f"{name} is longer than {MAX_PARAM_CHARS:,} characters")
    return value


def _many(params: Mapping[str, Sequence[str]], name: str) -> list[str]:
    values = [v for v in params.get(name) or [] if v.strip()]
    if len(values) > MAX_FILTERS:
        raise ApiError(400, f"at most {MAX_FILTERS} {name} parameters")
    for value in values:
        if len(value) > MAX_PARAM_CHARS:
            raise ApiError(400, f"{name} is longer than {MAX_PARAM_CHARS:,} characters")
    return values


def _flag(params: Mapping[str, Sequence[str]], name: str) -> bool:
    value = (_one(params, name, "") or "").strip().lower()
    return value in ("1", "true", "yes", "on")


def _k(params: Mapping[str, Sequence[str]]) -> int:
    raw = (_one(params, "k", "10") or "10").strip()
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_K:
        raise ApiError(400, f"k must be a whole number from 1 to {MAX_K}, got {raw[:20]!r}")
    return int(raw)


def search_scope(filters: list[str], folders: list[str]) -> dict[str, Any] | None:
    """The ``filter=`` expressions (``kb search --filter``; ``source`` values as paths) ANDed
    with the ``folder=`` folders (``kb search --in``), checked once. A folder is taken as the
    index names it (an absolute path); a relative one is resolved from the server's folder."""
    where = with_source_paths(
        parse_filter_expressions(filters), lambda value: canonical_source(Path(value))
    )
    if any("\0" in folder for folder in folders):
        raise InvalidOptionError("A folder contains a NUL character")
    scope = under_folders([canonical_source(Path(folder)) for folder in folders])
    distinct = len(scope.get("$or", [scope])) if scope else 0
    if distinct > MAX_FILTER_CONDITIONS:
        raise InvalidOptionError(f"at most {MAX_FILTER_CONDITIONS} folders")
    parts = [part for part in (where, scope) if part]
    if not parts:
        return None
    return ensure_checked(parts[0] if len(parts) == 1 else {"$and": parts})


def hit_json(rank: int, hit: Hit, pattern: Any, explain: bool) -> dict[str, Any]:
    """One hit as the page shows it: where it is, its score and its snippet (the lines
    ``kb search`` shows, joined by newlines) with the query's terms as spans inside it."""
    lines = snippet_lines(hit.result, pattern)
    text_parts: list[str] = []
    spans: list[list[int]] = []
    offset = 0
    for n, (_, text, found) in enumerate(lines):
        if n:
            offset += 1  # the newline
        spans += [[offset + start, offset + end] for start, end in found]
        text_parts.append(text)
        offset += len(text)
    meta = hit.result.document.metadata
    item: dict[str, Any] = {
        "rank": rank,
        "path": hit.source,
        "location": hit.location,
        "line": hit.line,
        "page": hit.page,
        "chunk_id": hit.result.document.id,
        "score": round(float(hit.result.score), 6),
        "matched": hit.matched,
        "snippet": "\n".join(text_parts),
        "highlights": spans,
        "note_by": note_author(meta),
    }
    if explain:
        item["explain"] = _explain_text(hit.result.explain)
    return item


def _explain_text(explain: Any) -> str:
    """``--explain``'s facts about one hit as text (a fact a line)."""
    if not explain:
        return ""
    if isinstance(explain, Mapping):
        return "\n".join(f"{key}: {value}" for key, value in explain.items())
    return str(explain)


def search(view: KnowledgeView, params: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """``GET /api/search``: ``q``, ``mode``, ``k``, ``folder`` and ``filter`` (repeatable),
    ``by`` (file or chunk), ``explain``."""
    started = time.perf_counter()
    query = _one(params, "q", "") or ""
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(400, f"The query is longer than {MAX_QUERY_CHARS:,} characters")
    if not query.strip():
        raise ApiError(
            400, "The query is empty: give the words to look for, as in kb search 'reset password'"
        )
    mode = (_one(params, "mode", "hybrid") or "hybrid").strip().lower()
    if mode not in MODES:
        raise ApiError(400, f"Unknown mode {mode[:40]!r}: choose keyword, semantic or hybrid")
    by = (_one(params, "by", "file") or "file").strip().lower()
    if by not in ("file", "chunk"):
        raise ApiError(400, f"by must be file or chunk, got {by[:20]!r}")
    explain = _flag(params, "explain")
    try:
        scope = search_scope(_many(params, "filter"), _many(params, "folder"))
        # the view's scope travels as options.scope (what KnowledgeView.search_with does), so
        # ranking, keyword statistics and the located lines are the scope's alone
        options = SearchOptions(
            k=_k(params), mode=mode, filter=scope, explain=explain, scope=view.filter
        )
        hits = run_search(view.kb, query, options, by=by)
    except KBError as exc:
        raise ApiError(400, str(exc)) from None
    pattern = term_pattern(view.analyzer.query_terms(query))
    results = hits.results
    return {
        "query": query,
        "mode": mode,
        "hits": [
            hit_json(rank, hit, pattern, explain)
            for rank, hit in enumerate(hits, 1)
            if view.visible(hit.result.document)  # a guard: the stores filter before ranking
        ],
        "refused": bool(getattr(results, "refused", False)),
        "took_ms": round((time.perf_counter() - started) * 1000, 2),
    }
