"""The knowledge base as tools for LLM agents: ``knowledge_search``, ``knowledge_get`` and
``knowledge_stats``; when writing is allowed (``allow_write``, ``kb mcp --allow-write``),
``knowledge_add`` and ``knowledge_delete`` too.

Each tool has a ``name``, a ``description`` and an ``input_schema`` (JSON Schema), offers it as
:meth:`~KnowledgeTool.json_schema` and as an OpenAI function-calling definition
(:meth:`~KnowledgeTool.to_openai_tool`), validates its arguments against that schema and
answers with text meant for a model's context. A tool never raises into the agent loop: bad
arguments and failures come back as one ``Error: ...`` line (:meth:`~KnowledgeTool.call` also
says so with ``is_error``); unexpected exceptions are logged on the ``kbcli.agent.tools.read``
logger.

Scopes: a tool built over a :class:`~kbcli.knowledge_base.ScopedKnowledgeBase`
(``kb.as_tool(filter=...)``, ``knowledge_tools(kb, filter=...)``) reads only through it. The
``filter`` argument a caller sends is validated and ANDed with the scope, so it can only narrow
what the tool sees; unknown arguments are refused; an id or path the scope hides is reported
exactly like an unknown one, and an empty search's reason (a source nothing is indexed under, a
filter key no chunk has) is judged over the scope alone.
The MCP server (:mod:`kbcli.agent.mcp.server`) serves these same tool objects.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kbcli.agent.get import (
    SHARED,
    AmbiguousPathError,
    LinesCache,
    Shown,
    chunk_lines,
    find_page,
    page_lines,
    read_chunk,
    read_file,
)
from kbcli.agent.tools.base import (
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    Citation,
    KnowledgeTool,
    ToolArgumentError,
    ToolResult,
    error_result,
    reader_of,
    text_argument,
    whole_number,
)
from kbcli.agent.tools.write import KnowledgeAddTool, KnowledgeDeleteTool, NoteWriter
from kbcli.config.vocabulary import MODES
from kbcli.errors import InvalidOptionError, NotFoundError
from kbcli.filters.model import canonical_paths, validate_filter
from kbcli.protocols import DocumentCatalog, supports
from kbcli.search import hints
from kbcli.search.freshness import hash_limit, settle, state_words, store_of
from kbcli.search.location import locate_lines
from kbcli.search.pipeline import RAGPipeline
from kbcli.types import STALE_POLICIES, SearchOptions, SearchResult, normalize_mode
from kbcli.views import Reader

if TYPE_CHECKING:
    from typing_extensions import Unpack

NO_RESULTS = "No relevant knowledge found."
# Empty answers with the caller's filter to blame (``where``: "under '/docs/'", "at '/a.md'"):
NO_SOURCE = (
    "No relevant knowledge found: nothing you can search is indexed {where} "
    "(check the source path in the filter argument)."
)
NO_KEY = (
    "No relevant knowledge found: no chunk you can search has the metadata key {names} "
    "(check the key's spelling in the filter argument)."
)
# Sources, and keys, looked up to explain one empty answer (an unknown key reads every chunk
# in scope).
MAX_HINT_CHECKS = 5
NO_QUERY = "Error: No query provided"
NO_CHUNK = "Error: No chunk with that id in this knowledge base (knowledge_search gives ids)"
NO_FILE = "Error: No indexed file at that path (knowledge_search shows the sources)"
MAX_K = 50
DEFAULT_K = 3  # the reference's k for run(); also default_k's default
MAX_FILTER_CHARS = 4000
MAX_PATH_CHARS = 4096
MAX_LINES = 2000  # lines of a file per knowledge_get answer
MAX_CHARS = 100_000  # about this many characters per knowledge_get answer
LINE_WIDTH = 2000  # a longer line is cut (with CUT), never wrapped: its number stays the file's
CUT = " [... {count} more characters cut]"


class SearchToolOptions(TypedDict, total=False):
    """The keyword options of :class:`KnowledgeSearchTool`, as :func:`knowledge_tools` and
    ``kb mcp`` pass them on."""

    default_k: int
    default_mode: str
    access_filter: dict[str, Any] | None
    max_k: int
    max_query_chars: int


class KnowledgeSearchTool(KnowledgeTool):
    """``knowledge_search``: searches a knowledge base and answers with a numbered list, each
    hit cited with its source, page and heading where known and its chunk id.

    ``pipeline`` is anything with ``search_with(query, options)`` (a
    :class:`~kbcli.pipeline.KnowledgeBase` or a
    :class:`~kbcli.knowledge_base.ScopedKnowledgeBase`) or
    ``search(query, options)`` (a :class:`~kbcli.pipeline.RAGPipeline`). ``access_filter``
    restricts every search to documents that pass it (over a knowledge base, through
    :meth:`~kbcli.pipeline.KnowledgeBase.scoped`); a caller's ``filter`` argument is ANDed with
    it, so it can narrow the search, never widen it. Arguments: ``query`` (at most
    ``max_query_chars`` characters), ``k`` (1 to ``max_k``), ``mode`` (keyword, semantic,
    hybrid), ``filter`` (optional), ``stale`` (``flag``, ``hide`` or ``fail``: see
    :mod:`kbcli.search.freshness`; over a knowledge base each hit's state is checked and a
    stale one says so beside its source; a bare pipeline has no ledger to check against).
    """

    name = "knowledge_search"
    description = (
        "Search the local knowledge base for passages relevant to a question. Returns a "
        "numbered list of the best matching passages (chunks, not whole files: several may "
        "come from one file), each cited with its source file (the line that matches best and "
        "the lines the passage covers, page and heading where known) and its chunk id; "
        "knowledge_get reads a chunk by id or lines of the file by path."
    )

    def __init__(
        self,
        pipeline: Reader | RAGPipeline,
        *,
        default_k: int = DEFAULT_K,
        default_mode: str = "hybrid",
        access_filter: dict[str, Any] | None = None,
        max_k: int = MAX_K,
        max_query_chars: int = MAX_QUERY_CHARS,
    ):
        self.access_filter = validate_filter(access_filter)
        if self.access_filter and not isinstance(pipeline, RAGPipeline):
            pipeline = reader_of(pipeline).scoped(self.access_filter)
        self.pipeline = pipeline
        self.max_k = max_k
        self.default_k = whole_number("default_k", default_k, 1, max_k)
        self.default_mode = normalize_mode(default_mode)
        self.max_query_chars = max_query_chars

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the tool's arguments."""
        return {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What to search for.",
                    "minLength": 1,
                    "maxLength": self.max_query_chars,
                },
                "k": {
                    "type": "integer",
                    "description": "How many passages to return.",
                    "default": self.default_k,
                    "minimum": 1,
                    "maximum": self.max_k,
                },
                "mode": {
                    "type": "string",
                    "enum": list(MODES),
                    "description": "keyword (BM25), semantic (vectors) or hybrid (both).",
                    "default": self.default_mode,
                },
                "stale": {
                    "type": "string",
                    "enum": list(STALE_POLICIES),
                    "description": (
                        "Passages whose file changed or is gone since it was indexed: flag "
                        "(returned, marked beside their source), hide (left out, others fill "
                        "in) or fail (an error saying the index is behind)."
                    ),
                    "default": "flag",
                },
                "filter": {
                    "type": "object",
                    "description": (
                        "Optional metadata filter that narrows the search, e.g. "
                        '{"source": "/docs/a.md"} or {"year": {"$gte": 2024}}.'
                    ),
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        }

    def options(self, arguments: dict[str, Any]) -> tuple[str, SearchOptions]:
        """Validate ``arguments`` into ``(query, SearchOptions)``; raises ToolArgumentError."""
        query, options, _ = self._parse(arguments)
        return query, options

    def _parse(self, arguments: dict[str, Any]) -> tuple[str, SearchOptions, dict[str, Any] | None]:
        """:meth:`options` and the caller's own validated ``filter`` (without the scope; its
        paths canonical)."""
        self.check_keys(arguments, aliases=("input",))
        query = arguments.get("query")
        if query is None or query == "":
            query = arguments.get("input")
        if query is None or (isinstance(query, str) and not query.strip()):
            raise ToolArgumentError(NO_QUERY)
        query = text_argument("query", query, self.max_query_chars)
        k = arguments.get("k")
        k = self.default_k if k is None else whole_number("k", k, 1, self.max_k)
        mode = arguments.get("mode")
        if mode is None:
            mode = self.default_mode
        elif not isinstance(mode, str):
            raise ToolArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        mode = normalize_mode(mode)
        caller = arguments.get("filter")
        if caller is not None:
            if len(json.dumps(caller, default=str)) > MAX_FILTER_CHARS:
                raise ToolArgumentError(
                    f"filter is too long (at most {MAX_FILTER_CHARS} characters)"
                )
            try:
                caller = canonical_paths(validate_filter(caller))
            except InvalidOptionError as exc:
                raise ToolArgumentError(f"invalid filter: {exc}") from None
        stale = arguments.get("stale", "flag")
        if stale not in STALE_POLICIES:
            raise ToolArgumentError(
                f"stale must be one of {', '.join(STALE_POLICIES)}, got {str(stale)[:40]!r}"
            )
        # the access filter is a scope: it confines the statistics too (kbcli.text.bm25, "Scopes")
        options = SearchOptions(
            k=k, mode=mode, filter=caller, scope=self.access_filter, stale=stale
        )
        return query, options, caller

    def search(self, arguments: dict[str, Any]) -> list[Citation]:
        """Validated search: the hits as citations (raises ToolArgumentError / KBError)."""
        return self._search(*self.options(arguments))

    def _search(self, query: str, options: SearchOptions) -> list[Citation]:
        results: Sequence[SearchResult]
        if isinstance(self.pipeline, RAGPipeline):
            results = self.pipeline.search(query, options)
        else:  # a KnowledgeBase or a scoped view of one: each hit fresh, on its best line
            view = self.pipeline

            def ranked(depth: int) -> Sequence[SearchResult]:
                opts = options if depth == options.k else dataclasses.replace(options, k=depth)
                return view.search_with(query, opts)

            store = store_of(view)
            limit = hash_limit(getattr(reader_of(view).kb, "config", None))
            results = settle(store, options.k, options.stale, ranked, _same, limit=limit)
            locate_lines(view, query, results, options.filter, options.scope)
        return [Citation.from_result(n, hit) for n, hit in enumerate(results, start=1)]

    def empty_answer(self, caller_filter: dict[str, Any] | None) -> str:
        """What a search that found nothing answers: :data:`NO_RESULTS`, or with the caller's
        ``filter`` to blame, which of its sources nothing is indexed under, else which of its
        keys no chunk has. Both are judged only over the chunks this tool can see, so the
        answer says nothing of what a scope hides."""
        if not caller_filter or isinstance(self.pipeline, RAGPipeline):
            return NO_RESULTS  # a bare RAGPipeline has no catalog to ask
        view = reader_of(self.pipeline)
        pins = hints.source_pins(caller_filter)[:MAX_HINT_CHECKS]
        missing = hints.unindexed(view, pins)
        if missing:
            return NO_SOURCE.format(where=hints.listed(missing))
        unknown = hints.unknown_keys(view, caller_filter, most=MAX_HINT_CHECKS)
        if unknown:
            return NO_KEY.format(names=hints.listed([hints.quoted(key) for key in unknown]))
        return NO_RESULTS

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        query, options, caller = self._parse(arguments)
        citations = self._search(query, options)
        if not citations:
            return ToolResult(self.empty_answer(caller))
        lines = [f"{c.number}. {' '.join(c.text.split())} ({c.label()})" for c in citations]
        return ToolResult("\n".join(lines), citations)

    def run_sync(
        self, query: str | None = None, k: int = DEFAULT_K, mode: str | None = None, **kwargs: Any
    ) -> str:
        """Blocking version of :meth:`run`."""
        arguments = {
            key: value for key, value in (("query", query), ("mode", mode)) if value is not None
        }
        return self.call({**arguments, "k": k, **kwargs}).text

    async def run(
        self, query: str | None = None, k: int = DEFAULT_K, mode: str | None = None, **kwargs: Any
    ) -> str:
        """Search and format the hits as ``1. <text> (source: <path>, page 2; id: <id>)`` lines.

        ``k`` is the reference's default, 3, whatever ``default_k`` says (which is the ``k`` of a
        :meth:`call` that leaves it out, and the schema's default). An empty query (also looked
        up in ``kwargs["input"]``) gives ``Error: No query provided``; no hits give ``No relevant
        knowledge found.`` (with the reason when a ``filter`` names a source nothing is indexed
        under, or a key no chunk has: :meth:`empty_answer`); bad arguments an ``Error: ...``
        line.
        """
        import asyncio

        return await asyncio.to_thread(self.run_sync, query, k, mode, **kwargs)


class KnowledgeGetTool(KnowledgeTool):
    """``knowledge_get``: one chunk by ``id``, or lines of an indexed file by ``path`` with an
    optional ``start_line``/``end_line`` range (1-based, inclusive), within the scope.

    A file's lines are numbered as ``kb get`` numbers them (the numbers of a hit's ``line``,
    which :class:`Citation` labels show): the file read again while its bytes are the ones
    indexed and every chunk of it is in the scope, else its indexed chunks in the scope, each
    at the line it starts on (:mod:`kbcli.agent.get`). A file the scope hides answers exactly like
    an unknown one. An answer holds at most ``max_lines`` lines and about ``max_chars``
    characters, with the ``start_line`` to go on from; a line longer than ``line_width`` is
    cut with a marker, never wrapped (its line number stays the file's). Files read again are
    kept in ``cache`` (a :class:`~kbcli.agent.get.LinesCache`; default one per process) while
    their bytes stay the same."""

    name = "knowledge_get"
    description = (
        "Read from the knowledge base: a chunk by its id (from knowledge_search), or the lines "
        "of an indexed file by its source path, optionally only lines start_line to end_line "
        "(the line numbers knowledge_search cites). Give either id or path."
    )

    def __init__(
        self,
        view: Reader,
        *,
        max_lines: int = MAX_LINES,
        line_width: int = LINE_WIDTH,
        max_chars: int = MAX_CHARS,
        cache: LinesCache | None = None,
    ):
        self.view = reader_of(view)
        self.max_lines = max_lines
        self.line_width = line_width
        self.max_chars = max_chars
        self.cache = SHARED if cache is None else cache

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the tool's arguments."""
        return {
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "description": "A chunk id, as knowledge_search cites it.",
                    "maxLength": MAX_ID_CHARS,
                },
                "path": {
                    "type": "string",
                    "description": "A file's source path, as knowledge_search cites it "
                    "(PATH#page=N: that page of a PDF), or the end of it that only one file "
                    "has (lsof.md, common/lsof.md).",
                    "maxLength": MAX_PATH_CHARS,
                },
                "start_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "First line to return (with path; default 1).",
                },
                "end_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": f"Last line to return (with path; at most {self.max_lines} "
                    "lines per call).",
                },
            },
            "additionalProperties": False,
        }

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        self.check_keys(arguments)
        chunk_id, path = arguments.get("id"), arguments.get("path")
        if (chunk_id is None) == (path is None):
            raise ToolArgumentError(
                "give either id (a chunk) or path (a file), not both or neither"
            )
        if chunk_id is not None:
            if "start_line" in arguments or "end_line" in arguments:
                raise ToolArgumentError("start_line and end_line go with path, not with id")
            return self._chunk(text_argument("id", chunk_id, MAX_ID_CHARS))
        return self._file(text_argument("path", path, MAX_PATH_CHARS), arguments)

    def _chunk(self, chunk_id: str) -> ToolResult:
        shown = read_chunk(self.view, chunk_id)
        if shown is None:
            # The id is not echoed: a hidden id and an unknown one get the very same answer.
            return error_result(NO_CHUNK)
        doc = shown.documents[0]
        citation = Citation.from_result(1, SearchResult(doc, 1.0, freshness=shown.freshness))
        citation.score = None
        index = doc.metadata.get("chunk_index")
        extra = f", chunk {index}" if isinstance(index, int) else ""
        return ToolResult(f"[{citation.label()}{extra}]\n{doc.text}", [citation])

    def _file(self, path: str, arguments: dict[str, Any]) -> ToolResult:
        start = arguments.get("start_line")
        end = arguments.get("end_line")
        paged = find_page(self.view, path)  # PATH#page=N: a hit's location on a page
        if paged is not None:
            path = paged[0]
            try:
                first, last_line = page_lines(*paged)
            except InvalidOptionError as exc:
                raise ToolArgumentError(str(exc)) from None
            if start is None and end is None:
                start, end = first, last_line
        start = 1 if start is None else whole_number("start_line", start, 1, 10**9)
        if end is not None:
            end = whole_number("end_line", end, 1, 10**9)
            if end < start:
                raise ToolArgumentError(f"end_line ({end}) is before start_line ({start})")
        last = start + self.max_lines - 1 if end is None else min(end, start + self.max_lines - 1)
        try:
            shown = read_file(self.view, path, start, last, cache=self.cache)
        except NotFoundError:
            return error_result(NO_FILE)
        except AmbiguousPathError as exc:  # names files of the scope only
            raise ToolArgumentError(str(exc)) from None
        except InvalidOptionError as exc:  # a range past the end, said in the tool's terms
            raise ToolArgumentError(str(exc).replace("Line ", "start_line ", 1)) from None
        if shown.origin == "file":
            text, shown_last = self._numbered(shown)
        else:
            text, shown_last = self._chunks(shown, start)
        citation = Citation(number=1, id="", text=text.split("\n", 1)[-1], source=shown.source)
        citation.freshness = shown.freshness
        citation.line = citation.line_start = start
        citation.line_end = shown_last
        return ToolResult(text, [citation])

    def _numbered(self, shown: Shown) -> tuple[str, int]:
        """The file's lines as ``NUMBER  text``, within the bounds, under a header."""
        width = len(str(shown.lines[-1][0]))
        body: list[str] = []
        used = 0
        for number, line in shown.lines:
            row = f"{number:>{width}}  {self._cut(line)}"
            if body and used + len(row) + 1 > self.max_chars:
                break
            body.append(row)
            used += len(row) + 1
        first, last = shown.lines[0][0], shown.lines[len(body) - 1][0]
        more = "" if last == shown.total else f" (more: start_line={last + 1})"
        header = (
            f"[source: {shown.source}; lines {first}-{last} of {shown.total}{more}{_state(shown)}]"
        )
        return "\n".join([header, *body]), last

    def _chunks(self, shown: Shown, start: int) -> tuple[str, int]:
        """The indexed chunks covering the range, each under its first line and id. The header
        is the same whatever the reason the file's own lines are not shown, so it says nothing
        about what a scope hides."""
        blocks: list[str] = []
        spans: list[tuple[int, int]] = []
        used = count = 0
        for (first, text), doc in zip(shown.lines, shown.documents, strict=True):
            rows = [self._cut(line) for line in text.split("\n")]
            block = "\n".join([f"[line {first}; id: {doc.id}]", *rows])
            over = used + len(block) + 1 > self.max_chars or count + len(rows) > self.max_lines
            if blocks and over:
                break
            blocks.append(block)
            spans.append(chunk_lines(doc, first))
            used += len(block) + 1
            count += len(rows)
        last = max(stop for _, stop in spans)
        following = shown.following
        if len(blocks) < len(shown.lines):
            following = max(shown.lines[len(blocks)][0], spans[-1][0] + 1)
        more = "" if following is None else f" (more: start_line={following})"
        header = (
            f"[source: {shown.source}; indexed chunks covering lines {start}-{last}{more}; "
            "the file's own lines are not available, so each chunk is shown from the line "
            f"it starts on{_state(shown)}]"
        )
        return "\n".join([header, *blocks]), last

    def _cut(self, line: str) -> str:
        if len(line) <= self.line_width:
            return line
        return f"{line[: self.line_width]}{CUT.format(count=len(line) - self.line_width)}"


def _same(result: SearchResult) -> SearchResult:
    return result


def _state(shown: Shown) -> str:
    """``; changed since indexed`` (the file's state) for a header, when it is not current."""
    words = state_words(shown.freshness)
    return f"; {words}" if words else ""


class KnowledgeStatsTool(KnowledgeTool):
    """``knowledge_stats``: how many chunks and sources the (scoped) index holds, its embedder
    and when it last took in documents."""

    name = "knowledge_stats"
    description = (
        "Describe the knowledge base: how many chunks and source files it holds, the embedder "
        "it was built with and when documents were last added."
    )

    def __init__(self, view: Reader):
        self.view = reader_of(view)

    def figures(self) -> dict[str, Any]:
        """``chunks``, ``sources``, ``embedder`` and ``last_ingest`` of the scope."""
        store = self.view.kb.store
        if self.view.filter is None and supports(store, DocumentCatalog):
            figures = store.stats()  # the whole index: the store's own figures are cheaper
        else:
            figures = self.view.stats()
        return {key: figures.get(key) for key in ("chunks", "sources", "embedder", "last_ingest")}

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        self.check_keys(arguments)
        figures = self.figures()
        embedder = figures.get("embedder")
        if isinstance(embedder, dict):
            dim = embedder.get("dimension")
            embedder = f"{embedder.get('provider')}/{embedder.get('model')}" + (
                f", {dim} dimensions" if dim else ""
            )
        lines = [
            f"chunks: {figures.get('chunks') or 0}",
            f"sources: {figures.get('sources') or 0}",
            f"embedder: {embedder or 'none yet'}",
            f"last ingest: {figures.get('last_ingest') or 'never'}",
        ]
        return ToolResult("\n".join(lines))


def knowledge_tools(
    kb: Reader,
    filter: dict[str, Any] | None = None,
    *,
    allow_write: bool = False,
    writer: NoteWriter | None = None,
    **search_options: Unpack[SearchToolOptions],
) -> list[KnowledgeTool]:
    """``[knowledge_search, knowledge_get, knowledge_stats]`` over ``kb`` (a knowledge base or
    a scoped view), narrowed to ``filter`` when given; with ``allow_write`` (an explicit
    opt-in) also ``knowledge_add`` and ``knowledge_delete``, inside the same scope, the notes
    added by ``writer`` (a :class:`~kbcli.agent.tools.write.NoteWriter`: who, under which write
    limits; default one named ``agent`` with the default limits).
    ``search_options`` go to :class:`KnowledgeSearchTool` (``default_k``, ``default_mode``,
    ``max_k``...)."""
    view = reader_of(kb)
    if filter:
        view = view.scoped(filter)
    tools: list[KnowledgeTool] = [
        KnowledgeSearchTool(view, **search_options),
        KnowledgeGetTool(view),
        KnowledgeStatsTool(view),
    ]
    if allow_write:
        writer = writer or NoteWriter("agent")
        tools += [KnowledgeAddTool(view, writer=writer), KnowledgeDeleteTool(view, writer)]
    return tools
