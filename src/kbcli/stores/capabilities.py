"""What a store can do, as small runtime-checkable contracts, and how to ask.

The reference :class:`~kbcli.protocols.VectorStoreProtocol` is the least a store does. These
capabilities say what else it can do: :class:`DocumentCatalog` (made of
:class:`DocumentReader`, :class:`DocumentWriter`, :class:`IndexMetadata` and
:class:`EmbedderRecord`), :class:`KeywordIndex`, :class:`VectorIndex`, :class:`FileLedger`,
:class:`EmbeddingCache`, :class:`VectorWriter`, :class:`FreshnessReads` and
:class:`Doctor`. Code outside ``stores/`` talks to a store only through them, asking with
:func:`supports`. Users import them from :mod:`kbcli.protocols`, which re-exports every name
here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # annotations only: the contracts import nothing at run time
    from typing_extensions import TypeIs

    from kbcli.embedders.base import EmbedderInfo
    from kbcli.text.analysis import Analyzer
    from kbcli.types import Document, FileRecord, Finding, SearchResult


# --- the capabilities ------------------------------------------------------------------------
#
# What a store can do beyond the reference VectorStoreProtocol, as small runtime-checkable
# contracts. Retrievers, sync, the CLI and evaluation dispatch on them; a store implements those
# it supports. A caller asks for the narrowest one it uses (a scope reads through
# DocumentReader, a retriever checks the embedder through EmbedderRecord); DocumentCatalog is
# all four document capabilities together, what kb's commands and `kb copy` need. The shared
# test suites in kbcli.testing check each one.


@runtime_checkable
class DocumentReader(Protocol):
    """Reads of a catalog's documents: by id, filtered listings and counts, sources."""

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked (unknown ids are skipped);
        with ``with_embeddings`` each carries its stored vector (None when it has none),
        without it a store may leave the vector out."""
        ...

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
        with_embeddings: bool = False,
    ) -> Iterator[Document]:
        """Documents passing ``filter`` (and of ``source``), oldest first, at most ``limit``."""
        ...

    def list_all(self) -> list[Document]:
        """Every stored document, oldest first, with its embedding."""
        ...

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """How many documents pass ``filter`` (all of them without one)."""
        ...

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of documents, sorted by source."""
        ...


@runtime_checkable
class DocumentWriter(Protocol):
    """Writes to a catalog, each one transaction (several join one :meth:`transaction`)."""

    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction: every change inside commits whole or not at all. Nested
        calls join the outer transaction."""
        ...

    def add(
        self,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Insert or replace ``docs`` (vector: ``embeddings[i]`` or ``doc.embedding``); return
        their ids. ``embedder`` is recorded with the first vectors and checked afterwards."""
        ...

    def replace_source(
        self,
        source: str,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Atomically swap every document whose ``metadata["source"]`` is ``source`` for
        ``docs``: a reader sees the old set or the new one, never both or neither."""
        ...

    def remove(self, ids: list[str]) -> int:
        """Delete documents by id in one transaction; returns how many existed."""
        ...

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id; True when at least one existed (the reference shape)."""
        ...

    def delete_source(self, source: str) -> int:
        """Delete every document of ``source`` (and its file record); returns how many."""
        ...

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Delete every document passing ``filter``; returns how many."""
        ...


@runtime_checkable
class IndexMetadata(Protocol):
    """The index's own metadata, its change counter and figures."""

    def get_meta(self, key: str) -> str | None:
        """A value of the index's own metadata (last ingest time, evaluation fingerprint...)."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the index's own metadata."""
        ...

    @property
    def version(self) -> int:
        """A counter that changes after every committed write (derived caches key on it)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the index (``chunks``, ``sources``, ``files``, ``vectors``,
        ``embedder``, ``analyzer``, ``last_ingest`` ...) for ``kb stats``."""
        ...


@runtime_checkable
class EmbedderRecord(Protocol):
    """The embedder an index's vectors came from: recorded, checked, switched."""

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded with the index's vectors, or None before the first vector."""
        ...

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise :class:`~kbcli.errors.IndexMismatchError` when ``info`` is not the embedder
        the index was built with (provider and model differ, or both dimensions are known and
        differ)."""
        ...

    def reembed(
        self,
        embed: Callable[[list[str]], list[list[float]]],
        info: EmbedderInfo,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every document with ``embed`` and switch the index to ``info`` in one
        step (searches never see two embedders' vectors); returns how many were embedded."""
        ...


@runtime_checkable
class DocumentCatalog(DocumentReader, DocumentWriter, IndexMetadata, EmbedderRecord, Protocol):
    """The documents (chunks) of an index, their metadata, and the index's own metadata: every
    document capability above (:class:`DocumentReader`, :class:`DocumentWriter`,
    :class:`IndexMetadata`, :class:`EmbedderRecord`) and :meth:`close`.

    The catalog is the source of truth: keyword and vector indexes are derived from it and
    change in the same transaction as the documents they index. Filters follow
    :mod:`kbcli.filters.model` and are applied before anything is counted, listed or deleted.
    Documents keep insertion order ("oldest first"); adding an existing id replaces that
    document everywhere and makes it the newest.
    """

    def close(self) -> None:
        """Release the store's resources; it cannot be used afterwards."""
        ...


@runtime_checkable
class KeywordIndex(Protocol):
    """BM25 keyword search over a catalog's documents, kept exact on every change.

    Scores follow :mod:`kbcli.text.bm25` (Lucene idf, chunk BM25 plus ``source_weight`` times the
    BM25 of the chunk's whole source); a store either computes them with that module or is
    checked against it by the parity test. The postings change of a write (computed with
    :func:`kbcli.text.bm25.plan_addition` / :func:`kbcli.text.bm25.plan_removal`) is applied inside
    the
    catalog's transaction. ``filter`` is a pre-filter: chunks it hides are neither scored nor
    counted in their source's score.
    """

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer that turns documents and queries into terms."""
        ...

    @property
    def keyword_signature(self) -> str:
        """What the index's terms depend on (analyzer and indexed fields); recorded with it."""
        ...

    def keyword_search(
        self,
        query: str,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        source_weight: float = 2.0,
        scope: dict[str, Any] | None = None,
    ) -> list[SearchResult]:
        """The ``k`` best BM25 matches among documents passing ``filter``; every hit's
        ``explain`` holds ``bm25_chunk``, ``bm25_source`` and ``source_weight``.

        ``scope`` (an access scope) restricts the documents like a filter and also every corpus
        statistic: hits and scores are those of an index holding only the scope's documents
        (:mod:`kbcli.text.bm25`, "Scopes"). A store whose method takes no ``scope`` is searched with
        the scope ANDed into ``filter`` (nothing outside it is returned; its statistics stay
        index-wide) and a :class:`~kbcli.search.retrievers.KBWarning` says so."""
        ...

    def rebuild_keyword_index(self) -> int:
        """Re-analyse every document with the current analyzer; returns how many."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """Nearest-neighbour search over vectors keyed by a store's integer row ids.

    A derived structure: the catalog holds the vectors, the index can always be rebuilt from
    it. ``allowed`` is a pre-filter: only those ids are candidates, so a search returns
    ``min(k, len(allowed))`` hits whenever that many have vectors (never a post-filtered top
    k). Scores are cosine similarities (or the index's metric), best first, ties by id.
    ``exact`` says whether results equal a brute-force scan.
    """

    @property
    def exact(self) -> bool:
        """True when search results equal a brute-force scan of every vector."""
        ...

    def upsert(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        """Insert or replace the vectors of ``ids``."""
        ...

    def remove(self, ids: Sequence[int]) -> None:
        """Remove the vectors of ``ids`` (unknown ids are ignored); other vectors stay."""
        ...

    def search(
        self, query: Sequence[float], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """``(id, score)`` of the ``k`` nearest vectors among ``allowed`` (all without it)."""
        ...

    def __len__(self) -> int:
        """How many vectors the index holds."""
        ...


@runtime_checkable
class FileLedger(Protocol):
    """What ``kb ingest`` indexed from which file, for incremental sync, and the writer lock.

    ``replace_file`` swaps one file's documents and its record in one transaction, so a crash
    leaves the file at its old version or its new one; several calls inside one
    :meth:`DocumentCatalog.transaction` commit together.
    """

    def writer_lock(self, wait: float) -> AbstractContextManager[None]:
        """Hold the one-writer-at-a-time lock of this index, waiting up to ``wait`` seconds
        before :class:`~kbcli.errors.DatabaseLockedError`."""
        ...

    def file_records(self) -> dict[str, FileRecord]:
        """Every indexed file's record, by absolute path."""
        ...

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap the documents of ``record.path`` for ``docs`` and store ``record``, atomically;
        with ``embedder`` the vectors also go to the embedding cache. Returns how many
        documents were removed."""
        ...

    def replace_files(
        self,
        files: Sequence[
            tuple[FileRecord, list[Document], list[list[float]] | None, EmbedderInfo | None]
        ],
    ) -> list[int]:
        """:meth:`replace_file` of each ``(record, docs, embeddings, embedder)``, all in one
        transaction (a batch of an ingest); returns how many documents each lost."""
        ...

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record (new mtime, same content) without touching its documents."""
        ...

    def checkpoint(self) -> None:
        """Let the store fold its write-ahead log during a long ingest (may do nothing)."""
        ...

    def prepare_search(self) -> None:
        """Build now what the next search would otherwise build first (a derived index), at
        the end of an ingest that changed the index (may do nothing)."""
        ...


@runtime_checkable
class FreshnessReads(Protocol):
    """The small reads that say how fresh a search's hits and the index are
    (:mod:`kbcli.search.freshness`): a few files' ledger records, whether an ingest is
    writing, how many chunks wait for a vector. Each costs a lookup, never a scan of files."""

    def file_records_of(self, paths: Sequence[str]) -> dict[str, FileRecord]:
        """The records of those of ``paths`` that are indexed files, by path."""
        ...

    def ingest_running(self) -> bool:
        """True when an ingest holds :meth:`FileLedger.writer_lock` now, found out without
        taking it (a search never makes an ingest wait)."""
        ...

    def vectors_missing(self) -> int:
        """How many chunks have no vector yet."""
        ...


@runtime_checkable
class EmbeddingCache(Protocol):
    """Vectors by (embedder, text), so unchanged text is never embedded twice."""

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors already computed by ``info``'s embedder for any of ``texts``, by text."""
        ...

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Remember ``vectors`` (text -> vector) for ``info``'s embedder."""
        ...


@runtime_checkable
class VectorWriter(Protocol):
    """A store that can give chunks already in it their vectors, alone: ``kb ingest`` writes
    a file's chunks first (keyword search finds them at once) and their vectors after."""

    def set_vectors(
        self, vectors: Mapping[str, Sequence[float]], *, embedder: EmbedderInfo | None = None
    ) -> int:
        """Store ``vectors`` (chunk id -> vector) for chunks in the index, in one transaction,
        leaving their text, metadata and keyword postings as they are; ids not in the index
        are skipped. ``embedder`` is recorded (or checked) as by ``add``. Returns how many
        chunks got a vector."""
        ...


@runtime_checkable
class Doctor(Protocol):
    """A store that can check its derived structures against its catalog (``kb doctor``).

    ``doctor`` runs every check and returns one :class:`~kbcli.types.Finding` each; a check
    that passes has ``ok=True``. With ``repair=True`` each drifted structure that can be
    rebuilt from the catalog (keyword tables, packed keyword file, vector caches and indexes)
    is rebuilt, and its finding says so (``repaired=True``, ``action``); nothing the catalog
    holds is ever deleted. A stale derived file (an older generation, rebuilt by the next
    search) is not drift; one that claims the current generation but disagrees is.
    """

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check (and with ``repair`` rebuild) the derived structures; one finding each."""
        ...


# --- capability checks ---------------------------------------------------------------------------
#
# isinstance() on a runtime-checkable protocol looks every member up on the object; on Python
# 3.10 and 3.11 that evaluates its properties (for an SQLite store, six queries and ~84 us per
# check; a server-backed store pays a round trip each). supports() asks the object's class
# instead, once per class and protocol, and never evaluates anything.

# Names a protocol class holds that are not members (the list typing keeps for isinstance()).
_NOT_MEMBERS = frozenset(
    {
        "__abstractmethods__", "__annotations__", "__dict__", "__doc__", "__init__",
        "__module__", "__new__", "__slots__", "__subclasshook__", "__weakref__",
        "__class_getitem__", "__parameters__", "__orig_bases__", "__protocol_attrs__",
        "__non_callable_proto_members__", "__type_params__", "__static_attributes__",
        "__firstlineno__", "__annotate__", "__annotate_func__", "__annotations_cache__",
        "_is_protocol", "_is_runtime_protocol",
    }
)  # fmt: skip
_members: dict[type, tuple[tuple[str, bool], ...]] = {}
Capability = TypeVar("Capability")
_gaps: weakref.WeakKeyDictionary[type, dict[type, tuple[str, ...]]] = weakref.WeakKeyDictionary()


def protocol_members(protocol: type) -> tuple[tuple[str, bool], ...]:
    """``(name, is_method)`` for every member ``protocol`` declares, its own and inherited:
    methods (dunder ones such as ``__len__`` included), properties and annotated attributes."""
    found = _members.get(protocol)
    if found is None:
        members: dict[str, bool] = {}
        for base in reversed(protocol.__mro__):
            if base in (object, Protocol, Generic):
                continue
            names = list(vars(base).get("__annotations__", {})) + list(vars(base))
            for name in names:
                if name in _NOT_MEMBERS or name.startswith("_abc_"):
                    continue
                value = vars(base).get(name)
                members[name] = callable(value) and not isinstance(value, property)
        found = _members[protocol] = tuple(sorted(members.items()))
    return found


def _class_gaps(cls: type, protocol: type) -> tuple[str, ...]:
    """The members of ``protocol`` that ``cls`` does not provide (a method set to None counts
    as not provided, as in ``typing``), found in the classes' own dictionaries."""
    try:
        known = _gaps.setdefault(cls, {})
    except TypeError:  # a class that cannot be weakly referenced: not cached
        known = {}
    gaps = known.get(protocol)
    if gaps is None:
        namespaces = [vars(base) for base in cls.__mro__]
        missing = []
        for name, is_method in protocol_members(protocol):
            # the first class in the MRO defining the name decides, as attribute lookup does
            space = next((space for space in namespaces if name in space), None)
            if space is None or (is_method and space[name] is None):
                missing.append(name)
        gaps = known[protocol] = tuple(missing)
    return gaps


def supports(obj: object, protocol: Callable[..., Capability]) -> TypeIs[Capability]:
    """True when ``obj`` has every member of the capability ``protocol`` (a
    :class:`DocumentCatalog`, :class:`KeywordIndex`, :class:`FileLedger`...): what
    ``isinstance(obj, protocol)`` answers, at the cost of a dictionary lookup.

    Members are looked up on ``obj``'s class (once per class, then cached); one the class lacks
    may be an attribute the instance set itself (in its ``__dict__``). No property is evaluated
    and nothing is called, so asking a store what it can do never queries it."""
    if not isinstance(protocol, type):
        raise TypeError(f"supports() needs a protocol class, got {protocol!r}")
    gaps = _class_gaps(type(obj), protocol)
    if not gaps:
        return True
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:  # __slots__ only
        return False
    methods = dict(protocol_members(protocol))
    return all(name in own and not (methods[name] and own[name] is None) for name in gaps)
