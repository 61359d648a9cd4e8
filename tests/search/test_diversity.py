import pytest

from kbcli import Document, InvalidOptionError, SearchOptions, SearchResult
from kbcli.search.diversity import collapse_duplicates, jaccard, mmr_order, mmr_rerank


def hit(doc_id, text, score):
    return SearchResult(Document(doc_id, text), score)


def test_collapse_keeps_the_best_copy():
    hits = [hit("a", "same  text", 3.0), hit("b", "other", 2.0), hit("c", "same text", 1.0)]
    kept = collapse_duplicates(hits, explain=True)
    assert [h.document.id for h in kept] == ["a", "b"]
    assert kept[0].explain == {"duplicates": ["c"]}


def test_jaccard():
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 0.0


class Table:
    """Similarities from a hand-written table (a Similarity: one row at a time)."""

    def __init__(self, rows):
        self.rows = rows

    def to(self, j):
        import numpy as np

        return np.array([row[j] for row in self.rows])


def test_mmr_order_by_hand():
    # 0 and 1 are near-identical; 2 is different but a little less relevant
    sim = Table([[1.0, 0.95, 0.1], [0.95, 1.0, 0.1], [0.1, 0.1, 1.0]])
    relevance = [1.0, 0.98, 0.7]
    assert mmr_order(relevance, sim, 1.0, 3) == [0, 1, 2]  # pure relevance
    assert mmr_order(relevance, sim, 0.5, 3) == [0, 2, 1]  # diversity promotes 2
    assert mmr_order(relevance, sim, 0.5, 10) == [0, 2, 1]  # k beyond the pool
    assert mmr_order([0.5, 0.5, 0.5], sim, 0.5, 1) == [0]  # ties keep the pool order


# --- today's MMR against the one it replaced ---------------------------------------------------
# The reference below is the MMR of kbcli 0.1 before it kept a pool x pool similarity matrix
# out of memory, copied as it was (a pairwise callable, a Python loop).


def reference_mmr_order(relevance, similarity, lam, k):
    remaining = list(range(len(relevance)))
    chosen = []
    max_sim = [0.0] * len(relevance)
    while remaining and len(chosen) < k:
        if chosen:
            best = max(remaining, key=lambda i: (lam * relevance[i] - (1 - lam) * max_sim[i], -i))
        else:
            best = max(remaining, key=lambda i: (relevance[i], -i))
        chosen.append(best)
        remaining.remove(best)
        for i in remaining:
            s = similarity(i, best)
            if s > max_sim[i]:
                max_sim[i] = s
    return chosen


def reference_vector_similarity(vectors):
    from kbcli.text.vector_math import as_unit_matrix

    unit = as_unit_matrix(vectors)
    sims = unit @ unit.T
    return lambda i, j: float(sims[i, j])


def reference_term_similarity(texts, analyzer):
    sets = [frozenset(analyzer.terms(t)) for t in texts]
    return lambda i, j: jaccard(sets[i], sets[j])


@pytest.mark.parametrize("seed", range(12))
def test_mmr_equals_the_pairwise_reference_on_random_vectors(seed):
    import numpy as np

    from kbcli.search.diversity import VectorSimilarity

    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 160)), int(rng.integers(2, 48))
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors[rng.random(n) < 0.1] = 0.0  # some zero vectors: similarity 0
    relevance = rng.random(n).round(int(rng.integers(1, 4))).tolist()  # ties in relevance
    for lam in (0.0, 0.3, 0.5, 0.85, 1.0):
        for k in (1, 5, n // 2 + 1, n, n + 3):
            got = mmr_order(relevance, VectorSimilarity(vectors), lam, k)
            want = reference_mmr_order(relevance, reference_vector_similarity(vectors), lam, k)
            assert got == want, (seed, lam, k)


@pytest.mark.parametrize("seed", range(8))
def test_mmr_equals_the_pairwise_reference_on_random_texts(seed):
    import random

    from kbcli.search.diversity import TermSimilarity
    from kbcli.text.analysis import Analyzer

    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(rnd.randint(3, 40))]
    texts = [" ".join(rnd.choices(words, k=rnd.randint(0, 12))) for _ in range(rnd.randint(1, 90))]
    relevance = [round(rnd.random(), 2) for _ in texts]
    analyzer = Analyzer()
    for lam in (0.0, 0.4, 0.7, 1.0):
        for k in (1, 3, len(texts)):
            got = mmr_order(relevance, TermSimilarity(texts, analyzer), lam, k)
            want = reference_mmr_order(
                relevance, reference_term_similarity(texts, analyzer), lam, k
            )
            assert got == want, (seed, lam, k)


def test_mmr_rerank_uses_vectors_or_terms():
    hits = [
        hit("a", "reset your password in settings", 3.0),
        hit("b", "reset your password in the settings", 2.9),
        hit("c", "billing address changes", 1.0),
    ]
    by_terms = mmr_rerank(hits, 0.3, 2, explain=True)
    assert [h.document.id for h in by_terms] == ["a", "c"]
    assert by_terms[0].explain["mmr"]["similarity"] == "jaccard"
    vectors = [[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]]
    by_vectors = mmr_rerank(hits, 0.3, 2, vectors=vectors, explain=True)
    assert [h.document.id for h in by_vectors] == ["a", "c"]
    assert by_vectors[1].explain["mmr"] == {"lambda": 0.3, "pool_rank": 3, "similarity": "cosine"}
    assert [h.score for h in by_vectors] == [3.0, 1.0]  # scores unchanged


def test_mmr_option_validated():
    assert SearchOptions(mmr=0.5).mmr == 0.5
    for bad in (1.5, -0.1, True, "x"):
        with pytest.raises(InvalidOptionError, match="mmr"):
            SearchOptions(mmr=bad)


# --- memory: a large -k under an address-space limit --------------------------------------------


def build_index(db, chunks: int) -> None:
    """``chunks`` chunks of 42 words (ten a file), built-in embedder: the index of
    benchmarks/bench_mmr.py, built by its own function."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mmr.py"
    spec = importlib.util.spec_from_file_location("bench_mmr", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(db, chunks)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["semantic", "keyword"])
def test_large_k_with_mmr_runs_under_a_2_gb_address_space_limit(tmp_path, mode):
    """MMR built a pool x pool matrix: -k 20000 over 30,000 chunks asked for 3.4 GiB (here a
    MemoryError traceback; -k 1000000 on 50,000 chunks died with SIGSEGV at 7.3 GB). Now it
    keeps the pool's vectors and one vector of the pool's length (about 140 MB in all)."""
    import json
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    db = tmp_path / "big.db"
    build_index(db, 30_000)
    limit = 2 * 1024**3

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "KB_DB": str(db), "PYTHONPATH": src}
    argv = [sys.executable, "-m", "kbcli", "search", "password reset", "-k", "20000",
            "--mode", mode, "--mmr", "0.5", "--by", "chunk", "--json"]  # fmt: skip
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, preexec_fn=cap, timeout=900
    )
    if done.returncode == 0:
        hits = json.loads(done.stdout)
        assert len(hits) == 20000 and len({h["id"] for h in hits}) == 20000
    else:  # a documented refusal is one line, never a traceback or a signal
        assert done.returncode in (1, 2), done.stderr[-2000:]
        lines = [line for line in done.stderr.splitlines() if not line.startswith("Using ")]
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert "Traceback" not in done.stderr
