"""The filter compilers against the pure-Python evaluator (issue 17, matrix item 6).

Hypothesis draws a corpus of metadata (ints, floats, strings, bools, null, lists, nested
dicts, missing keys) and a valid filter; the SQLite SQL (:func:`kbcli.filters.compile_sql`)
over a real table and the PostgreSQL SQL (:func:`kbcli.stores.postgres.filters.compile_filter`)
on the session server must pass exactly the rows :func:`kbcli.filters.matches` passes, and a
Chroma ``where`` (when Chroma can express the filter) must mean the same on a real collection.
Failures shrink to a small corpus and filter. Every store's own reads (count, listing, keyword
and dense search) are checked against the evaluator by the contract suite
:class:`kbcli.testing.FilterDifferentialContract`, which each store's file in tests/contracts
runs. ``KB_STRESS=1`` runs 20 times as many examples.
"""

from __future__ import annotations

import json
import sqlite3
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings

from filter_strategies import corpus_and_filter, examples, sqlite_corpora
from kbcli.errors import FilterError
from kbcli.filters import compile_sql, dumps_metadata, matches, validate_filter

DIFF = settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def expected(docs: list[dict], flt: dict) -> list[int]:
    return [i for i, meta in enumerate(docs) if matches(meta, flt)]


@pytest.fixture(scope="module")
def sqlite_table():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (i INTEGER PRIMARY KEY, metadata TEXT)")
    yield conn
    conn.close()


@DIFF
@given(corpus_and_filter(sqlite_corpora))
@example(([{"x": "a%"}, {"x": "A"}, {"x": ["a"]}, {}], {"x": {"$prefix": "a"}}))
@example(([{"n": 1.0}, {"n": True}, {"n": "1"}, {"n": [1]}, {"n": {"n": 1}}], {"n": 1}))
@example(([{"n": True}, {"n": 1}, {"n": "1"}], {"n": {"$gt": 0}}))
@example(([{"x": "a\x00b"}, {"x": "a"}], {"x": {"$gt": "a"}}))
@example(([{"n": None}, {}, {"n": 0}], {"n": {"$ne": None}}))
@example(([{"s": "é"}, {"s": "B"}, {"s": "a"}, {"s": 1}], {"s": {"$lt": "b"}}))
def test_sqlite_sql_passes_what_the_evaluator_passes(sqlite_table, case):
    docs, flt = case
    flt = validate_filter(flt)
    sqlite_table.execute("DELETE FROM t")
    sqlite_table.executemany(
        "INSERT INTO t VALUES (?, ?)", [(i, dumps_metadata(d)) for i, d in enumerate(docs)]
    )
    sql, params = compile_sql(flt)
    got = [r[0] for r in sqlite_table.execute(f"SELECT i FROM t WHERE {sql} ORDER BY i", params)]
    assert got == expected(docs, flt), (flt, docs)


@pytest.fixture(scope="module")
def pg(pg_dsn):
    import psycopg

    conn = psycopg.connect(pg_dsn, autocommit=True)
    yield conn
    conn.close()


@DIFF
@given(corpus_and_filter())
@example(([{"x": "a%"}, {"x": "A"}, {"x": ["a"]}, {}], {"x": {"$prefix": "a"}}))
@example(([{"x": "e\u0301"}, {"x": "é"}], {"x": {"$prefix": "e"}}))
@example(([{"n": 1.0}, {"n": True}, {"n": "1"}, {"n": [1]}, {"n": {"n": 1}}], {"n": 1}))
@example(([{"s": "é"}, {"s": "B"}, {"s": "a"}, {"s": 1}], {"s": {"$lt": "b"}}))
def test_postgres_sql_passes_what_the_evaluator_passes(pg, case):
    docs, flt = case
    from kbcli.stores.postgres.filters import compile_filter

    flt = validate_filter(flt)
    sql, params = compile_filter(flt, "c.metadata")
    rows = pg.execute(
        "SELECT c.i FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS c(metadata, i)"
        f" WHERE {sql} ORDER BY c.i",
        [json.dumps(docs), *params],
    ).fetchall()
    assert [r[0] - 1 for r in rows] == expected(docs, flt), (flt, docs)


@pytest.fixture(scope="module")
def chroma():
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


@DIFF
@given(corpus_and_filter())
@example(([{"n": 1.0}, {"n": True}, {"n": "1"}, {"n": [1]}], {"n": 1}))
@example(([{"n": 1}, {}, {"n": [1]}, {"x": 1}], {"n": {"$ne": 1}}))
@example(([{"n": 1}, {"n": 1.0}, {"n": 2}], {"n": 1.0}))
@example(([{"n": 0}, {"n": 0.5}, {"n": 1}], {"n": 0.5}))  # Chroma: 0.5 equals 0
@example(([{"n": 2}, {"n": 2.5}, {"n": 3}], {"n": {"$gte": 2.5}}))
@example(([{"n": 2**63 - 1}, {"n": 1e300}], {"n": 1e300}))  # Chroma: 1e300 equals 2**63 - 1
@example(([{"n": 2**63 - 1}, {"n": 9.223372036854776e18}], {"n": 2**63 - 1}))
@example(([{"n": 1}, {"n": "a"}, {}, {"n": True}], {"n": {"$nin": [1, "a"]}}))
def test_chroma_where_passes_what_the_evaluator_passes(chroma, case):
    docs, flt = case
    from kbcli.stores.chroma_store import chroma_metadata, compile_where

    flt = validate_filter(flt)
    try:
        where = compile_where(flt)
    except FilterError:
        return  # the store scans exactly instead (checked by the contract suite)
    collection = chroma.create_collection(f"d{uuid.uuid4().hex}", embedding_function=None)
    try:
        collection.add(
            ids=[str(i) for i in range(len(docs))],
            embeddings=[[1.0, float(i)] for i in range(len(docs))],
            metadatas=[chroma_metadata(d) for d in docs],
        )
        got = sorted(int(i) for i in collection.get(where=where, include=[])["ids"])
    finally:
        chroma.delete_collection(collection.name)
    assert got == expected(docs, flt), (flt, where, docs)


def test_postgres_store_filters_by_folder(pg_dsn, pg_table):
    """``kb search --in DIR`` is a ``$prefix`` filter on ``source``; the PostgreSQL store
    refused it ("Unsupported filter operator") before it compiled ``$prefix``."""
    from kbcli import Document
    from kbcli.filters import under_folders
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, pg_table)
    try:
        sources = ["/docs/a/x.md", "/docs/ab/y.md", "/docs/a/sub/z.md", "/other/a/w.md"]
        store.add(
            [Document(f"d{i}", "vpn reset guide", {"source": s}) for i, s in enumerate(sources)],
            [[1.0, float(i)] for i in range(len(sources))],
        )
        inside = under_folders(["/docs/a"])
        assert sorted(d.id for d in store.iter_documents(inside)) == ["d0", "d2"]
        assert sorted(h.document.id for h in store.keyword_search("vpn", 5, inside)) == ["d0", "d2"]
        assert sorted(h.document.id for h in store.search([1.0, 0.0], 5, inside)) == ["d0", "d2"]
    finally:
        store.close()
