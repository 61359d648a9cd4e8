"""The BM25 inverted index in PostgreSQL: terms, postings and source statistics.

Changes are planned by :mod:`kbcli.text.bm25` (:func:`~kbcli.text.bm25.plan_addition`,
:func:`~kbcli.text.bm25.plan_removal`) from one batched lookup and applied here inside the catalog's
transaction. Search runs :func:`kbcli.text.bm25.rank`'s arithmetic as one SQL query over the
postings of the query's terms; the parity test checks its scores against SQLite's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kbcli.filters.model import and_filters
from kbcli.filters.sql import dumps_metadata
from kbcli.stores.keywords import SignedKeywords
from kbcli.stores.parts import Filter
from kbcli.stores.postgres.catalog import ChunkRow, allocate, get_meta, set_meta
from kbcli.stores.postgres.filters import scan_filter
from kbcli.stores.postgres.schema import Tables, one
from kbcli.text.analysis import Analyzer, has_title_field
from kbcli.text.bm25 import BM25Params, ChunkTerms, CorpusStats, PostingsChange, QueryTerm, Scored

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection

SCOPE_CACHE = 16  # scopes whose totals are kept per generation


class KeywordTables(SignedKeywords["PgConnection", ChunkRow]):
    """Reads and writes the keyword index of one PostgreSQL index for one analyzer: the keyword
    part (:class:`~kbcli.stores.parts.Keywords`) of :class:`~.store.PostgresStore`."""

    def __init__(self, analyzer: Analyzer, tables: Tables, where: str):
        super().__init__(analyzer)
        self.t = tables
        self.where = where
        # (scope, generation) -> the scope's N, total length and sources (_scope_totals)
        self._scopes: dict[tuple[str, int], tuple[int, int, int]] = {}

    def _get_meta(self, conn: PgConnection, key: str) -> str | None:
        return get_meta(conn, self.t, key)

    def _set_meta(self, conn: PgConnection, key: str, value: str) -> None:
        set_meta(conn, self.t, key, value)

    def _chunks(self, conn: PgConnection) -> int:
        return int(one(conn.execute(f"SELECT n FROM {self.t.stats} WHERE id = 1"))[0])

    def _where(self) -> str:
        return f"{self.t.base} at {self.where}"

    def vocabulary(self, conn: PgConnection) -> int:
        """How many distinct terms the index holds."""
        return int(one(conn.execute(f"SELECT count(*) FROM {self.t.terms}"))[0])

    # --- writes --------------------------------------------------------------------------------

    def term_ids(self, conn: PgConnection, terms: Iterable[str]) -> dict[str, int]:
        """Ids of ``terms``, creating rows (df 0) for new ones."""
        wanted = sorted(set(terms))
        if not wanted:
            return {}
        t = self.t
        ids: dict[str, int] = dict(
            conn.execute(
                f"SELECT term, id FROM {t.terms} WHERE term = ANY(%s::text[])", (wanted,)
            ).fetchall()
        )
        missing = [w for w in wanted if w not in ids]
        if missing:
            fresh = allocate(conn, t.terms, "id", len(missing))
            conn.execute(
                f"INSERT INTO {t.terms} (id, term, df, sdf)"
                " SELECT id, term, 0, 0 FROM unnest(%s::bigint[], %s::text[]) AS x(id, term)",
                (fresh, missing),
            )
            ids.update(zip(missing, fresh))
        return ids

    def _source_postings(
        self, conn: PgConnection, pairs: set[tuple[int, Any]]
    ) -> Callable[[int, Any], int]:
        """A ``source_postings(src, term)`` answering from one query over ``pairs``."""
        counts: dict[tuple[int, Any], int] = {}
        if pairs:
            srcs, terms = zip(*sorted(pairs))
            rows = conn.execute(
                f"SELECT p.src, p.term, count(*) FROM {self.t.postings} p"
                " JOIN unnest(%s::bigint[], %s::bigint[]) AS x(src, term)"
                " ON p.src = x.src AND p.term = x.term GROUP BY p.src, p.term",
                (list(srcs), list(terms)),
            )
            counts = {(s, term): n for s, term, n in rows}
        return lambda src, term: counts.get((src, term), 0)

    def _before_addition(
        self, conn: PgConnection, chunks: list[ChunkTerms], new_sources: set[int]
    ) -> Callable[[int, Any], int]:
        pairs = {(c.src, term) for c in chunks if c.src not in new_sources for term in c.tf}
        return self._source_postings(conn, pairs)

    @staticmethod
    def _terms_of_row(row: ChunkRow) -> ChunkTerms:
        return ChunkTerms(row.doc, row.src, dict(zip(row.term_ids, row.tfs)))

    def _before_removal(
        self, conn: PgConnection, chunks: list[ChunkTerms]
    ) -> tuple[Callable[[int], int], Callable[[int, Any], int]]:
        srcs = sorted({c.src for c in chunks})
        sizes: dict[int, int] = dict(
            conn.execute(
                f"SELECT id, chunks FROM {self.t.sources} WHERE id = ANY(%s::bigint[])", (srcs,)
            ).fetchall()
        )
        pairs = {(c.src, term) for c in chunks for term in c.tf}
        return (lambda src: sizes.get(src, 0)), self._source_postings(conn, pairs)

    def apply(self, conn: PgConnection, change: PostingsChange) -> None:
        """Write a planned change: postings, term and source frequencies, source lengths and
        chunk counts, corpus totals; emptied sources are deleted."""
        t = self.t
        sign = 1 if change.adding else -1
        if change.adding:
            with conn.cursor() as cur:
                with cur.copy(f"COPY {t.postings} (term, src, doc, tf, dl) FROM STDIN") as copy:
                    for c in change.chunks:
                        length = c.length
                        for tid, tf in c.tf.items():
                            copy.write_row((tid, c.src, c.doc, tf, length))
        else:
            keys = [(tid, c.src, c.doc) for c in change.chunks for tid in c.tf]
            if keys:
                terms, srcs, docs = (list(x) for x in zip(*keys))
                conn.execute(
                    f"DELETE FROM {t.postings} p USING unnest(%s::bigint[], %s::bigint[],"
                    " %s::bigint[]) AS x(term, src, doc)"
                    " WHERE p.term = x.term AND p.src = x.src AND p.doc = x.doc",
                    (terms, srcs, docs),
                )
        if change.df:
            term_ids = list(change.df)
            conn.execute(
                f"UPDATE {t.terms} AS t SET df = t.df + x.df, sdf = t.sdf + x.sdf"
                " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS x(id, df, sdf)"
                " WHERE t.id = x.id",
                (
                    term_ids,
                    [sign * change.df[i] for i in term_ids],
                    [sign * change.sdf.get(i, 0) for i in term_ids],
                ),
            )
            if not change.adding:
                conn.execute(
                    f"DELETE FROM {t.terms} WHERE id = ANY(%s::bigint[]) AND df <= 0",
                    (term_ids,),
                )
        if not change.adding and change.emptied_sources:
            conn.execute(
                f"DELETE FROM {t.sources} WHERE id = ANY(%s::bigint[])",
                (sorted(change.emptied_sources),),
            )
        kept = [s for s in change.source_chunks if s not in change.emptied_sources]
        if kept:
            conn.execute(
                f"UPDATE {t.sources} AS s SET length = s.length + x.length,"
                " chunks = s.chunks + x.chunks"
                " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS x(id, length, chunks)"
                " WHERE s.id = x.id",
                (
                    kept,
                    [sign * change.source_length[s] for s in kept],
                    [sign * change.source_chunks[s] for s in kept],
                ),
            )
        conn.execute(
            f"UPDATE {t.stats} SET n = n + %s, total_length = total_length + %s,"
            " sources = sources + %s WHERE id = 1",
            (sign * change.chunks_delta, sign * change.length_delta, change.sources_delta),
        )

    def rebuild(self, conn: PgConnection) -> int:
        """Re-analyse every chunk with the current analyzer; returns how many. An index of a
        kbcli without titles (its signature has no title field) also gets them: each file's
        chunks stored without a title are given the one ingest would record (metadata
        ``title``), in the same transaction."""
        add_titles = not has_title_field(self.recorded_signature(conn) or "")
        t = self.t
        conn.execute(f"TRUNCATE {t.postings}")
        conn.execute(f"DELETE FROM {t.terms}")
        conn.execute(f"UPDATE {t.sources} SET length = 0, chunks = 0")
        conn.execute(f"UPDATE {t.stats} SET n = 0, total_length = 0 WHERE id = 1")
        rows = conn.execute(
            f"SELECT doc, text, metadata, src, source FROM {t.chunks} ORDER BY doc"
        ).fetchall()
        titled, counted, vocab = self.reanalyse(rows, add_titles)
        if titled:
            with conn.cursor() as cur:
                cur.executemany(
                    f"UPDATE {t.chunks} SET metadata = %s::jsonb WHERE doc = %s",
                    [(dumps_metadata(meta), doc) for doc, meta in titled],
                )
        ids = self.term_ids(conn, vocab)
        chunks = []
        for doc, src, counts in counted:
            chunks.append(ChunkTerms(doc, src, {ids[w]: n for w, n in counts.items()}))
        if chunks:
            conn.execute(
                f"UPDATE {t.chunks} AS c SET length = x.length, term_ids = x.term_ids::bigint[],"
                " tfs = x.tfs::integer[]"
                " FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::text[])"
                " AS x(doc, length, term_ids, tfs) WHERE c.doc = x.doc",
                (
                    [c.doc for c in chunks],
                    [c.length for c in chunks],
                    ["{" + ",".join(map(str, c.tf)) + "}" for c in chunks],
                    ["{" + ",".join(map(str, c.tf.values())) + "}" for c in chunks],
                ),
            )
        self.apply_fresh(conn, chunks)  # every sources row starts empty again
        self._set_meta(conn, "analyzer", self.signature)
        return len(chunks)

    # --- search --------------------------------------------------------------------------------

    def search(
        self,
        conn: PgConnection,
        query: str,
        k: int,
        filter: Filter,
        params: BM25Params,
        scope: Filter = None,
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` among those passing ``filter``; with ``scope``,
        among its chunks, every statistic counted over them alone (:mod:`kbcli.text.bm25`)."""
        counts = self.analyzer.query_counts(query)
        if not counts or k <= 0:
            return []
        t = self.t
        self.check_signature(conn, writing=False)
        if scope:
            where, wparams = scan_filter(scope)
            n, total, n_sources = self._scope_totals(conn, scope, where, wparams)
        else:
            n, total, n_sources = one(
                conn.execute(f"SELECT n, total_length, sources FROM {t.stats} WHERE id = 1")
            )
        stats = CorpusStats(n, total, n_sources)
        if n == 0:
            return []
        if scope:
            # df and sdf over the scope's postings of the query's terms (read anyway)
            sql = (
                f"SELECT t.id, t.term, count(*), count(DISTINCT p.src) FROM {t.terms} t"
                f" JOIN {t.postings} p ON p.term = t.id JOIN {t.chunks} c ON c.doc = p.doc"
                f" WHERE t.term = ANY(%s::text[]) AND {where} GROUP BY t.id, t.term ORDER BY t.id"
            )
            found = conn.execute(sql, (list(counts), *wparams))
        else:
            sql = (
                f"SELECT id, term, df, sdf FROM {t.terms} WHERE term = ANY(%s::text[]) ORDER BY id"
            )
            found = conn.execute(sql, (list(counts),))
        terms = self.query_terms(counts, found)
        if not terms:
            return []
        rows = self._bm25_sql(conn, terms, stats, filter, k, params, scope)
        return [Scored(doc, score, chunk, source) for doc, score, chunk, source in rows]

    def _scope_totals(
        self, conn: PgConnection, scope: dict[str, Any], where: str, params: list[Any]
    ) -> tuple[int, int, int]:
        """N, total length and sources of the scope's chunks: one count with the filter, kept
        while the index's generation (bumped by every write) holds."""
        generation = conn.execute(f"SELECT generation FROM {self.t.stats} WHERE id = 1").fetchone()
        key = (json.dumps(scope, sort_keys=True, default=str), generation[0] if generation else 0)
        found = self._scopes.get(key)
        if found is None:
            found = one(
                conn.execute(
                    f"SELECT count(*), coalesce(sum(c.length), 0), count(DISTINCT c.src)"
                    f" FROM {self.t.chunks} c WHERE {where}",
                    params,
                )
            )
            if len(self._scopes) >= SCOPE_CACHE:
                self._scopes.pop(next(iter(self._scopes)))
            self._scopes[key] = found
        return found

    def _bm25_sql(
        self,
        conn: PgConnection,
        terms: list[QueryTerm],
        stats: CorpusStats,
        filter: Filter,
        k: int,
        bm25: BM25Params,
        scope: Filter = None,
    ) -> list[tuple[int, float, float, float]]:
        """:func:`kbcli.text.bm25.rank` as one SQL query: ``(doc, score, chunk part, source part)``;
        with ``scope`` only its chunks are ranked and a source's length is its chunks' in it."""
        t = self.t
        k1, b, source_weight = bm25.k1, bm25.b, bm25.source_weight
        params: list[Any] = [
            [q.term for q in terms],
            [q.chunk_weight(stats) for q in terms],
            [q.source_weight(stats) for q in terms],
        ]
        hits = (
            f"SELECT p.term, p.src, p.doc, p.tf, p.dl, q.cw, q.sw FROM {t.postings} p"
            " JOIN q ON q.term = p.term"
        )
        allowed = and_filters(scope, filter)
        if allowed:
            # Only chunks passing the filter are scored and add to their source's score.
            where, fparams = scan_filter(allowed)
            hits += f" JOIN {t.chunks} c ON c.doc = p.doc WHERE {where}"
            params += fparams
        avgdl, avgsl = stats.avgdl, stats.avgsl
        chunk = (
            "SELECT doc, min(src) AS src, sum(cw * tf * %s::float8 / (tf + %s::float8"
            " * (%s::float8 + %s::float8 * dl))) AS score FROM hits GROUP BY doc"
        )
        params += [k1 + 1.0, k1, 1.0 - b, b / avgdl if avgdl else 0.0]
        head = (
            "WITH q(term, cw, sw) AS (SELECT * FROM unnest(%s::bigint[], %s::float8[],"
            f" %s::float8[])), hits AS MATERIALIZED ({hits}), per_chunk AS ({chunk})"
        )
        if source_weight == 0.0:
            sql = (
                f"{head} SELECT doc, score, score, 0.0::float8 FROM per_chunk"
                " ORDER BY score DESC, doc LIMIT %s"
            )
            rows: list[tuple[int, float, float, float]] = conn.execute(
                sql, [*params, int(k)]
            ).fetchall()
            return rows
        lengths, length = f"JOIN {t.sources} s ON s.id = h.src", "s.length"
        if scope:
            # a source's chunks in scope (a chunk without a source is its own: its length)
            where, sparams = scan_filter(scope)
            head += (
                f", scope_len AS (SELECT s.id, sum(c.length) AS length FROM {t.sources} s"
                f" JOIN {t.chunks} c ON c.source = s.source WHERE s.id IN"
                f" (SELECT DISTINCT src FROM hits) AND {where} GROUP BY s.id)"
            )
            params += sparams
            lengths = "LEFT JOIN scope_len s ON s.id = h.src"
            length = "coalesce(s.length, h.dl)"
        source = (
            "SELECT h.src, sum(h.sw * h.tf * %s::float8 / (h.tf + %s::float8 * (%s::float8"
            f" + %s::float8 * {length}))) AS score FROM (SELECT term, src, min(sw) AS sw,"
            f" sum(tf) AS tf, min(dl) AS dl FROM hits GROUP BY term, src) h {lengths}"
            " GROUP BY h.src"
        )
        params += [k1 + 1.0, k1, 1.0 - b, b / avgsl if avgsl else 0.0]
        sql = (
            f"{head}, per_source AS ({source})"
            " SELECT c.doc, c.score + %s::float8 * s.score AS total, c.score, s.score"
            " FROM per_chunk c JOIN per_source s ON s.src = c.src"
            " ORDER BY total DESC, c.doc LIMIT %s"
        )
        found: list[tuple[int, float, float, float]] = conn.execute(
            sql, [*params, source_weight, int(k)]
        ).fetchall()
        return found
