"""The filter compilers against the pure-Python evaluator (issue 17, matrix item 6).

Hypothesis draws a corpus of metadata (ints, floats, strings, bools, null, lists, nested
dicts, missing keys) and a valid filter; the SQLite SQL (:func:`kbcli.filters.sql.compile_sql`)
over a real table and the PostgreSQL SQL (:func:`kbcli.stores.postgres.filters.compile_filter`)
on the session server must pass exactly the rows :func:`kbcli.filters.model.matches` passes, and a
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

from extras import need
from filter_strategies import (
    KNOWN_DOCS,
    KNOWN_FILTERS,
    corpus_and_filter,
    examples,
    sqlite_corpora,
)
from kbcli.errors import FilterError
from kbcli.filters.model import matches, validate_filter
from kbcli.filters.sql import compile_sql, dumps_metadata

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


@pytest.mark.slow
@DIFF
@given(corpus_and_filter(sqlite_corpora))
@example(([{"x": "a%"}, {"x": "A"}, {"x": ["a"]}, {}], {"x": {"$prefix": "a"}}))
@example(([{"n": 1.0}, {"n": True}, {"n": "1"}, {"n": [1]}, {"n": {"n": 1}}], {"n": 1}))
@example(([{"n": True}, {"n": 1}, {"n": "1"}], {"n": {"$gt": 0}}))
@example(([{"x": "a\x00b"}, {"x": "a"}], {"x": {"$gt": "a"}}))
@example(([{"n": None}, {}, {"n": 0}], {"n": {"$ne": None}}))
@example(([{"s": "é"}, {"s": "B"}, {"s": "a"}, {"s": 1}], {"s": {"$lt": "b"}}))
def test_sqlite_sql_passes_what_the_evaluator_passes(sqlite_table, case):
    check_sqlite(sqlite_table, *case)


@pytest.mark.parametrize("flt", KNOWN_FILTERS, ids=json.dumps)
def test_sqlite_sql_passes_what_the_evaluator_passes_on_the_known_cases(sqlite_table, flt):
    check_sqlite(sqlite_table, KNOWN_DOCS, flt)


def check_sqlite(sqlite_table, docs: list[dict], flt: dict) -> None:
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


@pytest.mark.slow
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
    chromadb = need("chromadb")
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


@pytest.mark.slow
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
    from kbcli.stores.chroma.store import chroma_metadata, compile_where

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


# --- the source-range narrowing of whole-table scans ---------------------------------------


def _renamed(node: dict, old: str, new: str) -> dict:
    """``node`` with the filter key ``old`` called ``new`` (operators' operands untouched)."""
    out: dict = {}
    for key, value in node.items():
        if key in ("$and", "$or"):
            out[key] = [_renamed(sub, old, new) for sub in value]
        else:
            out[new if key == old else key] = value
    return out


@pytest.fixture(scope="module")
def chunks_table():
    from kbcli.stores.sqlite.schema import TABLES

    conn = sqlite3.connect(":memory:")
    conn.executescript(TABLES)
    yield conn
    conn.close()


@pytest.mark.slow
@DIFF
@given(corpus_and_filter(sqlite_corpora))
@example(
    ([{"s": "a\U0010ffff"}, {"s": "a\U0010ffffz"}, {"s": "b"}], {"s": {"$prefix": "a\U0010ffff"}})
)
@example(
    ([{"s": "\U0010ffff"}, {"s": "\U0010ffffa"}, {"s": "a"}], {"s": {"$prefix": "\U0010ffff"}})
)
@example(([{"s": "\ud7ff"}, {"s": "\ud7ffx"}, {"s": "\ue000"}], {"s": {"$prefix": "\ud7ff"}}))
@example(([{"s": "a\x00b"}, {"s": "a"}, {"s": "ab"}], {"s": "a"}))
@example(([{"s": 1}, {"s": "1"}, {"s": ["1"]}], {"s": {"$in": ["1", "2"]}}))
@example(
    ([{"s": "/d/a/x"}, {"s": "/d/b/y"}, {"n": 1}], {"$or": [{"s": {"$prefix": "/d/a/"}}, {"n": 1}]})
)
def test_source_ranges_pass_what_the_evaluator_passes(chunks_table, case):
    """``catalog.scan_where`` leads a pinned ``source`` filter with a range on the indexed
    column: it must pass exactly what the filter alone passes (NULs, non-text sources,
    the last code point, the surrogate gap), through every catalog read that uses it."""
    from kbcli.stores.sqlite import catalog

    docs, flt = case
    docs = [{("source" if k == "s" else k): v for k, v in d.items()} for d in docs]
    flt = validate_filter(_renamed(flt, "s", "source"))
    chunks_table.execute("DELETE FROM chunks")
    for i, meta in enumerate(docs):
        source = meta.get("source")
        chunks_table.execute(
            "INSERT INTO chunks (doc, id, text, metadata, created_at, source, text_hash, length,"
            " terms, src) VALUES (?, ?, '', ?, '2026-01-01T00:00:00', ?, '', 0, x'', 0)",
            (i, str(i), dumps_metadata(meta), str(source) if source is not None else None),
        )
    want = expected(docs, flt)
    assert sorted(catalog.rowids_where(chunks_table, flt)) == want, (flt, docs)
    assert sorted(r.doc for r in catalog.rows_where(chunks_table, flt)) == want
    assert catalog.count(chunks_table, flt) == len(want)
    listed = catalog.select_documents(chunks_table, flt)
    assert [int(d.id) for d in listed] == want


def test_a_folder_filter_reads_only_that_folders_rows(chunks_table):
    """The point of the narrowing: ``--in DIR`` (and a scope, and either ANDed with another
    filter) is answered through the ``chunks_source`` index, not a scan of every row."""
    from kbcli.filters.syntax import under_folders
    from kbcli.stores.sqlite import catalog

    folder = under_folders(["/docs/a"])
    assert folder is not None
    for flt in (
        folder,
        {"$and": [folder, {"lang": "en"}]},
        {"lang": "en", "$or": [{"source": "/x.md"}, {"source": {"$prefix": "/docs/b/"}}]},
        under_folders(["/docs/a", "/docs/b"]),
    ):
        sql, params = catalog.scan_where(flt)
        plan = " ".join(
            str(r[3])
            for r in chunks_table.execute(
                f"EXPLAIN QUERY PLAN SELECT doc FROM chunks WHERE {sql}", params
            )
        )
        assert "USING INDEX chunks_source" in plan and "SCAN" not in plan, (flt, plan)
    for flt in ({"lang": "en"}, {"$or": [folder, {"lang": "en"}]}, {"source": {"$ne": "/a"}}):
        assert catalog.scan_where(flt) == compile_sql(flt), flt  # nothing pins the source
