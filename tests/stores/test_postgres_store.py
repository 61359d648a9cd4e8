"""PostgresStore beyond the contract suites, on the session's real PostgreSQL server: keyword
scores equal SQLite's, filtered dense search keeps k, filters are injection-proof and agree with
kbcli.filters.model.matches, the DSN's password never shows, and the store works as `kb`'s
backend."""

from __future__ import annotations

import json
import logging
import random

import pytest

from cli_helpers import run
from extras import need
from kbcli import Document, SQLiteStore
from kbcli.errors import FilterError, StoreError
from kbcli.filters.model import matches

need("psycopg")

from kbcli.stores.postgres import PostgresStore  # noqa: E402
from kbcli.stores.postgres.dsn import describe, redact  # noqa: E402

WORDS = [f"w{i}" for i in range(60)]
SOURCES = ["/a.md", "/b.md", "/c.md", "/d.md", None]


@pytest.fixture
def pg(pg_dsn, pg_table):
    store = PostgresStore(pg_dsn, pg_table)
    yield store
    store.close()


def _doc(rng: random.Random, doc_id: str) -> Document:
    text = " ".join(rng.choice(WORDS[: rng.randint(10, 60)]) for _ in range(rng.randint(1, 20)))
    meta = {"team": rng.choice(["ops", "dev", "hr"]), "year": rng.choice([2023, 2024, 2025])}
    source = rng.choice(SOURCES)
    if source is not None:
        meta["source"] = source
    return Document(doc_id, text, meta)


# --- keyword scores equal SQLite's ----------------------------------------------------------


@pytest.mark.parametrize("seed", range(2))
def test_keyword_scores_equal_sqlite(pg, tmp_path, seed):
    rng = random.Random(seed)
    sqlite = SQLiteStore(tmp_path / "kb.db")
    docs = [_doc(rng, f"d{i}") for i in range(150)]
    later = [_doc(rng, f"d{i}") for i in rng.sample(range(150), 20)]  # upserts
    for store in (sqlite, pg):
        store.add([Document(d.id, d.text, dict(d.metadata)) for d in docs])
        store.add([Document(d.id, d.text, dict(d.metadata)) for d in later])
        store.remove(["d3", "d77", "missing"])
        store.delete_source("/c.md")
        store.delete_where({"team": "hr", "year": 2023})
    assert [d.id for d in pg.iter_documents()] == [d.id for d in sqlite.iter_documents()]
    compared = 0
    for _ in range(25):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        for weight in (0.0, 2.0):
            for filter in (None, {"team": "ops"}, {"year": {"$gte": 2024}, "team": "dev"}):
                want = sqlite.keyword_search(query, k=200, filter=filter, source_weight=weight)
                got = pg.keyword_search(query, k=200, filter=filter, source_weight=weight)
                assert {h.document.id for h in got} == {h.document.id for h in want}
                by_id = {h.document.id: h for h in want}
                for hit in got:
                    ref = by_id[hit.document.id]
                    assert hit.score == pytest.approx(ref.score, abs=1e-6)
                    for part in ("bm25_chunk", "bm25_source"):
                        assert hit.explain[part] == pytest.approx(ref.explain[part], abs=1e-6)
                compared += len(got)
                top = pg.keyword_search(query, k=5, filter=filter, source_weight=weight)
                assert [h.score for h in top] == pytest.approx([h.score for h in want[:5]])
    assert compared > 500
    sqlite.close()


# --- filtered dense search keeps k ----------------------------------------------------------


def test_filtered_dense_search_returns_k_when_the_nearest_are_filtered_out(pg, pg_dsn, pg_table):
    rng = random.Random(7)
    dim, query = 16, [1.0] + [0.0] * 15
    docs, vecs = [], []
    for i in range(1500):
        near = i < 1200  # the 1200 nearest vectors are all hidden by the filter
        vec = [1.0 + rng.random() * 0.1] + [rng.gauss(0, 0.05 if near else 1.0) for _ in range(15)]
        docs.append(Document(f"v{i}", f"vector {i}", {"hidden": near, "n": i}))
        vecs.append(vec)
    pg.add(docs, vecs)
    assert pg.exact is False  # an HNSW index serves the search
    allowed = {d.id for d in docs if not d.metadata["hidden"]}
    for k in (10, 50):
        hits = pg.search(query, k=k, filter={"hidden": False})
        assert len(hits) == k
        assert {h.document.id for h in hits} <= allowed
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    # a tiny allowed set: every one of them, nothing else
    few = pg.search(query, k=10, filter={"n": {"$in": [3, 1400, 1499]}})
    assert sorted(h.document.id for h in few) == ["v1400", "v1499", "v3"]

    # the exact answer among the allowed rows (brute force) is found
    def cosine(a, b):
        dot = sum(x * y for x, y in zip(a, b))
        return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)

    want = sorted(allowed, key=lambda i: -cosine(query, vecs[int(i[1:])]))[:10]
    got = [h.document.id for h in pg.search(query, k=10, filter={"hidden": False})]
    assert len(set(got) & set(want)) >= 9
    assert len(pg.search(query, k=10)) == 10 and dim == 16
    exact = PostgresStore(pg_dsn, pg_table, hnsw=False)  # the same index, scanned exactly
    assert exact.exact is True and exact.stats()["exact_vectors"] is True
    assert [h.document.id for h in exact.search(query, k=10, filter={"hidden": False})] == want
    exact.close()


# --- filters: injection-proof, equal to matches() --------------------------------------------

PAYLOADS = [
    "x'); DROP TABLE kb_chunks; --",
    "' OR '1'='1",
    '"; DELETE FROM pg_class; --',
    "a' || 'b",
    "$.source",
    "team') OR TRUE OR ('",
    "%s",
    "%(name)s",
    "\\",
    "{}",
]


def test_injection_payloads_in_filter_keys_and_values_change_nothing(pg):
    pg.add(
        [
            Document("a", "alpha", {"team": "ops", "x'); DROP TABLE kb_chunks; --": "v"}),
            Document("b", "beta", {"team": "' OR '1'='1"}),
            Document("c", "gamma", {"team": "dev"}),
        ],
        [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]],
    )
    for payload in PAYLOADS:
        for filter in (
            {payload: "ops"},
            {"team": payload},
            {payload: {"$exists": True}},
            {"team": {"$in": [payload, "nope"]}},
            {payload: {"$gt": payload}},
            {"$or": [{payload: 1}, {"team": {"$lt": payload}}]},
        ):
            try:
                docs = list(pg.iter_documents(filter))
            except FilterError:
                continue  # refused (a key with quotes): fails closed
            want = [d for d in ("a", "b", "c") if matches(pg.get([d])[0].metadata, filter)]
            assert [d.id for d in docs] == want, filter
            assert pg.count(filter) == len(want)
            assert len(pg.search([1.0, 0.0], k=5, filter=filter)) == len(want)
            assert len(pg.keyword_search("alpha beta gamma", k=5, filter=filter)) == len(want)
    assert pg.count() == 3
    assert [d.id for d in pg.iter_documents({"team": "' OR '1'='1"})] == ["b"]
    assert [d.id for d in pg.iter_documents({"x'); DROP TABLE kb_chunks; --": "v"})] == ["a"]
    assert pg.delete_where({"team": "x' OR 1=1 --"}) == 0 and pg.count() == 3


def test_unsupported_filters_fail_closed(pg):
    pg.add([Document("a", "alpha", {"n": 1})])
    for bad in ({"n": {"$regex": "."}}, {"$not": {"n": 1}}, {"n": {"$in": []}}, {"n": [1, 2]}):
        with pytest.raises(FilterError):
            list(pg.iter_documents(bad))
    with pytest.raises(FilterError):
        pg.count({"n": float("nan")})


def test_typed_filters_agree_with_matches(pg):
    values = [0, 1, 1.0, 2.5, -3, "1", "a", "B", "b", "é", "", True, False, None, [1], {"k": 1}]
    rows = [Document(f"r{i}", "text", {"v": v}) for i, v in enumerate(values)]
    rows.append(Document("none", "text", {}))
    pg.add(rows)
    scalars = [0, 1, 1.0, 2.5, "1", "a", "b", "", True, False, None]
    filters = [{"v": s} for s in scalars]
    filters += [{"v": {op: s}} for op in ("$ne", "$eq") for s in scalars]
    filters += [{"v": {op: s}} for op in ("$gt", "$gte", "$lt", "$lte") for s in (0, 1.5, "a")]
    filters += [{"v": {"$in": [1, "a", None]}}, {"v": {"$nin": [1, "a", None]}}]
    filters += [{"v": {"$exists": True}}, {"v": {"$exists": False}}]
    for filter in filters:
        want = [d.id for d in rows if matches(d.metadata, filter)]
        assert [d.id for d in pg.iter_documents(filter)] == want, filter


# --- the DSN's password never shows -----------------------------------------------------------

CANARY = "Canary-PW-7f3a9c"


def _with_password(dsn: str) -> str:
    # trust authentication ignores the password, so the store connects with it in the DSN
    return dsn.replace("postgres:@", f"postgres:{CANARY}@", 1)


def test_redact_every_dsn_form():
    for dsn in (
        f"postgresql://kb:{CANARY}@db.example.com:5432/kb",
        f"postgres://kb:{CANARY}@/kb?host=/tmp",
        f"host=db.example.com user=kb password={CANARY} dbname=kb",
        f"host=db user=kb password='{CANARY}' dbname=kb",
        f"postgresql://kb@db/kb?password={CANARY}&sslmode=require",
    ):
        assert CANARY not in redact(f"failed for {dsn}", dsn)
        assert CANARY not in describe(dsn)
    assert describe(f"postgresql://kb:{CANARY}@db.example.com:5433/docs") == (
        "postgresql://kb@db.example.com:5433/docs"
    )


def test_password_never_in_stats_repr_or_errors(pg_dsn, pg_table, caplog):
    caplog.set_level(logging.DEBUG)
    dsn = _with_password(pg_dsn)
    assert CANARY in dsn
    store = PostgresStore(dsn, pg_table)
    store.add([Document("a", "alpha", {"source": "/a.md"})], [[1.0, 0.0]])
    shown = json.dumps(store.stats()) + repr(store) + store.location
    store.close()
    assert CANARY not in shown and "postgres" in store.location
    bad = f"postgresql://kb:{CANARY}@/nodb?host=/nonexistent-socket-dir&connect_timeout=1"
    with pytest.raises(StoreError) as err:
        PostgresStore(bad, pg_table)
    assert CANARY not in str(err.value) and "Cannot connect" in str(err.value)
    assert CANARY not in caplog.text


def test_kb_cli_on_postgres_never_shows_the_password(pg_dsn, pg_table, tmp_path, monkeypatch):
    dsn = _with_password(pg_dsn)
    config = tmp_path / "jianmu.yaml"
    config.write_text(f"store:\n  backend: postgres\n  table: {pg_table}\n")
    monkeypatch.setenv("KB_CONFIG", str(config))
    monkeypatch.setenv("KB_PG_DSN", dsn)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vpn.md").write_text("# VPN\n\nReset the VPN password every 90 days.\n")
    (docs / "mail.md").write_text("# Mail\n\nThe mail server runs on port 25.\n")
    outputs = []
    for args in (
        ["ingest", str(docs)],
        ["search", "vpn password", "--mode", "keyword", "--json"],
        ["search", "vpn password", "--json"],
        ["stats", "--json"],
        ["stats"],
        ["list", "--json"],
    ):
        result = run(*args)
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        outputs.append(result.stdout + result.stderr)
    assert json.loads(outputs[1])[0]["metadata"]["source"].endswith("vpn.md")
    stats = json.loads(outputs[3])
    assert (stats["chunks"], stats["files"], stats["backend"]) == (2, 2, "postgres")
    added = run("add", "The badge office opens at nine", "--meta", "team=it")
    assert added.exit_code == 0, added.stderr
    new_id = added.stdout.strip()
    found = run("search", "badge office", "--mode", "keyword", "--filter", "team=it", "--json")
    assert [h["id"] for h in json.loads(found.stdout)] == [new_id]
    assert run("delete", new_id).exit_code == 0
    assert run("delete", "--source", str(docs / "mail.md")).exit_code == 0
    listed = json.loads(run("list", "--json").stdout)
    assert [d["metadata"]["source"] for d in listed] == [str((docs / "vpn.md").resolve())]
    outputs += [added.stdout + added.stderr, found.stdout + found.stderr]
    assert all(CANARY not in out for out in outputs)
    monkeypatch.setenv("KB_PG_DSN", f"postgresql://kb:{CANARY}@/x?host=/nonexistent-dir")
    failed = run("stats")
    assert failed.exit_code != 0 and CANARY not in failed.stdout + failed.stderr


def test_nul_characters_are_a_clear_error(pg):
    with pytest.raises(StoreError, match="NUL"):
        pg.add([Document("a", "text with \x00 inside", {})])
    with pytest.raises(StoreError, match="NUL"):
        pg.add([Document("b", "text", {"k": "v\x00"})])
    assert pg.count() == 0


# --- locks, schema, configuration --------------------------------------------------------------


def test_a_writer_waits_for_another_then_fails(pg_dsn, pg_table):
    from kbcli.errors import DatabaseLockedError

    first = PostgresStore(pg_dsn, pg_table)
    second = PostgresStore(pg_dsn, pg_table, busy_timeout=0.2)
    try:
        with first.transaction():
            first.add([Document("a", "alpha", {})])
            with pytest.raises(DatabaseLockedError):
                second.add([Document("b", "beta", {})])
            assert second.count() == 0  # readers never wait, and see the last commit
        second.add([Document("b", "beta", {})])
        assert [d.id for d in first.iter_documents()] == ["a", "b"]
    finally:
        first.close()
        second.close()


def test_schema_checks(pg_dsn, pg_table):
    from kbcli.errors import ConfigError, NotAKnowledgeBaseError

    with pytest.raises(StoreError, match="No knowledge base"):
        PostgresStore(pg_dsn, pg_table, create=False)
    for bad in ("Kb", "kb-chunks", 'kb"; drop', "x" * 41, ""):
        with pytest.raises(ConfigError):
            PostgresStore(pg_dsn, bad)
    store = PostgresStore(pg_dsn, pg_table)
    store.set_meta("schema_version", "99")
    store.close()
    with pytest.raises(NotAKnowledgeBaseError, match="newer kbcli"):
        PostgresStore(pg_dsn, pg_table)


def test_kb_ingest_stores_every_vector(pg_dsn, pg_table, tmp_path, monkeypatch):
    """The vector fill after ``kb ingest``'s writes (``Store.set_vectors``) stores the vectors
    on PostgreSQL too: dense search finds the chunks, the next ingest has nothing to embed."""
    config = tmp_path / "jianmu.yaml"
    config.write_text(
        f"store:\n  backend: postgres\n  table: {pg_table}\n  dsn: '{pg_dsn}'\n"
        "rag:\n  embedding:\n    provider: simple\n"
    )
    monkeypatch.setenv("KB_CONFIG", str(config))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vpn.md").write_text("# VPN\n\nReset the VPN password every 90 days.\n")
    (docs / "mail.md").write_text("# Mail\n\nThe mail server runs on port 25.\n")
    assert run("ingest", str(docs)).exit_code == 0
    with PostgresStore(pg_dsn, pg_table) as store:
        stats = store.stats()
        assert stats["vectors"] == stats["chunks"] == 2
        stored = list(store.iter_documents(with_embeddings=True))
        for d in stored:
            assert store.search(list(d.embedding), k=1)[0].document.id == d.id
    again = run("ingest", str(docs), "--json")
    assert json.loads(again.stdout)["vectors_added"] == 0, again.stdout


def test_store_settings_from_config(tmp_path, monkeypatch):
    from kbcli.config.lookup import load_config
    from kbcli.errors import ConfigError

    file = tmp_path / "jianmu.yaml"
    file.write_text(
        "store:\n  backend: postgres\n  dsn: postgresql://kb@db/kb\n  table: team_kb\n"
        "  busy_timeout: 5\n  ef_search: 200\n  hnsw: false\n"
        "  read_dsn: postgresql://kb@standby/kb\n"
    )
    store = load_config(file).store
    assert (store.backend, store.settings) == (
        "postgres",
        {
            "dsn": "postgresql://kb@db/kb",
            "table": "team_kb",
            "busy_timeout": 5.0,
            "ef_search": 200,
            "hnsw": False,
            "read_dsn": "postgresql://kb@standby/kb",
        },
    )
    file.write_text("store:\n  backend: postgres\n  tabel: x\n")
    with pytest.raises(ConfigError, match="did you mean table"):
        load_config(file)
    file.write_text("store:\n  backend: postgres\n  dsn: 5\n")
    with pytest.raises(ConfigError, match="must be a string"):
        load_config(file)


def test_kb_finds_no_index_and_no_dsn(pg_dsn, pg_table, tmp_path, monkeypatch):
    config = tmp_path / "jianmu.yaml"
    config.write_text(f"store:\n  backend: postgres\n  table: {pg_table}\n")
    monkeypatch.setenv("KB_CONFIG", str(config))
    monkeypatch.setenv("KB_PG_DSN", pg_dsn)
    result = run("stats")
    assert result.exit_code == 1 and "No knowledge base" in result.stderr
    monkeypatch.delenv("KB_PG_DSN")
    result = run("search", "x", "--mode", "keyword")
    assert result.exit_code == 2 and "KB_PG_DSN" in result.stderr


# --- the BM25 parity histories (tests/stores/test_bm25_parity.py) on PostgreSQL -------------


@pytest.mark.parametrize("seed", range(2))
def test_random_histories_keep_postgres_scores_exact(pg, seed):
    from keyword_reference import SOURCES as PARITY_SOURCES
    from keyword_reference import check, random_doc

    rng = random.Random(seed)
    for step in range(25):
        action = rng.choice(
            ["add", "add", "upsert", "delete", "source", "filter", "replace", "rebuild"]
        )
        state = random.Random(seed * 1000 + step)
        ids = [d.id for d in pg.iter_documents()]
        if action == "add" or not ids:
            pg.add([random_doc(state, f"d{step}-{i}") for i in range(state.randint(1, 6))])
        elif action == "upsert":
            pg.add([random_doc(state, state.choice(ids))])
        elif action == "delete":
            pg.remove(state.sample(ids, min(len(ids), state.randint(1, 3))))
        elif action == "source":
            pg.delete_source(state.choice(PARITY_SOURCES[:3]))
        elif action == "filter":
            pg.delete_where({"team": state.choice(["ops", "dev"])})
        elif action == "replace":
            source = state.choice(PARITY_SOURCES[:3])
            docs = [random_doc(state, f"r{step}-{i}") for i in range(state.randint(0, 3))]
            for d in docs:
                d.metadata["source"] = source
            pg.replace_source(source, docs)
        else:
            pg.rebuild_keyword_index()
        check(pg, random.Random(step))


def test_a_first_bulk_add_builds_the_hnsw_index_once(pg, monkeypatch):
    from kbcli.stores.postgres import store as store_module

    monkeypatch.setattr(store_module, "BULK_INDEX_ROWS", 50)
    rng = random.Random(3)
    docs = [Document(f"b{i}", f"bulk {i}", {"n": i}) for i in range(60)]
    vecs = [[rng.random() for _ in range(4)] for _ in docs]
    pg.add(docs, vecs)
    assert pg.exact is False  # the index exists after the batch
    hits = pg.search(vecs[7], k=3, filter={"n": {"$lt": 30}})
    assert hits[0].document.id == "b7" and len(hits) == 3


def test_a_version_2_index_keeps_only_the_vectors_that_left(pg_dsn, pg_table):
    """Version 2 cached every vector a second time (``_cache``, no order); opening it migrates
    to version 3: the chunks' own vectors are the cache (an index on ``text_hash``), the rows
    of texts still stored are dropped, the others kept in order."""
    import psycopg

    from kbcli.embedders.base import EmbedderInfo
    from kbcli.stores.common import pack_vector, text_hash

    info = EmbedderInfo("fake", "m-3", 3)
    store = PostgresStore(pg_dsn, pg_table)
    store.add([Document("a", "alpha text", {"source": "/a.md"}),
               Document("b", "beta text", {"source": "/b.md"})],
              [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], embedder=info)  # fmt: skip
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 2's schema
        conn.execute(f'DROP INDEX "{pg_table}_text_hash"')
        conn.execute(f'ALTER TABLE "{pg_table}_cache" DROP COLUMN kept')
        rows = [("alpha text", [1.0, 0.0, 0.0]), ("beta text", [0.0, 1.0, 0.0]),
                ("gone text", [0.0, 0.0, 1.0])]  # fmt: skip
        for text, vec in rows:
            conn.execute(
                f'INSERT INTO "{pg_table}_cache" VALUES (%s, %s, %s)',
                ("fake/m-3", text_hash(text), pack_vector(vec)),
            )
        conn.execute(f"UPDATE \"{pg_table}_meta\" SET value = '2' WHERE key = 'schema_version'")
    store = PostgresStore(pg_dsn, pg_table)
    try:
        assert store.get_meta("schema_version") == "3"
        with store._db.read() as conn:
            kept = [r[0] for r in conn.execute(f'SELECT text_hash FROM "{pg_table}_cache"')]
        assert kept == [text_hash("gone text")]
        assert store.cached_embeddings(info, ["alpha text", "gone text", "new"]) == {
            "alpha text": [1.0, 0.0, 0.0],
            "gone text": [0.0, 0.0, 1.0],
        }
    finally:
        store.close()
