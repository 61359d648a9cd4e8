"""PostgresStore reads a filter that pins ``source`` (``kb search --in``, an access scope, a
value or ``$in`` of values) as a range of the ``COLLATE "C"`` index on the chunks' ``source``
column, ANDed with the whole filter: the plans use that index, and every filtered path (count,
listing, keyword and dense search, delete) still passes exactly what
:func:`kbcli.filters.model.matches` passes, on the session's real server.

The suite's server cannot show the locale hazard itself (its database is ``C.UTF-8``, it has no
ICU, the machine no other locale), so the collation is asserted in the catalog instead.
"""

from __future__ import annotations

import pytest

from extras import need

need("psycopg")
need("pgvector")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from filter_strategies import examples  # noqa: E402
from kbcli import Document  # noqa: E402
from kbcli.filters.model import matches, validate_filter  # noqa: E402
from kbcli.filters.sql import MAX_SOURCE_RANGES  # noqa: E402
from kbcli.filters.syntax import under_folders  # noqa: E402
from kbcli.stores.postgres import PostgresStore  # noqa: E402
from kbcli.stores.postgres.filters import compile_filter, scan_filter  # noqa: E402

TOP = "\U0010ffff"  # the last code point: a prefix ending in it has no simple successor
PIECES = ["a", "b", "/", "é", TOP, "\ud7ff", "\ue000", "0", "A", "日"]


def _collations(conn, table: str) -> tuple[str, list[str]]:
    """The collation of ``table.source`` and those of its index's columns."""
    column = conn.execute(
        "SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation"
        " WHERE a.attrelid = %s::regclass AND a.attname = 'source'",
        (f'"{table}"',),
    ).fetchone()[0]
    index = conn.execute(
        "SELECT c.collname FROM pg_index i, unnest(i.indcollation::oid[]) AS x(oid)"
        " JOIN pg_collation c ON c.oid = x.oid WHERE i.indexrelid = %s::regclass",
        (f'"{table}_source"',),
    ).fetchall()
    return column, [r[0] for r in index]


def _folders_corpus(n: int) -> list[Document]:
    return [
        Document(
            f"d{i}",
            f"common alpha w{i % 50}",
            {"source": f"/docs/g{i % 100}/f{i // 100}.md", "lang": "en" if i % 2 else "de"},
        )
        for i in range(n)
    ]


# --- the SQL --------------------------------------------------------------------------------


def test_only_filters_pinning_the_source_get_a_range():
    folder = under_folders(["/docs/a"])
    sql, params = scan_filter(folder)
    assert sql.startswith('((c.source COLLATE "C" >= %s::text AND c.source COLLATE "C" < %s')
    assert params[:2] == ["/docs/a/", "/docs/a0"]
    sql, params = scan_filter({"source": {"$prefix": TOP}})
    assert params[0] == TOP and params.count(TOP) == 2  # open-ended range, then the test
    assert sql.count("%s") == len(params)
    for loose in (
        None,
        {"lang": "en"},
        {"source": ""},
        {"source": 7},
        {"source": {"$ne": "/a"}},
        {"$or": [folder, {"lang": "en"}]},
        {"source": {"$in": [f"/{i}" for i in range(MAX_SOURCE_RANGES + 1)]}},
    ):
        assert scan_filter(loose) == compile_filter(loose, "c.metadata"), loose


# --- the schema and its upgrade ---------------------------------------------------------------


def test_the_source_column_and_index_are_in_code_point_order(pg_dsn, pg_table):
    store = PostgresStore(pg_dsn, pg_table)
    try:
        with store._db.read() as conn:
            assert _collations(conn, pg_table) == ("C", ["C"])
    finally:
        store.close()


def test_a_version_1_index_is_upgraded_in_place(pg_dsn, pg_table):
    """Version 1 had ``source`` in the database's collation, whose index a ``COLLATE "C"``
    range cannot use (shown with sequential scans off). Opening it migrates to version 2:
    the index is rebuilt in code point order, the rows are not rewritten, nothing is lost."""
    import psycopg

    docs = _folders_corpus(400)
    store = PostgresStore(pg_dsn, pg_table)
    store.add(docs)
    store.close()
    folder = under_folders(["/docs/g3"])
    sql, params = scan_filter(folder)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 1's schema
        conn.execute(f'ALTER TABLE "{pg_table}" ALTER COLUMN source TYPE text COLLATE "default"')
        conn.execute(f"UPDATE \"{pg_table}_meta\" SET value = '1' WHERE key = 'schema_version'")
        assert _collations(conn, pg_table) == ("default", ["default"])
        heap = conn.execute("SELECT pg_relation_filenode(%s)", (f'"{pg_table}"',)).fetchone()[0]
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = _plan(conn, f'SELECT c.doc FROM "{pg_table}" c WHERE {sql}', params)
        assert f"{pg_table}_source" not in plan, plan  # the old index does not serve the range
    store = PostgresStore(pg_dsn, pg_table)
    try:
        assert store.get_meta("schema_version") == "3"
        with store._db.read() as conn:
            assert _collations(conn, pg_table) == ("C", ["C"])
            again = conn.execute("SELECT pg_relation_filenode(%s)", (f'"{pg_table}"',)).fetchone()
            assert again[0] == heap
        want = sorted(d.id for d in docs if matches(d.metadata, folder))
        assert sorted(d.id for d in store.iter_documents(folder)) == want and len(want) == 4
        assert store.count() == len(docs)
    finally:
        store.close()


# --- the plans ------------------------------------------------------------------------------


def _plan(conn, sql: str, params) -> str:
    return "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", params))


class Recording:
    """A psycopg connection that remembers every statement it executes (to EXPLAIN them)."""

    def __init__(self, conn):
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "seen", [])

    def execute(self, sql, params=None, **kw):
        self.seen.append((sql, params))
        return self._conn.execute(sql, params, **kw)

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def __setattr__(self, name, value):
        setattr(self._conn, name, value)


def _plans_of(store: PostgresStore, call) -> list[str]:
    """The plans of the statements ``call`` ran that read the chunk table through a range,
    replayed (``SET LOCAL`` included) in one rolled-back transaction on the store's own
    connection, so they see its settings and statistics."""
    conn = store._db.conn
    recording = Recording(conn)
    store._db.conn = recording
    try:
        call()
    finally:
        store._db.conn = conn
    plans = []
    with conn.transaction(force_rollback=True):
        for sql, params in recording.seen:
            if sql.lstrip().startswith("SET LOCAL"):
                conn.execute(sql, params)
            elif 'source COLLATE "C" >=' in sql and not sql.lstrip().startswith("DELETE"):
                plans.append(_plan(conn, sql, params))
    return plans


def test_folder_filters_read_the_source_index(pg_dsn, pg_table):
    """The planner's own choice, not a forced one: 5,000 chunks in 100 folders, analysed, so a
    folder is 1 % of the table and a sequential scan costs more than the index range (with
    ``enable_seqscan = off`` the test would pass even if the planner never chose the index on
    its own). Every path that reads chunks by filter is checked: count, listing, delete's
    read, keyword search, exact dense search (``hnsw=False``, and the exact fallback)."""
    store = PostgresStore(pg_dsn, pg_table, hnsw=False)
    try:
        docs = _folders_corpus(5000)
        store.add(docs, [[1.0, float(i % 7)] for i in range(len(docs))])
        with store.transaction() as conn:
            conn.execute(f'ANALYZE "{pg_table}"')
        folder = under_folders(["/docs/g3"])
        assert folder is not None
        index = f"{pg_table}_source"
        for flt in (
            folder,
            {"$and": [folder, {"lang": "en"}]},
            {"lang": "en", "$or": [{"source": "/x.md"}, {"source": {"$prefix": "/docs/g4/"}}]},
            under_folders(["/docs/g3", "/docs/g5"]),
            {"source": {"$in": ["/docs/g3/f0.md", "/docs/g3/f1.md"]}},
        ):
            calls = {
                "count": lambda f=flt: store.count(f),
                "iter_documents": lambda f=flt: list(store.iter_documents(f)),
                "keyword_search": lambda f=flt: store.keyword_search("common alpha", 5, f),
                "search": lambda f=flt: store.search([1.0, 0.5], 5, f),
            }
            for name, call in calls.items():
                plans = _plans_of(store, call)
                assert plans, (name, flt, "no statement used the range")
                for plan in plans:
                    assert index in plan and f'Seq Scan on "{pg_table}"' not in plan, (
                        name, flt, plan,
                    )  # fmt: skip
        # delete_where reads the rows to remove with the range, then deletes them by doc
        # (last: its plan is replayed on the table without them, under the same statistics).
        both = {"$and": [folder, {"lang": "en"}]}
        plans = _plans_of(store, lambda: store.delete_where(both))
        assert plans and all(index in p for p in plans), plans
        gone = sum(matches(d.metadata, both) for d in docs)
        assert gone == 50 and store.count() == len(docs) - gone and store.count(folder) == 0
    finally:
        store.close()


# --- differential: every filtered path against the evaluator ---------------------------------

_source_text = st.lists(st.sampled_from(PIECES), max_size=4).map("".join)
_source = st.one_of(_source_text, _source_text, st.sampled_from([1, "1", None, ""]))


@st.composite
def _docs_and_filter(draw) -> tuple[list[dict], dict]:
    metas = []
    for _ in range(draw(st.integers(1, 14))):
        meta: dict = {"lang": draw(st.sampled_from(["en", "de"]))}
        source = draw(_source)
        if source is not None:
            meta["source"] = source
        metas.append(meta)
    texts = [m["source"] for m in metas if isinstance(m.get("source"), str)]
    near = st.one_of(
        _source_text,
        st.sampled_from(texts).flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n]))
        if texts
        else _source_text,
    )

    def pin():
        op = draw(st.sampled_from(["$prefix", "$eq", "$in", "plain"]))
        if op == "plain":
            return {"source": draw(near)}
        if op == "$in":
            return {"source": {"$in": draw(st.lists(near, min_size=1, max_size=3))}}
        value = draw(near)
        return {"source": {op: value}} if value or op == "$eq" else {"source": value}

    shape = draw(st.sampled_from(["pin", "and", "or", "or-loose", "folders", "and-ne"]))
    if shape == "pin":
        flt = pin()
    elif shape == "and":
        flt = {"$and": [pin(), {"lang": "en"}]}
    elif shape == "or":
        flt = {"$or": [pin(), pin()]}
    elif shape == "or-loose":
        flt = {"$or": [pin(), {"lang": "de"}]}
    elif shape == "and-ne":
        flt = {**pin(), "lang": {"$ne": "en"}}
    else:
        flt = under_folders([draw(near) for _ in range(draw(st.integers(1, 2)))]) or pin()
    return metas, flt


FOLDER_SOURCES = ["/docs/a/x.md", "/docs/ab/y.md", "/docs/a/sub/z.md", "/other/a/w.md"]


@pytest.fixture
def diff_store(pg_dsn, pg_table):
    store = PostgresStore(pg_dsn, pg_table, busy_timeout=10.0)
    yield store
    store.close()


@pytest.mark.slow
@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(_docs_and_filter())
@example(([{"source": "a" + TOP}, {"source": "a" + TOP + "z"}, {"source": "b"}],
          {"source": {"$prefix": "a" + TOP}}))  # fmt: skip
@example(([{"source": TOP}, {"source": TOP + "a"}, {"source": "a"}], {"source": {"$prefix": TOP}}))
@example(([{"source": "a/b"}, {"source": "a/bc"}, {"source": "a/b/x"}], {"source": "a/b"}))
@example(([{"source": "a/b"}, {"source": "a/bc"}, {"source": "a/b/x"}],
          {"source": {"$prefix": "a/b/"}}))  # fmt: skip
@example(([{"source": ""}, {}, {"source": "a"}], {"source": ""}))
@example(([{"source": ""}, {}, {"source": "a"}], {"source": {"$in": ["", "a"]}}))
@example(([{"source": 1}, {"source": "1"}, {"source": "10"}], {"source": {"$in": ["1", "2"]}}))
@example(([{"source": "\ud7ff"}, {"source": "\ud7ffx"}, {"source": "\ue000"}],
          {"source": {"$prefix": "\ud7ff"}}))  # fmt: skip
@example(([{"source": "é/x"}, {"source": "ê"}, {"source": "éa"}, {"source": "e"}],
          {"source": {"$prefix": "é"}}))  # fmt: skip
# ``kb search --in DIR`` on PostgreSQL (the store once refused ``$prefix``): a sibling folder
# sharing the name's start stays out.
@example(([{"source": s} for s in FOLDER_SOURCES], under_folders(["/docs/a"])))
def test_filtered_paths_pass_what_the_evaluator_passes(diff_store, case):
    metas, flt = case
    flt = validate_filter(flt)
    store = diff_store
    store.remove([d.id for d in store.iter_documents()])
    docs = [Document(f"d{i:02d}", "common words", m) for i, m in enumerate(metas)]
    store.add(docs, [[1.0, float(i)] for i in range(len(docs))])
    want = [d.id for d in docs if matches(d.metadata, flt)]
    everything = len(docs) + 5
    where = (flt, metas)
    assert store.count(flt) == len(want), where
    assert [d.id for d in store.iter_documents(flt)] == want, where
    assert sorted(h.document.id for h in store.search([1.0, 0.5], everything, flt)) == want, where
    hits = store.keyword_search("common", everything, flt)
    assert sorted(h.document.id for h in hits) == want, where
    assert store.delete_where(flt) == len(want), where
    left = sorted(d.id for d in store.iter_documents())
    assert left == sorted(d.id for d in docs if d.id not in set(want)), where


def test_the_exact_fallback_cannot_reuse_the_hnsw_plan(pg_dsn, pg_table):
    """psycopg prepares a statement after five runs and PostgreSQL may then keep one generic
    plan for it, whatever ``enable_indexscan`` says at a later run. When the exact fallback
    was the walk's own statement run with index scans off, it could reuse the HNSW plan and
    come back as short as the walk (the differential test above found it, after many runs
    on one connection). The fallback's statement must be one no plan can answer through the
    HNSW index: its generic plan, even with every other scan off, must not use it."""
    store = PostgresStore(pg_dsn, pg_table)
    try:
        metas = [{"lang": "de" if i % 100 == 0 else "en"} for i in range(300)]
        docs = [Document(f"d{i:03d}", "common words", m) for i, m in enumerate(metas)]
        store.add(docs, [[1.0, float(i)] for i in range(len(docs))])
        assert not store.exact  # an HNSW index serves the walk
        conn = store._db.conn
        recording = Recording(conn)
        store._db.conn = recording
        try:
            found = store.search([1.0, 0.0], 10, {"lang": "de"})
        finally:
            store._db.conn = conn
        assert sorted(h.document.id for h in found) == ["d000", "d100", "d200"]
        walk, fallback = [sql for sql, _ in recording.seen if "ORDER BY distance" in sql]
        plans = []
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL enable_sort = off")
            for sql in (walk, fallback):
                parts = sql.split("%s")
                numbered = parts[0] + "".join(f"${i}{p}" for i, p in enumerate(parts[1:], 1))
                plans.append(_plan(conn, f"(GENERIC_PLAN) {numbered}", None))
        hnsw = f"{pg_table}_hnsw"
        assert hnsw in plans[0], plans[0]  # the setup tempts the planner to the index
        assert hnsw not in plans[1], plans[1]
    finally:
        store.close()
