"""The packed keyword index: a derived file plus the log's delta, always exact.

Every search here is compared with :func:`kbcli.text.bm25.rank` over the same database's tables and
forward indexes (:class:`Definition`); the parity test checks the pack against an independent
plain formula.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from kbcli import Document, SQLiteStore
from kbcli.search.fusion import SOURCE_WEIGHT
from kbcli.stores.sqlite import packed, packfile, packlog, packview
from keyword_reference import reference_rank

WORDS = [f"w{i}" for i in range(30)]
QUERIES = ["w1 w2", "w3", "w0 w5 w9", "w20 w21", "w1 w1 w4"]
FILTERS = [None, {"team": "ops"}]


def make_docs(rng: random.Random, prefix: str, n: int) -> list[Document]:
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 15)))
        meta = {"team": rng.choice(["ops", "dev"]), "source": f"/f{rng.randint(0, 6)}.md"}
        out.append(Document(f"{prefix}{i}", text, meta))
    return out


def open_store(path, *, use_pack: bool = True):
    """A store searching its pack, or (``use_pack=False``) the definition over its file."""
    return SQLiteStore(path) if use_pack else Definition(path)


class Definition:
    """``keyword_search`` as :func:`reference_rank` computes it from the committed tables."""

    def __init__(self, path):
        self.path = path
        self.analyzer = SQLiteStore(path).analyzer

    def keyword_search(self, query, k=5, filter=None, *, source_weight=SOURCE_WEIGHT):
        ranked = reference_rank(self.path, self.analyzer, query, k, filter, source_weight)
        return [SimpleNamespace(document=SimpleNamespace(id=i), score=s) for i, s in ranked]

    def close(self) -> None:
        pass


def results(store: SQLiteStore, query: str, filter=None) -> list[tuple[str, float]]:
    return [(h.document.id, h.score) for h in store.keyword_search(query, k=50, filter=filter)]


def assert_same(store: SQLiteStore, reference: SQLiteStore) -> None:
    for query in QUERIES:
        for filter in FILTERS:
            got, want = results(store, query, filter), results(reference, query, filter)
            assert [d for d, _ in got] == [d for d, _ in want], (query, filter)
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)


@pytest.fixture
def stores(tmp_path):
    path = tmp_path / "kb.db"
    store = open_store(path)
    store.add(make_docs(random.Random(1), "a", 60))
    reference = open_store(path, use_pack=False)
    yield store, reference
    store.close()
    reference.close()


def header(store: SQLiteStore) -> dict:
    return packlog.read_header(store._keywords.packed_path)


def test_first_search_writes_the_pack(stores):
    store, reference = stores
    assert not store._keywords.packed_path.exists()
    assert_same(store, reference)
    assert header(store)["seq"] == 60


def test_writes_are_visible_at_once_as_a_delta(stores):
    store, reference = stores
    assert_same(store, reference)
    seq = header(store)["seq"]
    store.remove(["a0", "a1"])
    store.add([Document("a2", "w1 w2 w2 w2", {"team": "ops", "source": "/f1.md"})])  # upsert
    store.add(make_docs(random.Random(2), "b", 5))
    store.delete_source("/f3.md")
    assert_same(store, reference)
    assert header(store)["seq"] == seq  # served from the old pack and the delta
    assert "a0" not in {d for d, _ in results(store, "w1 w2 w3 w4 w5 w6 w7")}
    view = store._keywords._view[1]
    assert view.alive is not None and not view.alive.all()


def test_another_process_sees_the_writes(tmp_path):
    path = tmp_path / "kb.db"
    writer = open_store(path)
    writer.add(make_docs(random.Random(3), "a", 40))
    reader = open_store(path)
    reference = open_store(path, use_pack=False)
    assert_same(reader, reference)
    writer.remove(["a5"])
    writer.add(make_docs(random.Random(4), "c", 3))
    assert_same(reader, reference)


def test_a_large_delta_is_merged_into_a_new_pack(stores, monkeypatch):
    store, reference = stores
    monkeypatch.setattr(packview, "MERGE_MIN", 5)
    assert_same(store, reference)
    first = header(store)["seq"]
    store.add(make_docs(random.Random(5), "d", 10))
    assert_same(store, reference)
    assert header(store)["seq"] > first
    # The next write prunes the log rows the new pack holds.
    store.add(make_docs(random.Random(6), "e", 1))
    conn = sqlite3.connect(store.path)
    low = conn.execute("SELECT min(seq) FROM keyword_log").fetchone()[0]
    floor = conn.execute("SELECT value FROM meta WHERE key = 'keyword_log_floor'").fetchone()[0]
    conn.close()
    assert low > int(floor) == header(store)["seq"]
    assert_same(store, reference)
    assert store.integrity_check() == []


def test_a_pack_older_than_the_log_floor_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(packview, "MERGE_MIN", 3)
    path = tmp_path / "kb.db"
    old = open_store(path)
    old.add(make_docs(random.Random(7), "a", 30))
    reference = open_store(path, use_pack=False)
    assert_same(old, reference)  # `old` keeps this pack mapped
    other = open_store(path)
    other.add(make_docs(random.Random(8), "b", 10))
    assert_same(other, reference)  # a new pack on disk
    other.add(make_docs(random.Random(9), "c", 1))  # prunes the log past old's pack
    assert_same(old, reference)


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage", "other-index"])
def test_a_missing_or_damaged_pack_is_rebuilt(stores, damage, tmp_path):
    store, reference = stores
    assert_same(store, reference)
    path = store._keywords.packed_path
    if damage == "delete":
        path.unlink()
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "garbage":
        path.write_bytes(b"not a pack")
    else:
        stranger = open_store(tmp_path / "other.db")
        stranger.add(make_docs(random.Random(10), "z", 20))
        results(stranger, "w1")
        path.write_bytes(stranger._keywords.packed_path.read_bytes())
    fresh = open_store(store.path)  # a new process: nothing mapped yet
    assert_same(fresh, reference)
    assert header(fresh)["tag"] == packlog.current_tag(fresh._db.conn)
    assert fresh.integrity_check() == []


def test_a_crash_while_writing_a_pack_leaves_a_usable_index(stores, monkeypatch):
    store, reference = stores
    assert_same(store, reference)
    good = store._keywords.packed_path.read_bytes()
    monkeypatch.setattr(packview, "MERGE_MIN", 2)
    store.add(make_docs(random.Random(11), "f", 10))

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed between writing the temp file and the rename

    monkeypatch.setattr(packfile.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        results(store, "w1")
    monkeypatch.undo()
    assert store._keywords.packed_path.read_bytes() == good  # the old pack, whole
    tmp = list(store.path.parent.glob("*.keyword-pack.*.tmp"))
    assert tmp  # the half-done merge; never read
    fresh = open_store(store.path)
    assert_same(fresh, reference)
    assert fresh.integrity_check() == []


def test_unwritable_folder_costs_only_speed(stores, monkeypatch):
    store, reference = stores
    monkeypatch.setattr(packed, "write_pack", lambda *a, **k: False)
    assert_same(store, reference)
    assert not store._keywords.packed_path.exists()


def test_reanalysis_starts_a_new_epoch(stores):
    store, reference = stores
    assert_same(store, reference)
    tag = header(store)["tag"]
    store.rebuild_keyword_index()
    assert_same(store, reference)
    assert header(store)["tag"] != tag
    assert store.integrity_check() == []


def test_integrity_check_finds_a_pack_that_disagrees(stores):
    store, reference = stores
    assert_same(store, reference)
    path = store._keywords.packed_path
    head = header(store)
    dtype, offset, count = head["arrays"]["tf"]
    raw = bytearray(path.read_bytes())
    tf = np.frombuffer(raw, np.dtype(dtype), count, offset).copy()
    tf[0] += 1
    raw[offset : offset + tf.nbytes] = tf.tobytes()
    path.write_bytes(bytes(raw))
    problems = store.integrity_check()
    assert any("keyword pack" in p for p in problems)


def test_integrity_check_finds_a_forward_index_that_disagrees(stores):
    store, _ = stores
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE chunks SET terms = x'' WHERE doc = (SELECT min(doc) FROM chunks)")
    conn.commit()
    conn.close()
    assert any("forward indexes" in p for p in store.integrity_check())


def test_filters_use_candidates_or_a_cached_bitmap(stores, monkeypatch):
    store, reference = stores
    for probe in (0, 10_000):
        monkeypatch.setattr(packed, "FILTER_PROBE", probe)
        store._keywords._filters.clear()
        assert_same(store, reference)
    cached = {k: v for k, v in store._keywords._filters.items() if k != "seen"}
    assert cached and all(v.mask.dtype == bool for v in cached.values())
    store.add(make_docs(random.Random(12), "g", 1))
    results(store, "w1")
    assert store._keywords._filters == {}  # a new generation drops the bitmaps
    assert json.loads(json.dumps(FILTERS[1])) == {"team": "ops"}


@pytest.mark.parametrize("sparse_ratio", [0, 8, 10**9])
def test_common_terms_prune_and_stay_exact(tmp_path, monkeypatch, sparse_ratio):
    monkeypatch.setattr(packed, "SPARSE_RATIO", sparse_ratio)
    rng = random.Random(13)
    docs = [
        Document(
            f"p{i}",
            " ".join(rng.choice(["the", "of", "and", "to"] + WORDS) for _ in range(20)),
            {"team": rng.choice(["ops", "dev"]), "source": f"/s{i // 5}.md"},
        )
        for i in range(800)
    ]
    store = open_store(tmp_path / "kb.db")
    store.add(docs)
    reference = open_store(store.path, use_pack=False)
    for query in ("the of and", "the of and to w3", "the the w1", "w7 w8"):
        for k, weight, filter in itertools.product((1, 5, 10), (0.0, 2.0), FILTERS):
            got = store.keyword_search(query, k=k, source_weight=weight, filter=filter)
            want = reference.keyword_search(query, k=k, source_weight=weight, filter=filter)
            assert [h.document.id for h in got] == [h.document.id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-9)


def test_small_queries_without_numpy_rank_from_the_pack_on_disk(tmp_path, monkeypatch):
    """A process without numpy (a whole `kb search`) ranks a query of few postings from the
    pack on disk and the log's delta with bm25.rank; with many postings or a large delta the
    numpy executor runs. Both exact."""
    from kbcli.stores.sqlite import keyword, packread

    store = SQLiteStore(tmp_path / "kb.db")
    store.add(make_docs(random.Random(14), "h", 80))
    store.prepare_search()  # the pack holds this snapshot, as after `kb ingest`
    reference = Definition(store.path)
    used: list[int] = []
    real = packread.search

    def counted(*args, **kwargs):
        rows = real(*args, **kwargs)
        if rows is not None:  # None: left to the numpy executor
            used.append(1)
        return rows

    monkeypatch.setattr(packread, "search", counted)
    # as in a fresh `kb search` process (numpy itself stays loaded: it cannot be re-imported)
    monkeypatch.setattr(keyword, "sys", SimpleNamespace(modules={}))

    def assert_exact(expect_small: bool) -> None:
        for query, filter, weight in itertools.product(QUERIES, FILTERS, (0.0, 2.0)):
            used.clear()
            got = store.keyword_search(query, k=7, filter=filter, source_weight=weight)
            want = reference.keyword_search(query, k=7, filter=filter, source_weight=weight)
            assert [h.document.id for h in got] == [h.document.id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-9)
            assert bool(used) == expect_small, (query, filter)

    assert_exact(expect_small=True)
    monkeypatch.setattr(keyword, "SMALL_MAX_POSTINGS", 1)  # many postings for the limit
    assert_exact(expect_small=False)
    monkeypatch.setattr(keyword, "SMALL_MAX_POSTINGS", packread.SMALL_MAX_POSTINGS)
    # a delta since the pack: tombstones, an upsert, new chunks in old and new sources
    store.remove(["h3"])
    store.add(make_docs(random.Random(15), "h", 2) + make_docs(random.Random(16), "j", 6))
    store.delete_source("/f2.md")
    assert_exact(expect_small=True)
    monkeypatch.setattr(packread, "SMALL_MAX_DELTA", 3)  # too large a delta for packread
    assert_exact(expect_small=False)
    store.close()


def test_a_store_that_wrote_leaves_the_pack_when_it_closes(tmp_path):
    path = tmp_path / "kb.db"
    store = SQLiteStore(path)
    store.add(make_docs(random.Random(17), "h", 20))
    pack = store._keywords.packed_path
    assert not pack.exists()
    store.close()  # what the next search would write, written by the command that wrote
    assert packlog.read_header(pack)["seq"] == packlog.current_seq(sqlite3.connect(path))
    pack.unlink()
    reader = SQLiteStore(path)
    assert reader.count() == 20
    reader.close()  # it wrote nothing, so it leaves nothing
    assert not pack.exists()


def test_a_pack_that_packread_cannot_map_leaves_the_search_to_numpy(tmp_path, monkeypatch):
    from kbcli.stores.sqlite import keyword, packread

    store = SQLiteStore(tmp_path / "kb.db")
    store.add(make_docs(random.Random(16), "h", 30))
    store.prepare_search()
    tag = packlog.current_tag(store._db.conn)
    path = store._keywords.packed_path
    assert packread.open_pack(path, tag) is not None
    assert packread.open_pack(path, "another:index") is None
    store.close()  # it maps the pack: cutting that file in place would change its mapping
    raw = path.read_bytes()
    path.write_bytes(raw[:-8])  # cut short
    assert packread.open_pack(path, tag) is None
    monkeypatch.setattr(keyword, "sys", SimpleNamespace(modules={}))
    fresh = SQLiteStore(tmp_path / "kb.db")
    got, want = results(fresh, "w1 w2"), results(Definition(fresh.path), "w1 w2")
    assert [d for d, _ in got] == [d for d, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)
    assert packread.open_pack(path, tag) is not None  # the numpy executor wrote a whole one
    fresh.close()


@pytest.mark.parametrize("change", ["format 1", "other tf runs"])
def test_a_pack_of_another_layout_is_rebuilt(stores, change):
    store, reference = stores
    assert_same(store, reference)
    path = store._keywords.packed_path
    head = header(store)
    # What an older kb left beside the database: its magic and no format field, or the
    # runs split at another tf; the arrays after the header are as they were.
    if change == "format 1":
        head.pop("format")
        magic = b"KBPACK1\n"
    else:
        head["tf_runs"] = packlog.TF_RUNS + 1
        magic = packlog.MAGIC
    raw = bytearray(path.read_bytes())
    raw[: packlog.HEADER_SIZE] = (magic + json.dumps(head).encode()).ljust(packlog.HEADER_SIZE)
    path.write_bytes(bytes(raw))
    assert packlog.read_header(path)["tag"] is None  # of no index: stale, never mapped
    fresh = open_store(store.path)  # a new process
    assert fresh.integrity_check() == []  # a stale pack is no damage
    assert_same(fresh, reference)
    rebuilt = header(fresh)
    assert rebuilt["format"] == packlog.FORMAT and rebuilt["tf_runs"] == packlog.TF_RUNS
    assert rebuilt["tag"] == packlog.current_tag(fresh._db.conn)


def varied_docs(rng: random.Random, prefix: str, n: int) -> list[Document]:
    """Chunks of 1-60 words from a skewed vocabulary (tfs from 1 to over a dozen), sources of
    one to eight chunks and some without one, repeated texts (exact ties)."""
    vocab = [f"v{i}" for i in range(25)]
    weights = [1 / (r + 1) for r in range(len(vocab))]
    out, texts = [], []
    for i in range(n):
        if texts and rng.random() < 0.1:
            text = rng.choice(texts)
        else:
            text = " ".join(rng.choices(vocab, weights, k=rng.randint(1, 60)))
            texts.append(text)
        meta = {"team": rng.choice(["ops", "dev", "dev"])}
        if rng.random() < 0.9:
            meta["source"] = f"/s{rng.randint(0, n // 4)}.md"
        out.append(Document(f"{prefix}{i}", text, meta))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tf_runs", [2, 4, 7])
@pytest.mark.parametrize("sparse_ratio", [0, 8, 10**9])
@pytest.mark.parametrize("seed", [21, 22])
def test_runs_and_the_ranking_floor_match_the_definition(
    tmp_path, monkeypatch, tf_runs, sparse_ratio, seed
):
    """Random corpora, a pack then a delta with tombstones, many k, filters and weights:
    every top k is :func:`kbcli.text.bm25.rank`'s, ids in order and scores to 1e-9; the sparse
    scorer's scratch arrays are zero again after every search (a query of more terms than
    packed.SCRATCH_TERMS takes several passes)."""
    monkeypatch.setattr(packed, "SPARSE_RATIO", sparse_ratio)
    monkeypatch.setattr(packfile, "TF_RUNS", tf_runs)
    monkeypatch.setattr(packview, "TF_RUNS", tf_runs)
    monkeypatch.setattr(packlog, "TF_RUNS", tf_runs)
    rng = random.Random(seed)
    store = open_store(tmp_path / "kb.db")
    store.add(varied_docs(rng, "a", 300))
    queries = ["v0 v1 v2", "v0", "v1 v1 v7", "v3 v12 v20 v24", "v5 v0 v9 v2 v14",
               "v1 v3 v5 v7 v9 v11 v13 v15 v17"]  # fmt: skip
    filters = [None, {"team": "ops"}, {"team": "nobody"}]
    for stage in ("pack", "delta"):
        if stage == "delta":
            store.remove([f"a{i}" for i in rng.sample(range(300), 25)])
            store.add(varied_docs(rng, "b", 30))
            store.add(varied_docs(rng, "a", 10))  # upserts: new postings for old ids
        for query in queries:
            for k, weight, filter in itertools.product((0, 1, 2, 3, 10, 50), (0.0, 2.0), filters):
                got = [
                    (h.document.id, h.score)
                    for h in store.keyword_search(query, k=k, filter=filter, source_weight=weight)
                ]
                want = reference_rank(store.path, store.analyzer, query, k, filter, weight)
                assert [d for d, _ in got] == [d for d, _ in want], (stage, query, k, filter)
                assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)
        view = store._keywords._view[1]
        assert (view.alive is None) == (stage == "pack")
        if sparse_ratio != 8:  # 0: always sparse, 10**9: never
            assert bool(view._spare) == (sparse_ratio == 0)
        assert not any(s.chunk.any() or s.sources.any() for s in view._spare)
    assert header(store)["tf_runs"] == tf_runs
    store.close()
