"""One BM25: every keyword index gives the scores of the definition, after any history.

Random adds, upserts, deletes (by id, source and filter), replaced sources and rebuilds are
applied alike to an InMemoryStore and an SQLiteStore, whose packed postings have a tiny merge
threshold (so the pack is searched with a delta, tombstones and after merges); after each step
both rank random queries
(with and without source context and a filter) exactly like an independent plain BM25
(``bm25_plain``) over the documents they hold, to 1e-6, and SQLite's statistics stay consistent.
"""

from __future__ import annotations

import random

import pytest

from kbcli import InMemoryStore, SQLiteStore
from keyword_reference import (
    SOURCES,
    check,
    random_doc,
)


@pytest.mark.slow
@pytest.mark.parametrize("small", [False, True], ids=["numpy", "packread"])
@pytest.mark.parametrize("seed", range(6))
def test_random_histories_keep_scores_exact(tmp_path, seed, monkeypatch, small):
    from types import SimpleNamespace

    from kbcli.stores.sqlite import keyword, packed, packread, packview

    used: list[int] = []
    if small:  # searched as in a process without numpy: packread over the pack and the delta
        monkeypatch.setattr(keyword, "sys", SimpleNamespace(modules={}))
        real = packread.search

        def counted(*args, **kwargs):
            rows = real(*args, **kwargs)
            used.extend([] if rows is None else [1])
            return rows

        monkeypatch.setattr(packread, "search", counted)
    monkeypatch.setattr(packview, "MERGE_MIN", 4)
    monkeypatch.setattr(packed, "FILTER_PROBE", 8 if seed % 2 else 0)
    monkeypatch.setattr(packed, "SPARSE_RATIO", 0 if seed % 3 == 0 else 10**9)  # both scorers
    rng = random.Random(seed)
    stores = [SQLiteStore(tmp_path / f"kb{seed}.db"), InMemoryStore()]
    next_id = 0
    for step in range(40):
        action = rng.choice(
            ["add", "add", "upsert", "delete", "source", "filter", "replace", "rebuild"]
        )
        for store in stores:
            state = random.Random(seed * 1000 + step)  # the same step on both stores
            ids = [d.id for d in store.iter_documents()]
            if action == "add" or not ids:
                store.add(
                    [random_doc(state, f"d{next_id + i}") for i in range(state.randint(1, 6))]
                )
            elif action == "upsert":
                store.add([random_doc(state, state.choice(ids))])
            elif action == "delete":
                store.remove(state.sample(ids, min(len(ids), state.randint(1, 3))))
            elif action == "source":
                store.delete_source(state.choice(SOURCES[:3]))
            elif action == "filter":
                store.delete_where({"team": state.choice(["ops", "dev"])})
            elif action == "replace":
                source = state.choice(SOURCES[:3])
                docs = [random_doc(state, f"r{step}-{i}") for i in range(state.randint(0, 3))]
                for d in docs:
                    d.metadata["source"] = source
                store.replace_source(source, docs)
            else:
                store.rebuild_keyword_index()
        next_id += 6
        ids = [d.id for d in stores[0].iter_documents()]
        for other in stores[1:]:
            assert [d.id for d in other.iter_documents()] == ids
        assert stores[0].integrity_check() == []
        if small and rng.random() < 0.3:
            stores[0].prepare_search()  # a new pack now and then, as `kb ingest` writes
        for store in stores:
            check(store, random.Random(step))
    assert bool(used) == small
