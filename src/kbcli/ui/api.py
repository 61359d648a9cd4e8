"""The JSON of ``kb ui``'s API: search, document, status and ask, each over one
:class:`~kbcli.views.KnowledgeView` (the whole index, or the scope of the caller's token).

Handlers are plain functions of a view and the request's parameters; they run in a worker
thread (:mod:`kbcli.ui.server`) and raise :class:`ApiError` (a status and one line, the line
``kb search`` or ``kb get`` would print) for anything the caller got wrong. Nothing here
writes to the index.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbcli.agent.answer import answer_settings
from kbcli.agent.answer import ask as answer_question
from kbcli.agent.get import (
    LinesCache,
    Shown,
    chunk_lines,
    find_page,
    find_source,
    page_lines,
    read_file,
)
from kbcli.cli.render.explain import explain_text
from kbcli.cli.render.snippets import snippet_lines, term_pattern
from kbcli.errors import AnswerError, InvalidOptionError, KBError, NotFoundError
from kbcli.filters.model import MAX_FILTER_CONDITIONS, ensure_checked
from kbcli.filters.syntax import parse_filter_expressions, under_folders, with_source_paths
from kbcli.protocols import ChatModelProtocol, DocumentCatalog, supports
from kbcli.providers.chat import build_chat_model
from kbcli.search.freshness import index_watermark, stale_policy
from kbcli.search.pool import source_key
from kbcli.search.query import Hit
from kbcli.search.query import search as run_search
from kbcli.system.paths import canonical_source
from kbcli.types import Document, SearchOptions, note_author
from kbcli.views import KnowledgeView

MAX_K = 100  # hits a page asks for at most (a person reads 10)
MAX_QUERY_CHARS = 1000  # a search box's text, at most
MAX_FILTERS = 20  # filter= and folder= parameters in one request, each
MAX_PARAM_CHARS = 2000  # any other parameter's text
MAX_CHUNKS_SHOWN = 5  # a file hit's other matching chunks listed under it
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


def utf16(text: str, index: int) -> int:
    """The offset ``index`` (in code points) of ``text`` in UTF-16 code units: what a
    JavaScript string's ``slice`` counts (a character beyond the BMP, an emoji, is two)."""
    return index + sum(1 for char in text[:index] if ord(char) > 0xFFFF)


def chunk_json(hit: Hit, pattern: re.Pattern[str] | None) -> dict[str, Any]:
    """Where one chunk is, its score and its snippet (the lines ``kb search`` shows, joined by
    newlines, and their line numbers) with the query's terms as ``[start, end)`` spans inside
    it, in UTF-16 code units (``snippet.slice(start, end)`` in the page)."""
    lines = snippet_lines(hit.result, pattern)
    snippet = "\n".join(text for _, text, _ in lines)
    spans: list[list[int]] = []
    offset = 0
    for _, text, found in lines:
        spans += [[utf16(snippet, offset + a), utf16(snippet, offset + b)] for a, b in found]
        offset += len(text) + 1  # the newline
    return {
        "location": hit.location,
        "line": hit.line,
        "page": hit.page,
        "chunk_id": hit.result.document.id,
        "score": round(float(hit.result.score), 6),
        "snippet": snippet,
        "snippet_lines": [number for number, _, _ in lines],
        "highlights": spans,
        "freshness": fresh.as_json() if (fresh := hit.result.freshness) is not None else None,
    }


def hit_json(
    rank: int, hit: Hit, pattern: re.Pattern[str] | None, explain: bool, others: Sequence[Hit] = ()
) -> dict[str, Any]:
    """One hit as the page shows it: :func:`chunk_json` of its (best) chunk, its file, how
    many of the file's chunks matched and ``chunks``, the file's other matching chunks (at
    most :data:`MAX_CHUNKS_SHOWN`, best first; each at its chunk's first line: only the best
    is located on its best-matching line)."""
    item: dict[str, Any] = {
        "rank": rank,
        "path": hit.source,
        **chunk_json(hit, pattern),
        "matched": hit.matched,
        "note_by": note_author(hit.result.document.metadata),
        "chunks": [chunk_json(other, pattern) for other in others[:MAX_CHUNKS_SHOWN]],
    }
    if explain:
        item["explain"] = explain_text(hit.result.explain)
    return item


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
        stale = stale_policy(_one(params, "stale"))
        scope = search_scope(_many(params, "filter"), _many(params, "folder"))
        # the view's scope travels as options.scope (what KnowledgeView.search_with does), so
        # ranking, keyword statistics and the located lines are the scope's alone
        options = SearchOptions(
            k=_k(params), mode=mode, filter=scope, explain=explain, scope=view.filter, stale=stale
        )
        hits = run_search(view.kb, query, options, by=by)
    except KBError as exc:
        raise ApiError(400, str(exc)) from None
    pattern = term_pattern(view.analyzer.query_terms(query))
    results = hits.results
    shown = [hit for hit in hits if view.visible(hit.result.document)]  # a guard: the stores
    # filter before ranking; a result outside the scope is dropped, never shown
    by_file: dict[str, list[Hit]] = {}
    if by == "file":
        for result in results:
            if view.visible(result.document):
                by_file.setdefault(source_key(result), []).append(Hit(result))
    return {
        "query": query,
        "mode": mode,
        "hits": [
            hit_json(
                rank,
                hit,
                pattern,
                explain,
                [
                    other
                    for other in by_file.get(source_key(hit.result), [])
                    if other.result.document.id != hit.result.document.id
                ],
            )
            for rank, hit in enumerate(shown, 1)
        ],
        "refused": bool(getattr(results, "refused", False)),
        "index": index_watermark(view).as_json(),
        "took_ms": round((time.perf_counter() - started) * 1000, 2),
    }


# --- documents ----------------------------------------------------------------------------------

MAX_LINES = 20_000  # lines of one document sent at once (a window around the hit beyond that)
MAX_TEXT_CHARS = 2_000_000  # characters of those lines, and of the pages, at most
MAX_LINE_CHARS = 10_000  # one line longer than this is cut (a minified file's one line)
MARKDOWN = (".md", ".markdown", ".mdown", ".mkd")
NOT_FOUND = "No indexed file {path!r}: search for it, or see 'kb list' for sources"


def _line(params: Mapping[str, Sequence[str]], name: str) -> int | None:
    raw = (_one(params, name, "") or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 10**9:
        raise ApiError(400, f"{name} must be a line number from 1, got {raw[:20]!r}")
    return int(raw)


def _numbered(shown: Shown) -> list[str]:
    """The file's lines, numbered from 1 (index 0 is line 1). A file read again gives its
    lines as they are; a changed one its indexed chunks, each placed from the line it starts
    on (where chunks overlap, the earlier chunk's text of a line is kept)."""
    if shown.origin == "file":
        return [text for _, text in shown.lines]
    placed: dict[int, str] = {}
    for start, text in shown.lines:
        for offset, line in enumerate(text.split("\n")):
            placed.setdefault(start + offset, line)
    last = max(placed, default=0)
    return [placed.get(n, "") for n in range(1, last + 1)]


def _in_order(docs: list[Document]) -> list[Document]:
    """A file's chunks in the order they cover it (``kb get`` numbers a chunk without lines by
    its place in this order)."""
    return sorted(
        docs,
        key=lambda d: (_whole(d.metadata.get("char_start")), _whole(d.metadata.get("chunk_index"))),
    )


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _hit_lines(docs: list[Document], line: int | None, chunk: str | None) -> list[int] | None:
    """``[from, to]``: the lines of the chunk ``chunk`` names, else of the narrowest chunk
    covering ``line``, else ``[line, line]``; None without either."""
    spans = {d.id: chunk_lines(d, n) for n, d in enumerate(_in_order(docs), 1)}
    if chunk is not None and chunk in spans:
        return list(spans[chunk])
    if line is None:
        return None
    covering = [span for span in spans.values() if span[0] <= line <= span[1]]
    if covering:
        start, stop = min(covering, key=lambda span: span[1] - span[0])
        return [start, stop]
    return [line, line]


def _sections(source: str, docs: list[Document], lines: list[str]) -> list[dict[str, Any]]:
    """A PDF's (or an image's) pages, or a document's sections by heading (DOCX), each with
    the text of the lines its chunks span."""
    ordered = _in_order(docs)
    pages = sorted({p for d in docs if isinstance(p := d.metadata.get("page"), int)})
    out: list[dict[str, Any]] = []
    if pages:
        for page in pages:
            first, last = page_lines(source, docs, page)
            out.append({"page": page, "heading": None, "text": "\n".join(lines[first - 1 : last])})
        return _within(out, MAX_TEXT_CHARS)
    groups: list[tuple[str | None, int, int]] = []
    for place, doc in enumerate(ordered, 1):
        heading = doc.metadata.get("heading")
        heading = heading if isinstance(heading, str) and heading else None
        start, stop = chunk_lines(doc, place)
        if groups and groups[-1][0] == heading:
            groups[-1] = (heading, groups[-1][1], max(groups[-1][2], stop))
        else:
            groups.append((heading, start, stop))
    for heading, start, stop in groups:
        text = "\n".join(lines[start - 1 : stop])
        out.append({"page": None, "heading": heading, "text": text})
    return _within(out, MAX_TEXT_CHARS)


def _within(sections: list[dict[str, Any]], chars: int) -> list[dict[str, Any]]:
    """``sections`` until their text reaches ``chars`` characters (the last one cut)."""
    kept: list[dict[str, Any]] = []
    for section in sections:
        if chars <= 0:
            break
        kept.append({**section, "text": _cut(section["text"], chars)})
        chars -= len(section["text"])
    return kept


def window(lengths: Sequence[int], at: int, lines: int, chars: int) -> tuple[int, int]:
    """``(first, last)`` line numbers (1-based, inclusive) of at most ``lines`` lines and
    ``chars`` characters (``lengths``: each line's), grown from line ``at`` one line before
    and one after in turn; the line ``at`` is always in."""
    if not lengths:
        return 1, 0
    at = min(max(1, at), len(lengths))
    first = last = at
    used = lengths[at - 1]
    grew = True
    while grew and last - first + 1 < lines:
        grew = False
        for side in (-1, 1):
            n = first - 1 if side < 0 else last + 1
            if 1 <= n <= len(lengths) and used + lengths[n - 1] <= chars:
                if last - first + 1 >= lines:
                    break
                used += lengths[n - 1]
                first, last = (n, last) if side < 0 else (first, n)
                grew = True
    return first, last


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def document(
    view: KnowledgeView, params: Mapping[str, Sequence[str]], cache: LinesCache | None = None
) -> dict[str, Any]:
    """``GET /api/document``: ``path`` (as a hit names it; ``PATH#page=N`` too), ``line``
    and ``chunk`` (the hit's) -> the file's indexed text by line (what ``kb get`` shows), its
    pages or sections, and the hit's lines. A file outside the scope is not found, exactly
    like an unknown one."""
    path = (_one(params, "path", "") or "").strip()
    if not path:
        raise ApiError(400, "path is missing: give the path of an indexed file")
    if "\0" in path:
        raise ApiError(400, "The path contains a NUL character")
    line = _line(params, "line")
    chunk = _one(params, "chunk")
    try:
        paged = find_page(view, path)
        found = (paged[0], paged[1]) if paged is not None else find_source(view, path)
        if found is None:
            raise ApiError(404, NOT_FOUND.format(path=path))
        source, docs = found
        if paged is not None and line is None:
            line = page_lines(source, docs, paged[2])[0]
        shown = read_file(view, source, cache=cache)
    except NotFoundError:
        raise ApiError(404, NOT_FOUND.format(path=path)) from None
    except KBError as exc:  # an ambiguous end of a path (naming files in scope only)
        raise ApiError(400, str(exc)) from None
    numbered = _numbered(shown)
    cut = any(len(text) > MAX_LINE_CHARS for text in numbered)
    lines = [_cut(text, MAX_LINE_CHARS) for text in numbered]
    hit = _hit_lines(docs, line, chunk)
    first, last = window(
        [len(text) + 1 for text in lines],
        line or (hit[0] if hit else 1),
        MAX_LINES,
        MAX_TEXT_CHARS,
    )
    suffix = Path(source).suffix.lower()
    paginated = suffix in (".pdf", ".docx") or any(
        isinstance(d.metadata.get("page"), int) for d in docs
    )
    kind = "pages" if paginated else "markdown" if suffix in MARKDOWN else "text"
    at = line or (hit[0] if hit else 1)
    return {
        "path": source,
        "kind": kind,
        "lines": lines[first - 1 : last],
        "first_line": first,
        "total_lines": len(lines),
        "pages": _sections(source, docs, lines) if paginated else [],
        "truncated": cut or first > 1 or last < len(lines),
        "hit_lines": hit,
        "origin": shown.origin,
        "notes": list(shown.notes),
        "editor": f"{source}:{at}",
        "kb_get": f"kb get {shlex.quote(f'{source}:{at}')}",
    }


# --- status and ask -----------------------------------------------------------------------------


def status(
    view: KnowledgeView, chat: Callable[[], ChatModelProtocol] | None = None
) -> dict[str, Any]:
    """``GET /api/status``: ``kb stats``' figures (for a scoped token: the scope's own, no
    index-wide figure), the store's backend and the vectors still to be made."""
    store = view.kb.store
    if view.filter is None and supports(store, DocumentCatalog):
        figures = dict(store.stats())
    else:
        figures = view.stats()
    config = view.kb.config
    figures["scoped"] = view.filter is not None
    figures["store"] = config.store.backend if config is not None else None
    chunks, vectors = figures.get("chunks"), figures.get("vectors")
    if isinstance(chunks, int) and isinstance(vectors, int):
        figures["vectors_pending"] = max(0, chunks - vectors)
    figures["index"] = index_watermark(view).as_json()
    figures["chat_model"] = "given" if chat is not None else chat_model_name(view)
    plain: dict[str, Any] = json.loads(json.dumps(figures, default=str))  # dates, paths: text
    return plain


MAX_QUESTION_CHARS = 2000


def chat_model_name(view: KnowledgeView) -> str | None:
    """The chat model ``kb ask`` would use (``provider/model``), or None when ``rag.answer``
    names none that can be used here (no key, no server): the page then offers no Ask."""
    settings = answer_settings(view)
    try:
        build_chat_model(settings)
    except KBError:
        return None
    return f"{settings.provider}/{settings.model or 'default'}"


def ask(
    view: KnowledgeView, body: Any, chat: Callable[[], ChatModelProtocol] | None = None
) -> dict[str, Any]:
    """``POST /api/ask``: ``{"question", "mode"?}`` -> ``{"answer", "citations", "refused",
    "reason"}``, as ``kb ask --json`` answers; 409 when no chat model is configured. ``chat``
    makes the chat model (default: the knowledge base's ``rag.answer``)."""
    if not isinstance(body, dict) or not isinstance(body.get("question"), str):
        raise ApiError(400, 'the body must be JSON: {"question": "...", "mode": "hybrid"}')
    question = body["question"]
    if not question.strip():
        raise ApiError(400, "The question is empty: ask it in words, as in 'how do I reset it?'")
    if len(question) > MAX_QUESTION_CHARS:
        raise ApiError(400, f"The question is longer than {MAX_QUESTION_CHARS:,} characters")
    mode = body.get("mode", "hybrid")
    if mode not in MODES:
        raise ApiError(400, f"Unknown mode {str(mode)[:40]!r}: choose keyword, semantic or hybrid")
    try:
        model = chat() if chat is not None else build_chat_model(answer_settings(view))
    except KBError as exc:
        raise ApiError(409, f"no chat model configured: {exc}") from None
    try:
        answer = answer_question(view, question, SearchOptions(k=8, mode=mode), chat=model)
    except AnswerError as exc:
        raise ApiError(502, str(exc)) from None
    except KBError as exc:
        raise ApiError(400, str(exc)) from None
    return {
        "answer": answer.text,
        "citations": [
            {
                "n": e.n,
                "path": e.source,
                "location": e.location,
                "line": e.line,
                "page": e.page,
                "chunk_id": e.id,
            }
            for e in answer.citations
        ],
        "refused": answer.refused,
        "reason": answer.message or None,
    }
