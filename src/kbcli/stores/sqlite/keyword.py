"""The BM25 index in SQLite: ``terms`` (df, sdf), source statistics, the chunks' forward indexes.

Changes are planned by :mod:`kbcli.text.bm25` and applied here inside the catalog's transaction.
Every change also appends its chunks to ``keyword_log`` (same transaction), which keeps the
packed postings of :mod:`.packed` exact between merges. There is no postings table: a chunk's
postings are its forward index (``chunks.terms``). Search runs the formula with numpy over the
packed postings, inverted from the forward indexes; in a process without numpy (a whole ``kb
search --mode keyword``) a query of few postings is ranked from the pack on disk by
:mod:`.packread` instead, when that pack holds the snapshot exactly. The parity test checks
both against an independent plain BM25.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.filters.sql import dumps_metadata
from kbcli.stores.keywords import SignedKeywords
from kbcli.stores.parts import Filter
from kbcli.stores.sqlite import catalog, packread
from kbcli.stores.sqlite.catalog import BATCH, ChunkRow, pack_terms, unpack_terms
from kbcli.stores.sqlite.packlog import current_seq, current_tag, pack_path, prune_log
from kbcli.stores.sqlite.packread import SMALL_MAX_POSTINGS
from kbcli.stores.sqlite.ranking import PackedRanking, State
from kbcli.text.analysis import Analyzer, has_title_field
from kbcli.text.bm25 import (
    BM25Params,
    ChunkTerms,
    CorpusStats,
    PostingsChange,
    QueryTerm,
    Scored,
    select_terms,
)

if TYPE_CHECKING:
    from kbcli.stores.sqlite.packfile import Pack
    from kbcli.stores.sqlite.packview import View

_STATE_SQL = (
    "SELECT n, total_length, sources, generation,"
    " (SELECT seq FROM sqlite_sequence WHERE name = 'keyword_log'),"
    " (SELECT value FROM meta WHERE key = 'index_id'),"
    " (SELECT value FROM meta WHERE key = 'keyword_epoch'),"
    " (SELECT value FROM meta WHERE key = 'analyzer') FROM stats WHERE id = 1"
)


class KeywordTables(SignedKeywords[sqlite3.Connection, ChunkRow], PackedRanking):
    """Reads and writes the keyword index of one database for one analyzer: the keyword part
    (:class:`~kbcli.stores.parts.Keywords`) of the SQLite stores."""

    #: set by the store when its database is opened read-only: packs are kept in memory
    read_only = False

    def __init__(
        self, analyzer: Analyzer, path: Path, allowed: catalog.AllowedRowids | None = None
    ):
        super().__init__(analyzer)
        self.path = path
        # rowids a filter allows (catalog.AllowedRowids), shared with the store's dense search
        self.allowed_rowids = allowed if allowed is not None else catalog.AllowedRowids()
        self.packed_path = pack_path(path)
        self._pack: Pack | None = None  # the pack of the view, mapped or built in memory
        self._small: packread.SmallPack | None = None  # the pack as packread maps it
        self._view: tuple[State, View] | None = None  # the view and the snapshot it is of
        # filter -> allowed slots, for self._view; "seen": filters probed once
        self._filters: dict[str, Any] = {}
        self._due = False  # self._pack was built by a search and is not written yet

    def _get_meta(self, conn: sqlite3.Connection, key: str) -> str | None:
        return catalog.get_meta(conn, key)

    def _set_meta(self, conn: sqlite3.Connection, key: str, value: str) -> None:
        catalog.set_meta(conn, key, value)

    def _chunks(self, conn: sqlite3.Connection) -> int:
        return catalog.totals(conn)[0]

    def _where(self) -> str:
        return f"at {self.path}"

    # --- writes --------------------------------------------------------------------------------

    @staticmethod
    def term_ids(conn: sqlite3.Connection, terms: set[str]) -> dict[str, int]:
        """Ids of ``terms``, creating rows (df 0) for new ones."""
        ids: dict[str, int] = {}
        pending = list(terms)
        for start in range(0, len(pending), BATCH):
            part = pending[start : start + BATCH]
            marks = ",".join("?" * len(part))
            ids.update(conn.execute(f"SELECT term, id FROM terms WHERE term IN ({marks})", part))
        missing = [t for t in pending if t not in ids]
        if missing:
            next_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM terms").fetchone()[0]
            new = {t: next_id + i for i, t in enumerate(missing)}
            conn.executemany("INSERT INTO terms (term, id, df) VALUES (?, ?, 0)", new.items())
            ids.update(new)
        return ids

    @staticmethod
    def _source_postings(
        conn: sqlite3.Connection, skip: frozenset[int] = frozenset()
    ) -> Callable[[int, int], int]:
        """``count(src, term)``: how many of ``src``'s chunks (but ``skip``) hold ``term``,
        from their forward indexes, each source read once."""
        seen: dict[int, Counter[int]] = {}

        def count(src: int, term: int) -> int:
            if src not in seen:
                held: Counter[int] = Counter()
                rows = conn.execute("SELECT doc, terms FROM chunks WHERE src = ?", (src,))
                for doc, blob in rows:
                    if doc not in skip:
                        held.update(unpack_terms(blob).keys())
                seen[src] = held
            return seen[src][term]

        return count

    def _before_addition(
        self, conn: sqlite3.Connection, chunks: list[ChunkTerms], new_sources: set[int]
    ) -> Callable[[int, Any], int]:
        # the new rows exist already: the count is of the source as it was without them
        return self._source_postings(conn, frozenset(c.doc for c in chunks))

    @staticmethod
    def _terms_of_row(row: ChunkRow) -> ChunkTerms:
        return ChunkTerms(row.doc, row.src, unpack_terms(row.terms))

    def _before_removal(
        self, conn: sqlite3.Connection, chunks: list[ChunkTerms]
    ) -> tuple[Callable[[int], int], Callable[[int, Any], int]]:
        def chunk_count(src: int) -> int:
            row = conn.execute("SELECT chunks FROM sources WHERE id = ?", (src,)).fetchone()
            return row[0] if row else 0

        return chunk_count, self._source_postings(conn)

    def apply(self, conn: sqlite3.Connection, change: PostingsChange) -> None:
        """Write a planned change: term and source frequencies, source lengths and chunk
        counts, corpus totals; emptied sources are deleted; the chunks go to the log (their
        postings are their forward indexes, written or deleted with their rows)."""
        sign = 1 if change.adding else -1
        prune_log(conn, self.packed_path)
        conn.executemany(
            "INSERT INTO keyword_log (doc) VALUES (?)", ((c.doc,) for c in change.chunks)
        )
        conn.executemany(
            "UPDATE terms SET df = df + ?, sdf = sdf + ? WHERE id = ?",
            ((sign * d, sign * change.sdf.get(t, 0), t) for t, d in change.df.items()),
        )
        if not change.adding:
            conn.executemany(
                "DELETE FROM terms WHERE id = ? AND df <= 0", ((t,) for t in change.df)
            )
            conn.executemany(
                "DELETE FROM sources WHERE id = ?", ((s,) for s in change.emptied_sources)
            )
        conn.executemany(
            "UPDATE sources SET length = length + ?, chunks = chunks + ? WHERE id = ?",
            (
                (sign * change.source_length[s], sign * n, s)
                for s, n in change.source_chunks.items()
                if s not in change.emptied_sources
            ),
        )
        conn.execute(
            "UPDATE stats SET n = n + ?, total_length = total_length + ?, sources = sources + ?"
            " WHERE id = 1",
            (sign * change.chunks_delta, sign * change.length_delta, change.sources_delta),
        )

    def rebuild(self, conn: sqlite3.Connection) -> int:
        """Re-analyse every chunk with the current analyzer; returns how many. An index of a
        kbcli without titles (its signature has no title field) also gets them: each file's
        chunks stored without a title are given the one ingest would record (metadata
        ``title``), in the same transaction."""
        add_titles = not has_title_field(self.recorded_signature(conn) or "")
        conn.execute("DELETE FROM terms")
        conn.execute("UPDATE sources SET length = 0, chunks = 0")
        conn.execute("UPDATE stats SET n = 0, total_length = 0 WHERE id = 1")
        # New term ids: every pack of the old epoch is void, and so is the log.
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('keyword_epoch', ?)", (os.urandom(8).hex(),)
        )
        conn.execute("DELETE FROM keyword_log")
        rows = conn.execute("SELECT doc, text, metadata, src, source FROM chunks").fetchall()
        titled, counted, vocab = self.reanalyse(
            ((doc, text, json.loads(meta), src, source) for doc, text, meta, src, source in rows),
            add_titles,
        )
        if titled:  # stored metadata changes in place: copies of it (Chroma's) are stale
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('metadata_epoch', ?)", (os.urandom(8).hex(),)
            )
            conn.executemany(
                "UPDATE chunks SET metadata = ? WHERE doc = ?",
                ((dumps_metadata(meta), doc) for doc, meta in titled),
            )
        ids = self.term_ids(conn, vocab)
        chunks = []
        for doc, src, counts in counted:
            tf = {ids[t]: n for t, n in counts.items()}
            conn.execute(
                "UPDATE chunks SET length = ?, terms = ? WHERE doc = ?",
                (sum(tf.values()), pack_terms(tf), doc),
            )
            chunks.append(ChunkTerms(doc, src, tf))
        self.apply_fresh(conn, chunks)  # the sources rows stay, every one empty
        conn.execute("DELETE FROM keyword_log")
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('keyword_log_floor', ?)",
            (str(current_seq(conn)),),
        )
        self._set_meta(conn, "analyzer", self.signature)
        return len(rows)

    # --- search --------------------------------------------------------------------------------

    def search(
        self,
        conn: sqlite3.Connection,
        query: str,
        k: int,
        filter: Filter,
        params: BM25Params,
        scope: Filter = None,
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` among those passing ``filter``; with ``scope``,
        among its chunks with its statistics alone (:meth:`_scoped_search`)."""
        counts = self.analyzer.query_counts(query)
        if not counts:
            return []
        # One statement for everything a search checks first (each costs ~10 us).
        n, total, n_sources, generation, seq, index_id, epoch, analyzer = conn.execute(
            _STATE_SQL
        ).fetchone()
        if analyzer is not None and analyzer != self.signature:
            self.check_signature(conn, writing=False)  # raises IndexMismatchError
        stats = CorpusStats(n, total, n_sources)
        state = (f"{index_id or ''}:{epoch or '0'}", generation, seq or 0)
        if n == 0:
            return []
        wanted = list(counts)
        marks = ",".join("?" * len(wanted))
        sql = f"SELECT id, term, df, sdf FROM terms WHERE term IN ({marks})"
        rows: list[tuple[int, float, float, float]] | None = None
        if scope:  # the packed executor: packread has no scope statistics
            found = conn.execute(sql, wanted).fetchall()
            rows = self._scoped_search(conn, counts, found, filter, scope, k, params, state)
            return [Scored(doc, score, chunk, source) for doc, score, chunk, source in rows]
        terms = self.query_terms(counts, conn.execute(sql, wanted))
        if not terms:
            return []
        if "numpy" not in sys.modules and sum(t.df for t in terms) <= SMALL_MAX_POSTINGS:
            pack = self._small_pack(state)
            if pack is not None:  # None from search too: a delta too large to apply here
                rows = packread.search(conn, pack, terms, stats, filter, k, params)
        if rows is None:
            rows = self._packed_search(conn, terms, stats, filter, k, params, state)
        return [Scored(doc, score, chunk, source) for doc, score, chunk, source in rows]

    # --- the executors -------------------------------------------------------------------------

    def _small_pack(self, state: State) -> packread.SmallPack | None:
        """The pack on disk as :mod:`.packread` maps it (no numpy), for the snapshot of
        ``state``; mapped again only when the index or a newer pack may have replaced it."""
        tag, _, seq = state
        pack = self._small
        if pack is None or pack.tag != tag or pack.seq < seq:
            pack = self._small = packread.open_pack(self.packed_path, tag)
        return pack

    def _scoped_search(
        self,
        conn: sqlite3.Connection,
        counts: Counter[str],
        found: list[tuple[int, str, int, int]],
        filter: Filter,
        scope: dict[str, Any],
        k: int,
        params: BM25Params,
        state: State,
    ) -> list[tuple[int, float, float, float]]:
        """:meth:`_packed_search` inside ``scope``: N, lengths and source statistics from the
        scope's slots (:class:`packed.Scope`, once per scope and generation), each term's df
        and sdf counted over its postings in the scope (postings the search reads anyway), kept
        for the scope's generation."""
        view = self.view(conn, state)
        inside = self._scope(conn, view, scope)
        terms = []
        for term_id, term, _, _ in found:
            df, sdf = inside.frequencies(int(term_id))
            if df:
                terms.append(QueryTerm(term_id, counts[term], df, sdf))
        terms = select_terms(terms)
        stats = inside.stats
        if not terms or stats.chunks == 0:
            return []
        visible = inside.visible
        if filter:
            allowed = self._allowed(conn, view, filter, terms)
            assert allowed is not None  # None only when asked to check in rank order
            visible = view.visible(inside.mask & allowed.mask)
        return self._score(view, terms, stats, k, params, visible, inside)

    @property
    def due(self) -> bool:
        """True when the last search found no pack it could use and built one in memory, for
        :class:`~kbcli.stores.upkeep.Upkeep` to write (:meth:`refresh`)."""
        return self._due

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Write the pack (the writer's side, called by :class:`~kbcli.stores.upkeep.Upkeep`):
        the one the last search built in memory, or, when no pack serves ``conn``'s snapshot,
        a new one of it."""
        if self._due and self._pack is not None:
            written = self._write(self._pack)
            if written is not self._pack:  # serve from the mapped file from now on
                self._pack, self._view = written, None
        self.view(conn, write=True)

    def _write(self, pack: Pack) -> Pack:
        """``pack`` (built in memory) written to the pack file and mapped; ``pack`` itself when
        the folder cannot be written (that costs only speed) or another writer replaced it."""
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite import packed

        self._due = False
        if self.read_only:
            return pack
        if packed.write_pack(self.packed_path, pack.arrays, pack.tag, pack.seq):
            mapped = packed.map_pack(self.packed_path, pack.tag)
            if mapped is not None and mapped.seq == pack.seq:
                return mapped
        return pack

    def view(
        self,
        conn: sqlite3.Connection,
        state: State | None = None,
        *,
        write: bool = False,
    ) -> View:
        """The packed view (:class:`packed.View`) of ``conn``'s snapshot: reused while the
        generation holds, else the mapped pack plus the log's delta. When there is no pack, it
        is void, or the delta has grown too large, a new pack is built from the snapshot:
        written at once with ``write`` (a writer), else kept in memory and marked :attr:`due`."""
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite import packed

        if state is None:
            state = (current_tag(conn), self._generation(conn), current_seq(conn))
        key = state
        tag = key[0]
        if self._view is not None and self._view[0] == key:
            return self._view[1]
        view = None
        pack = self._pack if self._pack is not None and self._pack.tag == tag else None
        if pack is not None:
            view = packed.make_view(conn, pack)
        if view is None:
            pack = packed.map_pack(self.packed_path, tag)
            if pack is not None and pack.seq > key[2]:
                # written by a writer after this snapshot began: it holds chunks this snapshot
                # must not see, so this one query reads its own postings (rare: a race)
                return _built_view(conn, packed.Pack(tag, key[2], packed.build_arrays(conn)))
            if pack is not None:
                view = packed.make_view(conn, pack)
        if view is None:
            pack = packed.Pack(tag, current_seq(conn), packed.build_arrays(conn))
            if write:
                pack = self._write(pack)  # the mapped file serves from here
            else:
                self._due = True
            view = _built_view(conn, pack)
        self._pack = pack
        self._view = (key, view)
        self._filters = {}
        return view

    @staticmethod
    def _generation(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT generation FROM stats WHERE id = 1").fetchone()[0])

    def vocabulary(self, conn: sqlite3.Connection) -> int:
        """How many distinct terms the index holds."""
        return int(conn.execute("SELECT count(*) FROM terms").fetchone()[0])


def _built_view(conn: sqlite3.Connection, pack: Pack) -> View:
    """The view of a pack just built from ``conn``'s own snapshot (its log holds no delta)."""
    # lazy: packed imports numpy: off the keyword search of an index with no pack
    from kbcli.stores.sqlite import packed

    view = packed.make_view(conn, pack)
    assert view is not None, "a pack built from this snapshot is always current for it"
    return view
