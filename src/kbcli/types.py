"""Plain data types shared by every part of kbcli."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, overload

from kbcli.config.vocabulary import FUSIONS, MODE_ALIASES, MODES, REWRITE_MODES
from kbcli.errors import InvalidOptionError
from kbcli.filters.model import CheckedFilter, ensure_checked


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Document:
    """A piece of text (usually one chunk of a file) with its metadata and optional embedding."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=_now)
    embedding: list[float] | None = None


# Notes: chunks an agent stored with knowledge_add (kbcli.agent.tools.write), not parts of a file.
NOTE_BY = "note_by"  # the metadata key naming a note's writer (a token's name, or "stdio")
# What presents a chunk as a place in a file (ingest sets these; every surface shows them as
# a file location or ranks by them): a note may not set them, nor NOTE_BY itself.
LOCATION_KEYS = frozenset(
    {"chunk_index", "page", "pages", "heading", "title", "char_start", "char_end", "line",
     "line_end", "ocr", "seconds"}
)  # fmt: skip


def note_author(metadata: dict[str, Any]) -> str | None:
    """The writer of a note (an agent's knowledge_add), or None for any other chunk."""
    author = metadata.get(NOTE_BY)
    return author if isinstance(author, str) and author else None


def note_label(metadata: dict[str, Any]) -> str | None:
    """``note by acme`` for a note (how every surface marks one), else None."""
    author = note_author(metadata)
    return None if author is None else f"note by {author}"


@dataclass(frozen=True)
class Finding:
    """One check of ``kb doctor``: ``check`` names what was compared, ``ok`` whether it holds,
    ``detail`` says why not (one line), ``repaired`` whether ``doctor(repair=True)`` fixed it
    (``action`` says how)."""

    check: str
    ok: bool
    detail: str = ""
    repaired: bool = False
    action: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``kb doctor --json``."""
        return {
            "check": self.check,
            "status": "repaired" if self.repaired else ("ok" if self.ok else "drift"),
            "detail": self.detail,
            "action": self.action,
        }


@dataclass(frozen=True)
class LineMatch:
    """Where a hit is inside its file (set by :func:`kbcli.search.location.locate_lines`): ``line``,
    the
    line of its chunk holding the most query-term weight (1-based, numbered as the file's
    editor and ``kb get`` number it), or the chunk's first line when none holds a query term
    (``matched`` False); ``context``, that line with a few neighbours as ``(number, text)``,
    for a snippet."""

    line: int
    context: tuple[tuple[int, str], ...] = ()
    matched: bool = True


@dataclass
class SearchResult:
    """One hit: a document and its score (higher is better; meaning depends on the mode).
    ``match`` says which line of the chunk's file the hit is for, once located (the chunk's
    own first line stays in ``document.metadata["line"]``)."""

    document: Document
    score: float
    explain: dict[str, Any] | None = None
    match: LineMatch | None = None
    freshness: Freshness | None = None


#: What a hit's passage is, compared with its file on disk (:mod:`kbcli.search.freshness`):
#: ``current`` (size and mtime match the indexed version, or its hash does), ``changed`` (the
#: file differs), ``missing`` (gone or unreadable), ``vectors_pending`` (current but without
#: a vector yet: keyword search finds it, semantic search not yet), ``not_a_file`` (text added
#: with ``kb add`` or an agent's note: nothing on disk to compare).
FRESHNESS_STATES = ("current", "changed", "missing", "vectors_pending", "not_a_file")
#: The states whose passage may no longer say what the file says (``--stale hide|fail``).
STALE_STATES = ("changed", "missing")
#: What a search does with such hits (``--stale``, ``SearchOptions.stale``): leave them out
#: and fill up from further hits, mark them (the default), or fail (exit code 6).
STALE_POLICIES = ("hide", "flag", "fail")


@dataclass(frozen=True)
class Freshness:
    """How fresh one hit is: its ``state`` (one of :data:`FRESHNESS_STATES`) and when its
    file was indexed (``indexed_at``, ISO 8601; a chunk of no file: when it was added)."""

    state: str
    indexed_at: str | None = None

    @property
    def stale(self) -> bool:
        """True when the passage may no longer match its file (changed or missing)."""
        return self.state in STALE_STATES

    def as_json(self) -> dict[str, Any]:
        """``{"state": ..., "indexed_at": ...}`` (what ``kb search --json`` and MCP show)."""
        return {"state": self.state, "indexed_at": self.indexed_at}


@dataclass(frozen=True)
class Watermark:
    """How current an index is as a whole: when it last committed a change (``changed_at``,
    ISO 8601; None when the store does not say), whether an ingest holds its writer lock now
    (``syncing``), and how many chunks still wait for a vector (``vectors_pending``)."""

    changed_at: str | None
    syncing: bool
    vectors_pending: int

    def as_json(self) -> dict[str, Any]:
        """``{"changed_at": ..., "syncing": ..., "vectors_pending": ...}``."""
        return {
            "changed_at": self.changed_at,
            "syncing": self.syncing,
            "vectors_pending": self.vectors_pending,
        }


def normalize_mode(mode: str) -> str:
    """Return the canonical mode name for ``mode`` or raise naming the valid ones."""
    name = str(mode).strip().lower()
    name = MODE_ALIASES.get(name, name)
    if name not in MODES:
        aliases = ", ".join(f"{a} (= {m})" for a, m in MODE_ALIASES.items())
        raise InvalidOptionError(
            f"Unknown search mode {mode!r}: choose one of {', '.join(MODES)} (aliases: {aliases})"
        )
    return name


MAX_K = 1_000_000  # results per search; beyond it candidate pools overflow SQLite integers
#: The dense weight of weighted hybrid fusion when a search does not choose one (what
#: ``limits.rerank_alpha`` defaults to; ``KnowledgeBase.from_config`` hands the configured one
#: to its retriever).
DEFAULT_ALPHA = 0.6


@dataclass
class SearchOptions:
    """How to search.

    ``alpha`` weights the dense route in weighted hybrid fusion; left out it is
    :data:`DEFAULT_ALPHA` (0.6) and ``alpha_chosen`` is False, so the retriever's own weight
    applies (``limits.rerank_alpha`` for a knowledge base built from the configuration) and it
    may still protect a weak dense route (see :class:`~kbcli.search.retrievers.HybridRetriever`).
    Options read no configuration. ``fusion`` is ``"weighted"`` (min-max
    normalised,
    ``alpha * dense + (1 - alpha) * keyword``) or ``"rrf"`` (reciprocal rank fusion, k=60).
    ``filter`` is a metadata filter applied before scoring (BM25's statistics stay those of the
    whole index); ``scope`` is an access scope (what :meth:`KnowledgeBase.scoped` sets): a filter
    applied before scoring that also confines every corpus statistic to its documents, so a
    search scores as if the index held only them (``filter`` then narrows within it; see
    :mod:`kbcli.text.bm25`). ``min_score`` drops weaker hits.
    ``mmr`` (lambda in [0, 1]) re-orders the candidate pool by maximal marginal relevance:
    1 is pure relevance, lower values favour results unlike those already chosen. ``dedupe``
    collapses chunks with identical text (copied files) to their best hit. ``source_weight``
    is how much a chunk's whole source (file) counts in its keyword score, ``chunk BM25 +
    source_weight * source BM25`` (``None``: the retriever's, else ``limits.source_weight``, 2.0
    by default; 0: chunk only).

    Second stage (see :class:`~kbcli.pipeline.RAGPipeline`): ``rerank`` switches the configured
    reranker on or off for this search (``None``: on when one is configured); ``candidates`` is
    how many hits are recalled for it (``None``: ``rag.rerank.candidates``; never below 2×k);
    ``min_relevance`` drops hits the reranker scores lower (``None``: ``rag.rerank.min_relevance``);
    ``rewrite`` is ``none``, ``hyde``, ``expand`` or ``both`` (``None``: ``rag.rewrite.mode``).

    ``stale`` is what a search does with hits whose file changed or is gone since it was
    indexed (:mod:`kbcli.search.freshness`): ``flag`` (the default) returns them with their
    state, ``hide`` leaves them out and fills up from further hits, ``fail`` raises
    :class:`~kbcli.errors.IndexBehindError` (``kb`` exits 6).
    """

    k: int = 5
    mode: str = "hybrid"
    alpha: float | None = None
    filter: dict[str, Any] | None = None
    fusion: str = "weighted"
    min_score: float | None = None
    explain: bool = False
    mmr: float | None = None
    dedupe: bool = True
    source_weight: float | None = None
    alpha_chosen: bool | None = field(default=None, repr=False, compare=False)
    rerank: bool | None = None
    candidates: int | None = None
    min_relevance: float | None = None
    rewrite: str | None = None
    scope: dict[str, Any] | None = None
    stale: str = "flag"

    def __post_init__(self) -> None:
        self.mode = normalize_mode(self.mode)
        if self.stale not in STALE_POLICIES:
            raise InvalidOptionError(
                f"Unknown stale policy {self.stale!r}: choose one of {', '.join(STALE_POLICIES)}"
            )
        # checked once where they enter (here), then passed down as they are: options made
        # from options (dataclasses.replace) keep the checked filters without a second check
        self.filter = ensure_checked(self.filter)
        self.scope = ensure_checked(self.scope)
        if self.alpha_chosen is None:
            self.alpha_chosen = self.alpha is not None
        if self.alpha is None:
            self.alpha = DEFAULT_ALPHA
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InvalidOptionError(f"k must be a positive whole number, got {self.k!r}")
        if self.k > MAX_K:
            raise InvalidOptionError(f"k must be at most {MAX_K}, got {self.k}")
        if self.alpha is not None:
            if not isinstance(self.alpha, (int, float)) or not 0.0 <= float(self.alpha) <= 1.0:
                raise InvalidOptionError(f"alpha must be between 0 and 1, got {self.alpha!r}")
            self.alpha = float(self.alpha)
        if self.mmr is not None:
            if (
                isinstance(self.mmr, bool)
                or not isinstance(self.mmr, (int, float))
                or not 0.0 <= float(self.mmr) <= 1.0
            ):
                raise InvalidOptionError(f"mmr lambda must be between 0 and 1, got {self.mmr!r}")
            self.mmr = float(self.mmr)
        if self.source_weight is not None:
            if (
                isinstance(self.source_weight, bool)
                or not isinstance(self.source_weight, (int, float))
                or not 0.0 <= float(self.source_weight) < float("inf")
            ):
                raise InvalidOptionError(
                    f"source_weight must be a number, 0 or more, got {self.source_weight!r}"
                )
            self.source_weight = float(self.source_weight)
        # nan compares false with every score: a search would silently return nothing
        self.min_score = _finite("min_score", self.min_score)
        if self.candidates is not None and (
            isinstance(self.candidates, bool)
            or not isinstance(self.candidates, int)
            or self.candidates < 1
        ):
            raise InvalidOptionError(
                f"candidates must be a positive whole number, got {self.candidates!r}"
            )
        self.min_relevance = _finite("min_relevance", self.min_relevance)
        if self.rewrite is not None:
            rewrite = str(self.rewrite).strip().lower()
            if rewrite not in REWRITE_MODES:
                raise InvalidOptionError(
                    f"Unknown rewrite mode {self.rewrite!r}: choose one of "
                    f"{', '.join(REWRITE_MODES)}"
                )
            self.rewrite = rewrite
        fusion = str(self.fusion).strip().lower()
        if fusion not in FUSIONS:
            raise InvalidOptionError(
                f"Unknown fusion {self.fusion!r}: choose one of {', '.join(FUSIONS)}"
            )
        self.fusion = fusion

    @property
    def checked_filter(self) -> CheckedFilter | None:
        """``filter`` as the checked filter it is once the options exist."""
        return ensure_checked(self.filter)

    @property
    def checked_scope(self) -> CheckedFilter | None:
        """``scope`` as the checked filter it is once the options exist."""
        return ensure_checked(self.scope)


def _finite(name: str, value: object) -> float | None:
    """``value`` as a float (None stays None), or InvalidOptionError unless a finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidOptionError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass
class SearchResults(Sequence[SearchResult]):
    """The hits of a search and why there may be few: ``hits``, best first, readable as a
    sequence (``len``, iteration, indexing).

    ``refused`` is True when a reranker scored candidates but none reached ``min_relevance``:
    the search found text, just no relevant knowledge. ``candidates`` is how many hits were
    recalled for the reranker and ``best_relevance`` the best reranker score among them.
    """

    hits: list[SearchResult] = field(default_factory=list)
    refused: bool = False
    candidates: int = 0
    best_relevance: float | None = None
    min_relevance: float | None = None

    @overload
    def __getitem__(self, index: int) -> SearchResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[SearchResult]: ...
    def __getitem__(self, index: int | slice) -> SearchResult | list[SearchResult]:
        return self.hits[index]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[SearchResult]:
        return iter(self.hits)


@dataclass
class Section:
    """A span of a loaded file or a chunk of it: text plus structural metadata.

    Loaders return sections (a page of a PDF, a heading's body in markdown) with metadata such
    as ``page`` and ``heading``; chunkers turn sections into chunk sections that add
    ``char_start`` / ``char_end`` (offsets into the loaded text).
    """

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class FileRecord:
    """What an index knows about one ingested file (the file ledger's row)."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    settings: str
    chunk_ids: list[str] = field(default_factory=list)
    indexed_at: str = ""
