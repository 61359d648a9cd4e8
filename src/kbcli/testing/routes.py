"""Every search and read route of a store through the retrievers: filters hold everywhere,
deletes vanish everywhere, MMR works in every mode, and filters agree with
:func:`kbcli.filters.model.matches` on random corpora.

Needs a ``store`` fixture (an empty store: a DocumentCatalog, a KeywordIndex or not, and a
vector store); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from kbcli.filters.model import matches
from kbcli.protocols import EmbedderProtocol
from kbcli.search.retrievers import HybridRetriever
from kbcli.testing._common import SearchStore, TableEmbedder, ids
from kbcli.types import Document, SearchOptions

MODES = ("keyword", "semantic", "hybrid")

# Every text holds "guide", so every route finds every document that passes a filter.
ROUTE_ROWS = [
    ("r01", "password reset guide for the vpn", {"team": "ops", "year": 2022, "source": "a.md"}),
    ("r02", "vpn client install guide", {"team": "ops", "year": 2023, "source": "a.md"}),
    ("r03", "guide to rotating the vpn password", {"team": "dev", "year": 2024, "source": "b.md"}),
    ("r04", "mail server guide and password policy", {"team": "dev", "year": 2025}),
    ("r05", "printer guide paper tray", {"team": "ops", "year": 2024, "source": "c.md"}),
    ("r06", "release guide for the build server", {"team": "dev", "year": 2022, "source": "c.md"}),
    ("r07", "onboarding guide laptop and vpn", {"team": "hr", "year": 2023, "source": "d.md"}),
    ("r08", "guide: password manager for teams", {"team": "hr", "year": 2025, "source": "d.md"}),
    ("r09", "backup restore guide for databases", {"team": "ops", "year": 2025}),
    ("r10", "guide to the lunch menu", {"year": 2024, "source": "e.md"}),
]
ROUTE_FILTERS = [
    {"team": "ops"},
    {"year": {"$gte": 2024}},
    {"$or": [{"team": "dev"}, {"year": 2022}]},
    {"team": {"$nin": ["ops", "dev"]}},
    {"source": "c.md"},
]
FILTER_IDS = ["team=ops", "year>=2024", "dev-or-2022", "team-nin", "source=c.md"]
QUERY = "vpn password guide"


def embedder(dim: int = 8) -> TableEmbedder:
    """The bag-of-words embedder the route suites use."""
    return TableEmbedder(dim=dim)


def fill_routes(
    store: SearchStore, rows: list[tuple[str, str, dict[str, Any]]] = ROUTE_ROWS
) -> None:
    docs = [Document(i, t, dict(m)) for i, t, m in rows]
    store.add(docs, embedder().embed_documents([d.text for d in docs]))


def retriever(store: SearchStore, emb: EmbedderProtocol | None = None) -> HybridRetriever:
    """HybridRetriever over ``store`` with explicit alpha and source weight (no config)."""
    return HybridRetriever(store, emb or embedder(), alpha=0.5, source_weight=2.0)


def search_ids(
    store: SearchStore,
    mode: str,
    k: int,
    filter: dict[str, Any] | None = None,
    mmr: float | None = None,
) -> list[str]:
    options = SearchOptions(k=k, mode=mode, filter=filter, mmr=mmr)
    return ids(retriever(store).search(QUERY, k, options))


class RoutesContract:
    """Filters, deletes and MMR on the keyword, semantic and hybrid routes and the reads."""

    @pytest.mark.parametrize("mmr", [None, 0.5], ids=["plain", "mmr"])
    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("filter", ROUTE_FILTERS, ids=FILTER_IDS)
    def test_every_search_route_applies_the_filter(
        self, store: SearchStore, mode: str, mmr: float | None, filter: dict[str, Any]
    ) -> None:
        fill_routes(store)
        allowed = {i for i, _, m in ROUTE_ROWS if matches(m, filter)}
        found = search_ids(store, mode, 3, filter, mmr)
        assert len(found) == min(3, len(allowed)) and len(set(found)) == len(found)
        assert set(found) <= allowed
        everything = search_ids(store, mode, len(ROUTE_ROWS), filter, mmr)
        assert set(everything) == allowed

    @pytest.mark.parametrize("filter", ROUTE_FILTERS, ids=FILTER_IDS)
    def test_every_read_route_applies_the_filter(
        self, store: SearchStore, filter: dict[str, Any]
    ) -> None:
        fill_routes(store)
        allowed = [i for i, _, m in ROUTE_ROWS if matches(m, filter)]
        assert ids(store.iter_documents(filter)) == allowed
        assert ids(store.iter_documents(filter, limit=2)) == allowed[:2]
        assert store.delete_where(filter) == len(allowed)
        assert ids(store.list_all()) == [i for i, _, _ in ROUTE_ROWS if i not in allowed]

    @pytest.mark.parametrize(
        "delete, gone",
        [
            (lambda s: s.delete(["r01", "r03"]), {"r01", "r03"}),
            (lambda s: s.remove(["r01", "r03"]), {"r01", "r03"}),
            (
                lambda s: s.delete_where(
                    {"$or": [{"year": 2022, "team": "ops"}, {"team": "dev", "year": 2024}]}
                ),
                {"r01", "r03"},
            ),
            (lambda s: (s.delete_source("a.md"), s.delete_source("b.md")), {"r01", "r02", "r03"}),
        ],
        ids=["delete", "remove", "delete_where", "delete_source"],
    )
    def test_deleted_documents_vanish_from_every_route(
        self, store: SearchStore, delete: Callable[[SearchStore], object], gone: set[str]
    ) -> None:
        fill_routes(store)
        delete(store)
        left = [i for i, _, _ in ROUTE_ROWS if i not in gone]
        assert ids(store.list_all()) == left
        assert store.count() == len(left)
        assert store.get(sorted(gone)) == []
        for mode in MODES:
            assert set(search_ids(store, mode, 20)) == set(left), mode
        assert set(ids(store.search(embedder().embed_query(QUERY), k=20))) == set(left)

    @pytest.mark.parametrize("mode", MODES)
    def test_mmr_in_every_mode(self, store: SearchStore, mode: str) -> None:
        query = "reset password vpn"
        rows = [
            ("dup1", "reset password steps for the vpn client", [1.0, 0.0, 0.0, 0.0]),
            ("dup2", "reset password steps for the vpn client again", [0.96, 0.28, 0.0, 0.0]),
            ("other", "reset password on the mail server", [0.6, 0.0, 0.8, 0.0]),
            ("noise1", "printer paper tray", [0.0, 0.0, 0.0, 1.0]),
            ("noise2", "lunch menu friday", [0.0, 0.6, 0.0, 0.8]),
        ]
        store.add([Document(i, t, {}) for i, t, _ in rows], [v for _, _, v in rows])
        search = retriever(store, TableEmbedder({query: [0.9, 0.1, 0.3, 0.0]}, dim=4)).search
        plain = search(query, 2, SearchOptions(k=2, mode=mode))
        assert ids(plain) == ["dup1", "dup2"]
        diverse = search(query, 2, SearchOptions(k=2, mode=mode, mmr=0.5, explain=True))
        assert ids(diverse)[0] == "dup1" and "dup2" not in ids(diverse) and len(diverse) == 2
        if mode != "keyword":  # the dense modes diversify by the stored vectors
            assert all((h.explain or {})["mmr"]["similarity"] == "cosine" for h in diverse)

    # --- differential: the store's filters against kbcli.filters.model.matches
    # ----------------------

    @pytest.mark.parametrize("seed", range(3))
    def test_filters_agree_with_matches_on_reads(self, store: SearchStore, seed: int) -> None:
        rows, filters = random_case(seed)
        fill_routes(store, rows)
        for filter in filters:
            want = [i for i, _, m in rows if matches(m, filter)]
            assert ids(store.iter_documents(filter)) == want, filter

    @pytest.mark.parametrize("seed", range(3))
    def test_filters_agree_with_matches_on_count(self, store: SearchStore, seed: int) -> None:
        rows, filters = random_case(seed)
        fill_routes(store, rows)
        for filter in filters:
            assert store.count(filter) == sum(matches(m, filter) for _, _, m in rows), filter

    @pytest.mark.parametrize("seed", range(3))
    def test_filters_agree_with_matches_on_dense_search(
        self, store: SearchStore, seed: int
    ) -> None:
        rows, filters = random_case(seed)
        fill_routes(store, rows)
        query = embedder().embed_query(QUERY)
        for filter in filters:
            want = {i for i, _, m in rows if matches(m, filter)}
            assert set(ids(store.search(query, k=len(rows), filter=filter))) == want, filter
            few = ids(store.search(query, k=3, filter=filter))
            assert len(few) == min(3, len(want)) and set(few) <= want, filter

    @pytest.mark.parametrize("mode", MODES)
    def test_filters_agree_with_matches_on_search_routes(
        self, store: SearchStore, mode: str
    ) -> None:
        rows, filters = random_case(7, n_filters=25)
        fill_routes(store, rows)
        for filter in filters:
            want = {i for i, _, m in rows if matches(m, filter)}
            assert set(search_ids(store, mode, len(rows), filter)) == want, filter

    @pytest.mark.parametrize("seed", range(4))
    def test_filters_agree_with_matches_on_delete(self, store: SearchStore, seed: int) -> None:
        rows, filters = random_case(seed + 100, n_filters=1)
        fill_routes(store, rows)
        doomed = [i for i, _, m in rows if matches(m, filters[0])]
        assert store.delete_where(filters[0]) == len(doomed)
        assert ids(store.list_all()) == [i for i, _, _ in rows if i not in doomed]


# --- random corpora and filters -----------------------------------------------------------------

_VALUES: list[Any] = ["en", "de", "zh", "1", "2024", 1, 2, 2023, 2024, 0.5, 2.0, True, False, None]
_ORDERED: list[Any] = ["de", "en", "m", 1, 2, 2023, 2024, 0.25, 1.5]
_KEYS = ("lang", "year", "score", "draft", "tag")


def _random_metadata(rng: random.Random) -> dict[str, Any]:
    pools: dict[str, list[Any]] = {
        "lang": ["en", "de", "zh", "EN"],
        "year": [2022, 2023, 2024, 2025, "2024"],
        "score": [0.25, 0.5, 1.5, 2, 2.0],
        "draft": [True, False],
        "tag": [None, "1", 1, True, "x"],
    }
    return {key: rng.choice(pool) for key, pool in pools.items() if rng.random() < 0.75}


def _random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if depth < 2 and roll < 0.2:
        op = rng.choice(["$and", "$or"])
        return {op: [_random_filter(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if depth < 2 and roll < 0.3:
        first, second = rng.sample(_KEYS, 2)
        return {**_random_condition(rng, first), **_random_condition(rng, second)}
    return _random_condition(rng, rng.choice(_KEYS))


def _random_condition(rng: random.Random, key: str) -> dict[str, Any]:
    op = rng.choice(["eq", "$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"])
    if op == "eq":
        return {key: rng.choice(_VALUES)}
    if op in ("$in", "$nin"):
        return {key: {op: rng.sample(_VALUES, rng.randint(1, 3))}}
    if op == "$exists":
        return {key: {op: rng.random() < 0.5}}
    if op in ("$gt", "$gte", "$lt", "$lte"):
        cond = {op: rng.choice(_ORDERED)}
        if rng.random() < 0.3:
            cond[rng.choice(["$gt", "$gte", "$lt", "$lte"])] = rng.choice(_ORDERED)
        return {key: cond}
    return {key: {op: rng.choice(_VALUES)}}


def random_case(
    seed: int, n_docs: int = 24, n_filters: int = 40
) -> tuple[list[tuple[str, str, dict[str, Any]]], list[dict[str, Any]]]:
    """A random corpus (every text holds "guide") and random filters, fixed by ``seed``."""
    rng = random.Random(seed)
    words = ["vpn", "password", "mail", "printer", "server", "backup", "laptop", "policy"]
    rows = [
        (
            f"x{i:02d}",
            f"guide {' '.join(rng.sample(words, 3))} {i}",
            _random_metadata(rng),
        )
        for i in range(n_docs)
    ]
    return rows, [_random_filter(rng) for _ in range(n_filters)]
