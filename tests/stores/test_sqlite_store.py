import random
import sqlite3
from collections import Counter

import pytest

from bm25_plain import plain_bm25, plain_bm25_with_sources
from kbcli import (
    Analyzer,
    BM25Retriever,
    Document,
    IndexMismatchError,
    NotAKnowledgeBaseError,
    SimpleEmbedder,
    SQLiteStore,
)
from kbcli.embedders.base import EmbedderInfo
from kbcli.search.fusion import SOURCE_WEIGHT
from kbcli.stores.sqlite import SCHEMA_VERSION

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()


def random_text(rng: random.Random) -> str:
    return " ".join(
        rng.choice(WORDS[: rng.randint(3, len(WORDS))]) for _ in range(rng.randint(1, 30))
    )


def check_parity(
    store: SQLiteStore,
    expected_docs: dict[str, str],
    query: str,
    sources: dict[str, str | None] | None = None,
) -> None:
    analyzer = store.analyzer
    docs = {i: analyzer.terms(t) for i, t in expected_docs.items()}
    expected = plain_bm25_with_sources(analyzer.terms(query), docs, sources or {}, SOURCE_WEIGHT)
    got = store.keyword_search(query, k=len(expected_docs) + 5)
    assert {r.document.id: r.score for r in got} == pytest.approx(expected, abs=1e-6)
    for r in got:  # the score is exactly its two explained parts
        parts = r.explain
        assert r.score == pytest.approx(
            parts["bm25_chunk"] + parts["source_weight"] * parts["bm25_source"]
        )
    scores = [r.score for r in got]
    assert scores == sorted(scores, reverse=True)


def test_bm25_matches_plain_formula_after_adds_upserts_and_deletes(tmp_path):
    rng = random.Random(42)
    store = SQLiteStore(tmp_path / "kb.db")
    live: dict[str, str] = {}
    source_of: dict[str, str | None] = {}
    for step in range(40):
        batch = []
        for _ in range(rng.randint(1, 6)):
            doc_id = f"d{rng.randint(0, 60)}"  # collisions make upserts
            source = rng.choice(["/s0.md", "/s1.md", "/s2.md", "/s3.md", None])
            meta = {"source": source} if source else {}
            batch.append(Document(doc_id, random_text(rng), meta))
        # last write of an id in a batch wins, as in the store
        store.add(batch)
        for d in batch:
            live[d.id] = d.text
            source_of[d.id] = d.metadata.get("source")
        if step % 3 == 2:
            doomed = rng.sample(sorted(live), k=min(3, len(live)))
            store.delete(doomed)
            for d in doomed:
                live.pop(d)
        if step % 7 == 6:
            gone = rng.choice(["/s0.md", "/s1.md"])
            store.delete_source(gone)
            for d in [d for d in live if source_of[d] == gone]:
                live.pop(d)
        query = " ".join(rng.sample(WORDS, 3)) + " alpha alpha"
        check_parity(store, live, query, source_of)
        assert store.integrity_check() == []
    assert store.integrity_check() == []
    assert store.count() == len(live)
    # re-tokenising everything rebuilds the same index
    store.rebuild_keyword_index()
    assert store.integrity_check() == []
    check_parity(store, live, "alpha beta gamma", source_of)


def test_upsert_replaces_text_metadata_vector_and_index(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("x", "apples and pears", {"v": 1})], [[1.0, 0.0]])
    store.add([Document("x", "bananas only", {"v": 2})], [[0.0, 1.0]])
    assert store.count() == 1
    [doc] = store.get(["x"], with_embeddings=True)
    assert (doc.text, doc.metadata, doc.embedding) == ("bananas only", {"v": 2}, [0.0, 1.0])
    assert store.keyword_search("apples") == []
    assert [r.document.id for r in store.keyword_search("bananas")] == ["x"]
    assert store.search([0.0, 1.0], k=1)[0].score == pytest.approx(1.0)
    assert store.integrity_check() == []


def test_persistence_across_reopen(tmp_path):
    path = tmp_path / "sub" / "dir" / "kb.db"
    emb = SimpleEmbedder()
    with SQLiteStore(path) as store:
        texts = ["reset your password from settings", "weather today", "password policy"]
        store.add(
            [Document(f"d{i}", t, {"i": i}) for i, t in enumerate(texts)],
            emb.embed_documents(texts),
            embedder=emb.info,
        )
        before = [(r.document.id, r.score) for r in store.keyword_search("password")]
    reopened = SQLiteStore(path)
    after = [(r.document.id, r.score) for r in reopened.keyword_search("password")]
    assert after == before and len(after) == 2
    assert reopened.get(["d1"])[0].metadata == {"i": 1}
    assert reopened.embedder_info == EmbedderInfo("simple", "char-hash-64", 64)
    assert reopened.search(emb.embed_query("weather today"), k=1)[0].document.id == "d1"
    assert reopened.list_all()[0].id == "d0"
    assert reopened.stats()["chunks"] == 3


def test_prefilter_gives_k_results_among_matching(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    emb = SimpleEmbedder()
    docs = []
    for i in range(40):
        # The 20 "a" documents are the best keyword and dense matches; the filter excludes them.
        text = "password reset password" if i % 2 == 0 else f"password note {i}"
        docs.append(Document(f"d{i}", text, {"group": "a" if i % 2 == 0 else "b"}))
    store.add(docs, emb.embed_documents([d.text for d in docs]))
    hits = store.keyword_search("password reset", k=5, filter={"group": "b"})
    assert len(hits) == 5 and all(h.document.metadata["group"] == "b" for h in hits)
    dense = store.search(emb.embed_query("password reset password"), k=5, filter={"group": "b"})
    assert len(dense) == 5 and all(h.document.metadata["group"] == "b" for h in dense)


def test_dense_search_matches_brute_force(tmp_path):
    rng = random.Random(1)
    store = SQLiteStore(tmp_path / "kb.db")
    vecs = [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(50)]
    store.add([Document(f"d{i}", f"t{i}") for i in range(50)], vecs)
    q = [rng.uniform(-1, 1) for _ in range(8)]
    from kbcli import cosine_similarity

    expected = sorted(range(50), key=lambda i: -cosine_similarity(q, vecs[i]))[:7]
    hits = store.search(q, k=7)
    assert [h.document.id for h in hits] == [f"d{i}" for i in expected]
    assert hits[0].score == pytest.approx(cosine_similarity(q, vecs[expected[0]]), abs=1e-5)


def test_vector_dimension_mismatch_is_refused(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "x")], [[1.0, 0.0]])
    with pytest.raises(IndexMismatchError, match="dimensions"):
        store.add([Document("b", "y")], [[1.0, 0.0, 0.0]])
    with pytest.raises(IndexMismatchError, match="dimensions"):
        store.search([1.0, 0.0, 0.0])
    assert store.count() == 1


def test_embedder_mismatch_is_refused(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "x")], [[1.0, 0.0]], embedder=EmbedderInfo("openai", "m1", 2))
    with pytest.raises(IndexMismatchError, match="openai/m1"):
        store.check_embedder(EmbedderInfo("gemini", "g1", 2))
    store.check_embedder(EmbedderInfo("openai", "m1", None))


def test_analyzer_change_re_tokenises_the_index(tmp_path):
    path = tmp_path / "kb.db"
    SQLiteStore(path, analyzer=Analyzer(stopwords=False)).add([Document("a", "the cat")])
    other = SQLiteStore(path, analyzer=Analyzer(stopwords=True))
    assert [r.document.id for r in other.keyword_search("cat")] == ["a"]
    assert other.get_meta("analyzer") == other.keyword_signature
    assert other.stats()["vocabulary"] == 1  # "the" is a stopword now
    assert other.rebuild_keyword_index() == 1
    assert [r.document.id for r in other.keyword_search("cat")] == ["a"]
    assert other.integrity_check() == []


def test_not_a_kb_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(NotAKnowledgeBaseError, match="not a kb database"):
        SQLiteStore(junk)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAKnowledgeBaseError, match="another program"):
        SQLiteStore(foreign)
    with pytest.raises(NotAKnowledgeBaseError, match="folder"):
        SQLiteStore(tmp_path)


def test_schema_version_and_wal(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    conn = sqlite3.connect(tmp_path / "kb.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "postings" not in tables  # a chunk's postings are its forward index
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_newer_schema_is_refused(tmp_path):
    SQLiteStore(tmp_path / "kb.db").close()
    conn = sqlite3.connect(tmp_path / "kb.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(NotAKnowledgeBaseError, match="newer kbcli"):
        SQLiteStore(tmp_path / "kb.db")


def test_failed_write_rolls_back_everything(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "one two")])
    before = store.stats()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add([Document("b", "three four")])
            store.delete(["a"])
            raise RuntimeError("boom")
    after = store.stats()
    assert (after["chunks"], after["vocabulary"]) == (before["chunks"], before["vocabulary"])
    assert [d.id for d in store.list_all()] == ["a"]
    assert store.integrity_check() == []


def test_delete_source_replace_source_and_listing(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document(f"a{i}", f"apple {i}", {"source": "/a.md"}) for i in range(3)])
    store.add([Document("b0", "banana", {"source": "/b.md"})])
    assert store.sources() == [("/a.md", 3), ("/b.md", 1)]
    store.replace_source("/a.md", [Document("a9", "apricot", {"source": "/a.md"})])
    assert [d.id for d in store.iter_documents(source="/a.md")] == ["a9"]
    assert store.delete_source("/b.md") == 1
    assert store.remove(["a9", "nope"]) == 1
    assert store.count() == 0 and store.integrity_check() == []
    assert store.stats()["vocabulary"] == 0


def test_bm25_retriever_uses_the_store_index_and_memory_fallback(tmp_path):
    from kbcli import InMemoryStore

    texts = {f"d{i}": t for i, t in enumerate(["cat sat", "cat cat dog", "dog", "bird", "cat"])}
    sources = {"d0": "/a.md", "d1": "/a.md", "d2": "/b.md", "d3": None, "d4": None}
    sql, mem = SQLiteStore(tmp_path / "kb.db"), InMemoryStore()
    for store in (sql, mem):
        store.add(
            [Document(i, t, {"source": sources[i]} if sources[i] else {}) for i, t in texts.items()]
        )
    a = [(r.document.id, r.score) for r in BM25Retriever(sql).search("cat dog", k=10)]
    b = [(r.document.id, r.score) for r in BM25Retriever(mem).search("cat dog", k=10)]
    assert [x[0] for x in a] == [x[0] for x in b]
    assert [x[1] for x in a] == pytest.approx([x[1] for x in b])
    analyzer = Analyzer()
    expected = plain_bm25_with_sources(
        analyzer.terms("cat dog"), {i: analyzer.terms(t) for i, t in texts.items()}, sources, 2.0
    )
    assert dict(b) == pytest.approx(expected)
    # source_weight 0 is plain chunk BM25
    plain = plain_bm25(analyzer.terms("cat dog"), {i: analyzer.terms(t) for i, t in texts.items()})
    for store in (sql, mem):
        hits = BM25Retriever(store, source_weight=0.0).search("cat dog", k=10)
        assert {h.document.id: h.score for h in hits} == pytest.approx(plain)


def test_long_query_is_bounded(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document(f"d{i}", f"word{i} common") for i in range(100)])
    query = " ".join(f"word{i}" for i in range(100)) + " common"
    hits = store.keyword_search(query, k=3)
    assert len(hits) == 3


def test_stats_counts(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "x y", {"source": "/f"}), Document("b", "y z")], [[1.0], [2.0]])
    s = store.stats()
    assert (s["chunks"], s["sources"], s["vectors"], s["vocabulary"]) == (2, 1, 2, 3)
    assert s["size_bytes"] > 0
    assert Counter(store.analyzer.terms("x y y")) == {"x": 1, "y": 2}


def test_vector_cache_file_is_used_refreshed_and_never_trusted_blindly(tmp_path, monkeypatch):
    path = tmp_path / "kb.db"
    store = SQLiteStore(path)
    store.add([Document("a", "x"), Document("b", "y")], [[1.0, 0.0], [0.0, 1.0]])
    assert store.search([1.0, 0.0], k=1)[0].document.id == "a"
    assert store.vector_cache_path.exists()

    from kbcli.stores.sqlite.vectors import MatrixCache

    def no_table_read(self, conn, tag):
        raise AssertionError("should come from the cache file")

    monkeypatch.setattr(MatrixCache, "_build", no_table_read)
    fresh = SQLiteStore(path)  # like a new `kb search` process
    assert fresh.search([0.0, 1.0], k=1)[0].document.id == "b"
    monkeypatch.undo()

    store.add([Document("c", "z")], [[0.6, 0.8]])  # vectors changed: the cache is stale
    assert [h.document.id for h in SQLiteStore(path).search([0.6, 0.8], k=1)] == ["c"]

    store.vector_cache_path.write_bytes(b"garbage")
    assert SQLiteStore(path).search([0.6, 0.8], k=1)[0].document.id == "c"

    # A new database at the same path must not pick up the old cache.
    store.close()
    cache = store.vector_cache_path.read_bytes()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"kb.db{suffix}").unlink(missing_ok=True)
    new = SQLiteStore(path)
    new.add([Document("z", "q")], [[0.0, 1.0]])
    store.vector_cache_path.write_bytes(cache)
    assert [h.document.id for h in SQLiteStore(path).search([1.0, 0.0], k=5)] == ["z"]


def test_heading_path_is_searchable_in_every_store(tmp_path):
    from kbcli import InMemoryStore

    docs = [
        Document("a", "Use apt to install the package.", {"heading": "Setup > Linux"}),
        Document("b", "Drag the app to Applications.", {"heading": "Setup > macOS"}),
    ]
    for store in (SQLiteStore(tmp_path / "kb.db"), InMemoryStore()):
        store.add(docs)
        hits = BM25Retriever(store).search("linux", k=5)
        assert [h.document.id for h in hits] == ["a"]
        assert hits[0].document.text == "Use apt to install the package."  # text unchanged


@pytest.mark.slow
def test_vector_cache_is_memory_mapped_and_built_in_batches(tmp_path, monkeypatch):
    import tracemalloc

    import numpy as np

    from kbcli.stores.sqlite import vectors as sqlite_vectors
    from kbcli.stores.sqlite.vectors import MatrixCache

    monkeypatch.setattr(sqlite_vectors, "STREAM_BATCH", 1024)  # small next to the matrix

    n, dim = 20_000, 64
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document(f"d{i}", f"t{i}") for i in range(n)], vectors.tolist())
    store.close()
    fresh = SQLiteStore(tmp_path / "kb.db")
    tracemalloc.start()
    hits = fresh.search(vectors[7].tolist(), k=1)  # cache miss: streamed into the file
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert hits[0].document.id == "d7"
    # Well under one copy of the matrix (5 MB) besides the mapped file; the old code held ~3.
    assert peak < vectors.nbytes * 0.5
    index = MatrixCache(fresh.path).index(fresh._db.conn)
    assert isinstance(index._matrix, np.memmap)  # a hit maps the file, no copy
