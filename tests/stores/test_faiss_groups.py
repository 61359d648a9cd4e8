"""FAISS holds each distinct vector once: copies share a group, a hit stands for each id of
its group, groups follow upserts and removals, survive the file, and a fingerprint collision
never merges different vectors."""

from __future__ import annotations

import random

import pytest

from extras import need

faiss = need("faiss")
np = need("numpy")

from kbcli import Document  # noqa: E402
from kbcli.stores.faiss import index as faiss_index  # noqa: E402
from kbcli.stores.faiss.store import FILE_MAGIC, FaissStore, FaissVectorIndex  # noqa: E402
from kbcli.text.vector_math import distinct_rows, row_fingerprints  # noqa: E402
from kbcli.types import FileRecord  # noqa: E402

DIM = 8
FACTORIES = ["Flat", "HNSW16", "IVF2,Flat"]


def _copies(seed: int = 4, distinct: int = 50, ids: int = 200):
    """``ids`` ids over ``distinct`` random vectors (each about ids/distinct times)."""
    rng = random.Random(seed)
    base = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(distinct)]
    keys = rng.sample(range(1, 100_000), ids)
    return keys, [base[n % distinct] for n in range(ids)], base


def _exact(live: dict[int, list[float]], query: list[float], k: int) -> list[int]:
    q = np.asarray(query) / np.linalg.norm(query)
    score = {i: float(np.dot(v, q) / np.linalg.norm(v)) for i, v in live.items()}
    return sorted(live, key=lambda i: (-round(score[i], 9), i))[:k]


def test_fingerprints_match_exactly_the_identical_rows():
    rows = np.asarray([[1, 2, 3], [1, 2, 3], [0.0, 2, 3], [-0.0, 2, 3], [1, 2, 3]], np.float32)
    prints = row_fingerprints(rows)
    assert prints[0] == prints[1] == prints[4]
    assert len({int(prints[0]), int(prints[2]), int(prints[3])}) == 3  # -0.0 is its own bits
    # the same row hashes the same alone as in a block (integer arithmetic, no rounding)
    assert row_fingerprints(rows[2:3])[0] == prints[2]
    groups, firsts = distinct_rows(rows, prints)
    assert groups.tolist() == [0, 0, 1, 2, 0] and firsts.tolist() == [0, 2, 3]


def test_a_fingerprint_collision_keeps_different_rows_apart():
    rows = np.asarray([[1, 2], [3, 4], [1, 2], [5, 6]], np.float32)
    groups, firsts = distinct_rows(rows, np.zeros(4, np.uint64))  # every print the same
    assert groups[0] == groups[2]
    assert len({int(groups[0]), int(groups[1]), int(groups[3])}) == 3
    assert sorted(map(tuple, rows[firsts].tolist())) == sorted({tuple(r) for r in rows.tolist()})


@pytest.mark.parametrize("factory", FACTORIES)
def test_copies_are_held_once(factory):
    keys, vecs, base = _copies()
    index = FaissVectorIndex(DIM, factory)
    index.build(keys, vecs)
    assert len(index) == 200 and index.distinct == 50 == index.faiss_index.ntotal
    assert index.ids().tolist() == sorted(keys)
    # the nearest vector is a base vector: every id holding it ties, lowest ids first
    holders = sorted(k for k, n in zip(keys, range(200)) if n % 50 == 7)
    hits = index.search(base[7], 3)
    assert [i for i, _ in hits] == holders[:3]
    assert hits[0][1] == hits[1][1] == hits[2][1] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("factory", ["Flat", "HNSW16"])
def test_an_added_copy_joins_its_group_and_the_last_copy_takes_it_away(factory):
    keys, vecs, base = _copies()
    index = FaissVectorIndex(DIM, factory)
    index.build(keys[:150], vecs[:150])
    assert index.distinct == 50
    index.upsert(keys[150:] + [7], vecs[150:] + [base[3]])
    assert len(index) == 201 and index.distinct == 50  # FAISS gave no new entry
    assert 7 in [i for i, _ in index.search(base[3], 10)]
    holders = [k for k, n in zip(keys, range(200)) if n % 50 == 3] + [7]
    index.remove(holders[:-1])
    assert index.distinct == 50  # id 7 still holds it
    index.remove([7])
    assert index.distinct == 49 and len(index) == 201 - len(holders)
    assert all(i not in holders for i, _ in index.search(base[3], 20))


def test_an_index_that_gives_vectors_back_changed_keeps_added_copies_apart():
    """A product quantiser gives back an approximation, never the bits it was given: a copy
    added later gets a group of its own (still found); a rebuild shares it again."""
    keys, vecs, base = _copies(distinct=40)
    index = FaissVectorIndex(DIM, "PQ2x4")
    index.build(keys[:120], vecs[:120])
    assert not index.exact and index.distinct == 40
    index.upsert([3, 5], [base[0], base[0]])
    assert index.distinct == 41
    assert {3, 5} <= {i for i, _ in index.search(base[0], 8)}
    index.build(keys[:120] + [3, 5], vecs[:120] + [base[0], base[0]])
    assert index.distinct == 40


@pytest.mark.parametrize("factory", FACTORIES)
def test_every_vector_still_finds_its_own_id_after_removals(factory):
    """Regression: an IVF index under IndexIDMap2 named the wrong ids after a remove_ids (the
    lists keep their positions, the id map renumbers them)."""
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((200, DIM)).astype(np.float32)
    index = FaissVectorIndex(DIM, factory)
    index.build(np.arange(1000, 1200), vecs)
    index.remove([1005])
    index.remove([1100, 1101])
    for n in (0, 99, 150, 199):
        assert index.search(vecs[n], 1)[0][0] == 1000 + n
    assert index.search(vecs[150], 1, allowed=[1150, 1003])[0][0] == 1150


@pytest.mark.parametrize("factory", FACTORIES)
def test_search_over_copies_equals_an_exact_scan(factory):
    """A random sequence of builds, upserts, moves and removals over repeated vectors; every
    answer (with and without an allowed set) against a scan of what is live."""
    rng = random.Random(9)
    keys, vecs, base = _copies(seed=9, distinct=30, ids=240)
    live = dict(zip(keys[:160], vecs[:160]))
    index = FaissVectorIndex(DIM, factory, ef_search=256)
    index.build(list(live), list(live.values()))
    for step in range(12):
        if step % 3 == 0:
            fresh = rng.sample(keys[160:], 10)
            moved = {i: base[rng.randrange(30)] for i in fresh + rng.sample(sorted(live), 5)}
            index.upsert(list(moved), list(moved.values()))
            live.update(moved)
        elif step % 3 == 1:
            gone = rng.sample(sorted(live), 12)
            index.remove(gone)
            for i in gone:
                live.pop(i)
        assert len(index) == len(live)
        query = [rng.gauss(0, 1) for _ in range(DIM)]
        allowed = rng.sample(sorted(live), 25)
        for allow in (None, allowed):
            pool = live if allow is None else {i: live[i] for i in allow}
            for k in (1, 6, 20):
                hits = index.search(query, k, allowed=allow)
                assert len(hits) == k and {i for i, _ in hits} <= set(pool)
                if index.exact:
                    assert [i for i, _ in hits] == _exact(pool, query, k)


def _store_with_copies(path, factory="Flat"):
    """Three files; two hold the same licence chunk (one vector in two files)."""
    store = FaissStore(index_factory=factory, path=path)
    rng = random.Random(2)
    licence = [rng.gauss(0, 1) for _ in range(DIM)]
    for name in ("a.md", "b.md", "c.md"):
        own = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(4)]
        texts = [f"{name} part {n}" for n in range(4)]
        if name != "c.md":
            texts.append("Licensed under the Apache License")
            own.append(licence)
        docs = [Document(f"{name}#{n}", t, {"source": name}) for n, t in enumerate(texts)]
        record = FileRecord(name, 1, 1, "0" * 64, "{}", [d.id for d in docs])
        store.replace_file(record, docs, own)
    return store, licence


def test_the_store_finds_each_copy_and_keeps_the_groups_in_its_file(tmp_path):
    store, licence = _store_with_copies(tmp_path / "kb.db")
    hits = store.search(licence, 2)
    assert sorted(h.document.metadata["source"] for h in hits) == ["a.md", "b.md"]
    assert hits[0].score == hits[1].score
    store.close()
    again = FaissStore(path=tmp_path / "kb.db")
    with again._db.read() as conn:
        index = again._matrix.index(conn)
    assert again._matrix.rebuilds == 0  # read back from the file, groups and all
    assert (len(index), index.distinct) == (14, 13)
    only_b = again.search(licence, 1, {"source": "b.md"})
    assert [h.document.metadata["source"] for h in only_b] == ["b.md"]
    again.delete_source("a.md")
    hits = again.search(licence, 1)
    assert hits[0].document.metadata["source"] == "b.md"
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    with again._db.read() as conn:
        index = again._matrix.index(conn)
        assert again._matrix.verify(conn) is None
    assert (len(index), index.distinct) == (9, 9)
    again.close()


@pytest.mark.parametrize("damage", ["first format", "groups", "ids", "cut short", "trailing"])
def test_a_file_whose_groups_do_not_hold_is_rebuilt(tmp_path, damage):
    store, licence = _store_with_copies(tmp_path / "kb.db")
    path = store.faiss_path
    store.close()
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[8:16], "little")
    header_end = 16 + size
    stamps = 14 * 16
    body = header_end + stamps  # the index's own part: sizes, ids, groups, prints, faiss
    if damage == "first format":
        data[:8] = b"KBFAISS1"  # files of earlier versions hold every copy: rebuilt once
    elif damage == "groups":
        data[body + 16 + 8 * 14 : body + 16 + 8 * 15] = (999).to_bytes(8, "little")
    elif damage == "ids":
        data[body + 16 : body + 24] = (123_456).to_bytes(8, "little")
    elif damage == "cut short":
        del data[-10:]  # inside the FAISS part, which is streamed in
    else:
        data += b"\0" * 8
    path.write_bytes(bytes(data))
    again = FaissStore(path=tmp_path / "kb.db")
    if damage != "first format":
        with again._db.read() as conn:
            assert "damaged" in again._matrix.verify(conn)
    assert sorted(h.document.metadata["source"] for h in again.search(licence, 2)) == [
        "a.md", "b.md",
    ]  # fmt: skip
    assert again._matrix.rebuilds == 1
    assert path.read_bytes()[:8] == FILE_MAGIC
    again.close()


def test_hnsw_search_effort_follows_the_distinct_vectors(monkeypatch):
    keys, vecs, _ = _copies(distinct=20, ids=100)
    index = FaissVectorIndex(DIM, "HNSW16")
    index.build(keys, vecs)
    monkeypatch.setattr(faiss_index, "EF_SEARCH_BY_SIZE", ((50, 7),))
    assert index.effective_ef_search == 7  # 20 distinct vectors, though 100 ids


@pytest.mark.parametrize("factory", ["HNSW16", "IVF2,Flat"])
def test_an_index_that_cannot_remove_hides_emptied_vectors_until_a_fifth_are_dead(factory):
    keys, vecs, base = _copies(distinct=50, ids=50)  # every vector once
    index = FaissVectorIndex(DIM, factory, ef_search=64)
    index.build(keys, vecs)
    index.remove(keys[:5])  # the vectors stay in FAISS, unseen by search
    assert (index.distinct, index.faiss_index.ntotal) == (45, 50)
    for n in range(5):
        hits = index.search(base[n], 10)
        assert len(hits) == 10 and not {i for i, _ in hits} & set(keys[:5])
    assert {i for i, _ in index.search(base[9], 50)} == set(keys[5:])
    index.upsert([77], [base[2]])  # a vector that comes back takes its old entry
    assert (index.distinct, index.faiss_index.ntotal) == (46, 50)
    assert index.search(base[2], 1)[0][0] == 77
    index.remove(keys[5:12])  # 11 of 50 dead: past DEAD_SHARE, rebuilt from what is held
    assert (index.distinct, index.faiss_index.ntotal) == (39, 39)
    assert index.search(base[20], 1)[0][0] == keys[20]


def test_hidden_vectors_survive_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(faiss_index, "DEAD_SHARE", 0.5)  # 4 of 13 dead: kept, not rebuilt
    store, licence = _store_with_copies(tmp_path / "kb.db", factory="HNSW16")
    store.search(licence, 1)  # builds the index and its file
    store.delete_source("c.md")  # four vectors no other file holds
    store.search(licence, 1)  # brings the file up to date by difference
    store.close()
    again = FaissStore(index_factory="HNSW16", path=tmp_path / "kb.db")
    with again._db.read() as conn:
        index = again._matrix.index(conn)
        assert again._matrix.verify(conn) is None
    assert again._matrix.rebuilds == 0
    assert (len(index), index.distinct, index.faiss_index.ntotal) == (10, 9, 13)
    hits = again.search(licence, 10)
    assert len(hits) == 10 and "c.md" not in {h.document.metadata["source"] for h in hits}
    again.close()


def _exact_ids(vecs, ids, query, allowed, k):
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    q = np.asarray(query) / np.linalg.norm(query)
    pool = [(-float(unit[ids.index(i)] @ q), i) for i in allowed]
    return [i for _, i in sorted(pool)[:k]]


@pytest.mark.slow
def test_a_folder_filter_on_hnsw_is_an_exact_scan_of_its_runs():
    """A filter whose allowed vectors lie in a few runs (a folder's files were added together)
    gets the exact top k, even where the graph walk would miss (ef_search 1)."""
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((3000, DIM)).astype(np.float32)
    ids = list(range(10, 3010))
    index = FaissVectorIndex(DIM, "HNSW8", ef_search=1)
    index.build(ids, vecs)
    folder = ids[1200:1500] + ids[2600:2650]  # two runs, 350 of 3,000
    for query in rng.standard_normal((30, DIM)):
        got = [i for i, _ in index.search(query, 1, allowed=folder)]
        assert got == _exact_ids(vecs, ids, query, folder, 1)
    # new vectors (appended) and a rebuild after many removals keep the scan exact
    more = rng.standard_normal((100, DIM)).astype(np.float32)
    index.upsert(list(range(5000, 5100)), more)
    vecs, ids = np.vstack([vecs, more]), ids + list(range(5000, 5100))
    index.remove(ids[:900])  # 30 % dead: rebuilt, groups renumbered
    assert index.faiss_index.ntotal == index.distinct == 2200
    folder = ids[1300:1500] + ids[-60:]
    for query in rng.standard_normal((30, DIM)):
        hits = index.search(query, 3, allowed=folder)
        assert [i for i, _ in hits] == _exact_ids(vecs, ids, query, folder, 3)


def test_a_scattered_filter_on_hnsw_uses_the_graph(monkeypatch):
    rng = np.random.default_rng(6)
    vecs = rng.standard_normal((2000, DIM)).astype(np.float32)
    index = FaissVectorIndex(DIM, "HNSW8")
    index.build(np.arange(2000), vecs)
    scans = []
    real_scan = FaissVectorIndex._scan
    monkeypatch.setattr(FaissVectorIndex, "_scan", lambda self, *a: scans.append(1) or
                        real_scan(self, *a))  # fmt: skip
    scattered = np.arange(0, 2000, 7)  # 286 runs of one, within SCAN_RUNS: scanned
    index.search(vecs[0], 5, allowed=scattered)
    assert scans == [1]
    monkeypatch.setattr(faiss_index, "SCAN_RUNS", 100)  # too many runs: the graph walks
    hits = index.search(vecs[0], 5, allowed=scattered)
    assert scans == [1] and len(hits) == 5 and hits[0][0] == 0


def test_doctor_finds_a_chunk_filed_under_another_vector_and_repairs_it(tmp_path):
    """A file whose numbers all hold together but which files one chunk under another
    vector's group (search would answer with it for the wrong query): kb doctor compares
    every stored vector's fingerprint with its group's."""
    store, licence = _store_with_copies(tmp_path / "kb.db")
    path = store.faiss_path
    store.close()
    data = bytearray(path.read_bytes())
    body = 16 + int.from_bytes(data[8:16], "little") + 14 * 16
    first_group = body + 16 + 8 * 14
    data[first_group : first_group + 8] = (5).to_bytes(8, "little")  # a valid, other group
    path.write_bytes(bytes(data))
    again = FaissStore(path=tmp_path / "kb.db")
    bad = [f for f in again.doctor() if not f.ok]
    want = f"{path.name} holds other vectors than the catalog for 1 chunks"
    assert [f.detail for f in bad] == [want]
    assert all(f.repaired for f in again.doctor(repair=True) if not f.ok)
    assert all(f.ok for f in again.doctor())
    assert sorted(h.document.metadata["source"] for h in again.search(licence, 2)) == [
        "a.md", "b.md",
    ]  # fmt: skip
    again.close()


@pytest.mark.parametrize("factory", ["Flat", "HNSW16"])
def test_a_build_that_may_reuse_its_input_gives_the_same_index(factory):
    keys, vecs, base = _copies(seed=12, distinct=40, ids=300)
    matrix = np.asarray(vecs, np.float32)
    plain = FaissVectorIndex(DIM, factory, ef_search=300)
    plain.build(keys, matrix.copy())
    reused = FaissVectorIndex(DIM, factory, ef_search=300)
    reused.build(keys, matrix, reuse=True)
    assert (reused.distinct, len(reused)) == (plain.distinct, len(plain)) == (40, 300)
    for n in (0, 17, 39):
        assert reused.search(base[n], 12) == plain.search(base[n], 12)
