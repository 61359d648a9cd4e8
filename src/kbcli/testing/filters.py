"""Filters: a differential test of a store's filtered reads against
:func:`kbcli.filters.model.matches`.

Needs a ``store`` fixture (an empty store that is a DocumentCatalog and a VectorStore; keyword
search is checked when it is also a KeywordIndex); see :mod:`kbcli.testing`. Each test fills
the store with a random corpus (typed, odd and missing metadata) and runs random valid filters
through ``count``, ``iter_documents``, dense ``search`` and ``keyword_search``: each must return
exactly the documents the pure-Python evaluator passes (k of them when at least k pass).
Corpora and filters come from seeded generators, so a failure names a seed that repeats it;
``KB_STRESS=1`` runs more of both.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest

from kbcli.filters.model import KEY_OPERATORS, matches, validate_filter
from kbcli.protocols import KeywordIndex, supports
from kbcli.testing._common import SearchStore
from kbcli.types import Document

STRESS = os.environ.get("KB_STRESS") == "1"
SEEDS = list(range(20 if STRESS else 3))
FILTERS_PER_CORPUS = 500 if STRESS else 150
CORPUS_SIZE = 40
SMALL_K = 3

# Keys a filter may name: plain, dotted and bracketed (JSON-path look-alikes), a quote, a
# space, a backslash, non-ASCII. Metadata also carries keys no filter can name ("$d").
FILTER_KEYS = ["n", "x", "s", "flag", "source", "a.b", "[0]", "it's", "sp ace", "ünï", "b\\s"]
META_KEYS = [*FILTER_KEYS, "$d"]
INTS = [-2, -1, 0, 1, 2, 3, 10, 2**53 + 1, -(2**63), 2**63 - 1]
FLOATS = [0.0, -0.0, 0.5, 1.0, 2.5, -1.5, 1e300, 3.0000000000000004]
TEXTS = [
    "", "a", "b", "ab", "A", "1", "2.5", "true", "null", "%", "_", "a%b", "é", "e\u0301", "日本",
    "/docs/a/x.md", "/docs/ab/y.md", "/docs/a", "it's", 'q"uote', "b\\s", "'; DROP TABLE x --",
    "x" * 300,
]  # fmt: skip
SCALARS: list[Any] = [*INTS, *FLOATS, *TEXTS, True, False, None]
NON_SCALARS: list[Any] = [["a"], [1, 2], [], {"k": 1}, {"n": 2}]


COMMON = [-1, 0, 1, 2, 0.0, 1.0, 2.5, True, False, None, "", "a", "b", "1", "/docs/a/x.md"]
BUSY_KEYS = ["n", "x"]  # most documents have these, so filters on them split the corpus


def random_metadata(rng: random.Random) -> dict[str, Any]:
    """A metadata dict: the busy keys (usually) and a few of :data:`META_KEYS`, with common
    values of every type, odd scalars, lists and dicts."""
    meta: dict[str, Any] = {}
    keys = [k for k in BUSY_KEYS if rng.random() < 0.8] + rng.sample(META_KEYS, rng.randint(0, 4))
    for key in keys:
        roll = rng.random()
        pool = NON_SCALARS if roll < 0.08 else COMMON if roll < 0.6 else SCALARS
        meta[key] = rng.choice(pool)
    return meta


def random_corpus(
    rng: random.Random, size: int = CORPUS_SIZE
) -> list[tuple[Document, list[float]]]:
    """``size`` documents (every text has the word ``common``) with non-zero 4-d vectors
    exact in float32."""
    out = []
    for i in range(size):
        vector = [rng.randint(-4, 4) / 4 for _ in range(4)]
        if not any(vector):
            vector[i % 4] = 1.0
        text = f"common word{i % 5} doc{i}"
        out.append((Document(f"d{i}", text, random_metadata(rng)), vector))
    return out


def _operand(rng: random.Random, op: str, corpus_values: list[Any]) -> Any:
    pool = corpus_values if corpus_values and rng.random() < 0.7 else SCALARS
    if op in ("$gt", "$gte", "$lt", "$lte"):
        pool = [v for v in pool if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
        return rng.choice(pool or INTS)
    if op == "$prefix":
        texts = [v for v in pool if isinstance(v, str) and v] or ["/docs/a"]
        text = rng.choice(texts)
        return text[: rng.randint(1, len(text))]
    if op == "$exists":
        return rng.random() < 0.5
    if op in ("$in", "$nin"):
        return [_operand(rng, "$eq", corpus_values) for _ in range(rng.randint(1, 3))]
    return rng.choice([v for v in pool if not isinstance(v, (list, dict))] or SCALARS)


def random_filter(
    rng: random.Random, values: dict[str, list[Any]], depth: int = 0
) -> dict[str, Any]:
    """A valid filter: keys from :data:`FILTER_KEYS`, every operator, nested ``$and``/``$or``,
    operands mostly drawn from the corpus's own values (``values``: key -> values) so that
    filters pass some documents and not others."""
    out: dict[str, Any] = {}
    for _ in range(rng.choice([1, 1, 1, 2])):
        if depth < 3 and rng.random() < 0.25:
            logic = rng.choice(["$and", "$or"])
            out[logic] = [random_filter(rng, values, depth + 1) for _ in range(rng.randint(1, 3))]
            continue
        key = rng.choice(BUSY_KEYS if rng.random() < 0.6 else FILTER_KEYS)
        seen = [v for v in values.get(key, []) if not isinstance(v, (list, dict))]
        ops = rng.sample(KEY_OPERATORS, rng.choice([1, 1, 2]))
        if ops == ["$eq"] and rng.random() < 0.5:
            out[key] = _operand(rng, "$eq", seen)
        else:
            out[key] = {op: _operand(rng, op, seen) for op in ops}
    return validate_filter(out) or {}


def _values_by_key(docs: list[Document]) -> dict[str, list[Any]]:
    values: dict[str, list[Any]] = {}
    for doc in docs:
        for key, value in doc.metadata.items():
            values.setdefault(key, []).append(value)
    return values


class FilterDifferentialContract:
    """Filtered counts, listings and searches equal the pure-Python evaluator's answer."""

    @pytest.mark.parametrize("seed", SEEDS)
    def test_filters_agree_with_the_evaluator(self, store: SearchStore, seed: int) -> None:
        rng = random.Random(seed)
        corpus = random_corpus(rng)
        docs = [d for d, _ in corpus]
        store.add([Document(d.id, d.text, dict(d.metadata)) for d in docs], [v for _, v in corpus])
        stored = {d.id: _numbers(d.metadata) for d in store.iter_documents()}
        assert stored == {d.id: d.metadata for d in docs}, "metadata did not round-trip"
        values = _values_by_key(docs)
        keyword = store if supports(store, KeywordIndex) else None
        everything = len(docs) + 5
        checked = 0
        for _ in range(FILTERS_PER_CORPUS):
            flt = random_filter(rng, values)
            want = [d.id for d in docs if matches(d.metadata, flt)]
            where = f"seed {seed}, filter {json.dumps(flt, ensure_ascii=False)}"
            got = {
                "count": store.count(flt),
                "iter_documents": [d.id for d in store.iter_documents(flt)],
            }
            query = rng.choice(corpus)[1]
            got["search"] = sorted(h.document.id for h in store.search(query, everything, flt))
            small = [h.document.id for h in store.search(query, SMALL_K, flt)]
            if keyword is not None:
                hits = keyword.keyword_search("common", k=everything, filter=flt)
                got["keyword_search"] = sorted(h.document.id for h in hits)
                kw_small = [h.document.id for h in keyword.keyword_search("common", SMALL_K, flt)]
            expected = {"count": len(want), "iter_documents": want, "search": sorted(want)}
            if keyword is not None:
                expected["keyword_search"] = sorted(want)
            wrong = {
                name: (got[name], expected[name]) for name in got if got[name] != expected[name]
            }
            assert not wrong, _report(where, wrong, docs, set(want))
            size = min(SMALL_K, len(want))
            assert len(small) == size and set(small) <= set(want), (where, "search k", small)
            if keyword is not None:
                assert len(kw_small) == size and set(kw_small) <= set(want), (where, kw_small)
            checked += bool(want) and len(want) < len(docs)
        # the generator must mostly produce filters that split the corpus, or the test is idle
        assert checked >= FILTERS_PER_CORPUS // 4, checked


def _numbers(value: Any) -> Any:
    """``value`` with integers beyond 64 bits as floats: PostgreSQL's jsonb keeps numbers as
    decimals, so a float such as 1e300 comes back as the integer 10**300."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return float(value)
    return value


def _report(where: str, wrong: dict[str, Any], docs: list[Document], want: set[str]) -> str:
    lines = [f"{where}: results differ from kbcli.filters.model.matches"]
    for name, (got, expected) in wrong.items():
        got_ids = set(got) if isinstance(got, list) else set()
        odd = sorted(got_ids ^ set(expected if isinstance(expected, list) else []))
        lines.append(f"  {name}: got {got!r}, want {expected!r}")
        for doc in docs:
            if doc.id in odd:
                side = "missing" if doc.id in want else "extra"
                lines.append(f"    {side} {doc.id}: {json.dumps(doc.metadata, ensure_ascii=False)}")
    return "\n".join(lines)
