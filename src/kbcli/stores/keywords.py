"""What the SQL keyword indexes (SQLite, PostgreSQL) share: the analyzer, the signature they
record, the check that takes over or re-tokenises an index, and what a re-analysis computes.

Each executor keeps its own tables and scoring (:mod:`.sqlite.keyword`,
:mod:`.postgres.keyword`); both plan their changes with :mod:`kbcli.text.bm25`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic

from kbcli.stores.common import outdated
from kbcli.stores.parts import Conn, RowT
from kbcli.text.analysis import (
    TITLE_KEY,
    Analyzer,
    keyword_counts,
    keyword_signature,
    titles_to_add,
)
from kbcli.text.bm25 import (
    ChunkTerms,
    PostingsChange,
    QueryTerm,
    plan_addition,
    plan_removal,
    select_terms,
)
from kbcli.types import Document

#: a stored chunk as a re-analysis reads it: (row id, text, metadata, source row, source)
StoredChunk = tuple[int, str, Mapping[str, Any], int, Any]


class SignedKeywords(Generic[Conn, RowT]):
    """Base of the keyword parts kept in SQL tables; a subclass reads and writes the index's
    metadata and chunk count (:meth:`_get_meta`, :meth:`_set_meta`, :meth:`_chunks`) and
    says where it is (:meth:`_where`)."""

    def __init__(self, analyzer: Analyzer):
        self.analyzer = analyzer

    @property
    def due(self) -> bool:
        """Whether a search left a derived structure for :class:`~.upkeep.Upkeep` to write
        (none here; the SQLite pack says)."""
        return False

    @property
    def signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return keyword_signature(self.analyzer)

    def terms_of(self, doc: Document) -> Counter[str]:
        """Term frequencies of ``doc`` (done before the write lock is taken)."""
        return keyword_counts(self.analyzer, doc.text, doc.metadata)

    def recorded_signature(self, conn: Conn) -> str | None:
        """The signature the index was built with (None: never written)."""
        return self._get_meta(conn, "analyzer")

    def check_signature(self, conn: Conn, *, writing: bool) -> int | None:
        """Make the index match the current analyzer and fields: an empty index is taken over;
        one built with another signature is re-tokenised from the stored chunks when
        ``writing`` (inside the caller's transaction; returns how many chunks), and raises
        :class:`~kbcli.errors.IndexMismatchError` when not (see :func:`.common.outdated`)."""
        recorded = self.recorded_signature(conn)
        signature = self.signature
        if recorded == signature:
            return None
        if recorded is None or (writing and self._chunks(conn) == 0):
            if writing:
                self._set_meta(conn, "analyzer", signature)
            return None
        if writing:
            return self.rebuild(conn)
        raise outdated(self._where(), recorded, signature)

    def reanalyse(
        self, rows: Iterable[StoredChunk], add_titles: bool
    ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, int, Counter[str]]], set[str]]:
        """What re-tokenising ``rows`` changes: the metadata of chunks that get a title (an
        index of a kbcli without titles: each file's chunks get the one ingest would record),
        each chunk's ``(row id, source row, term counts)``, and the vocabulary."""
        rows = list(rows)
        titles = titles_to_add((r[4], r[2]) for r in rows) if add_titles else {}
        titled: list[tuple[int, dict[str, Any]]] = []
        counted: list[tuple[int, int, Counter[str]]] = []
        vocab: set[str] = set()
        for doc, text, meta, src, source in rows:
            if source in titles:
                meta = {**meta, TITLE_KEY: titles[source]}
                titled.append((doc, meta))
            counts = self.terms_of(Document("", text, dict(meta)))
            vocab.update(counts)
            counted.append((doc, src, counts))
        return titled, counted, vocab

    def add(self, conn: Conn, chunks: list[ChunkTerms], new_sources: set[int]) -> None:
        """Index new chunks (their rows exist; ``new_sources`` were created for them): the
        change is planned by :func:`kbcli.text.bm25.plan_addition` and applied in this
        transaction."""
        before = self._before_addition(conn, chunks, new_sources)
        self.apply(conn, plan_addition(chunks, source_postings=before, new_sources=new_sources))

    def remove(self, conn: Conn, rows: Sequence[RowT]) -> None:
        """Unindex chunks, before their rows go (:func:`kbcli.text.bm25.plan_removal`)."""
        if not rows:
            return
        chunks = [self._terms_of_row(r) for r in rows]
        sizes, postings = self._before_removal(conn, chunks)
        self.apply(conn, plan_removal(chunks, source_chunk_count=sizes, source_postings=postings))

    def apply_fresh(self, conn: Conn, chunks: list[ChunkTerms]) -> None:
        """Index ``chunks`` into statistics a rebuild just emptied (no lookup needed)."""
        self.apply(conn, plan_addition(chunks, source_postings=lambda src, term: 0))

    @staticmethod
    def query_terms(
        counts: Mapping[str, int], found: Iterable[tuple[Any, str, int, int]]
    ) -> list[QueryTerm]:
        """The terms a search scores (:func:`kbcli.text.bm25.select_terms`) from the query's term
        counts and the index's ``(id, term, df, sdf)`` rows of its terms."""
        return select_terms(QueryTerm(i, counts[term], df, sdf) for i, term, df, sdf in found)

    def refresh(self, conn: Conn) -> None:
        """Nothing derived to write."""

    def rebuild(self, conn: Conn) -> int:
        raise NotImplementedError

    def apply(self, conn: Conn, change: PostingsChange) -> None:
        raise NotImplementedError

    def _before_addition(
        self, conn: Conn, chunks: list[ChunkTerms], new_sources: set[int]
    ) -> Callable[[int, Any], int]:
        """``source_postings(src, term)`` of the index before ``chunks`` were added."""
        raise NotImplementedError

    def _terms_of_row(self, row: RowT) -> ChunkTerms:
        """A stored row's forward index."""
        raise NotImplementedError

    def _before_removal(
        self, conn: Conn, chunks: list[ChunkTerms]
    ) -> tuple[Callable[[int], int], Callable[[int, Any], int]]:
        """``source_chunk_count(src)`` and ``source_postings(src, term)`` before a removal."""
        raise NotImplementedError

    def _get_meta(self, conn: Conn, key: str) -> str | None:
        raise NotImplementedError

    def _set_meta(self, conn: Conn, key: str, value: str) -> None:
        raise NotImplementedError

    def _chunks(self, conn: Conn) -> int:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError
