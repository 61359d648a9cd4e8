"""All engines, one run: kb against bm25s, SQLite FTS5 and numpy brute force on one corpus.

    python benchmarks/bench_all.py --sizes 10k,100k --out benchmarks/all-results.json --write-docs
    python benchmarks/bench_all.py --sizes 1M --out benchmarks/all-results-1m.json
    python benchmarks/bench_all.py --sizes 300 --quick --out /tmp/all.json     # a smoke run

For each size, one deterministic corpus written as real files: chunks of 300-500 characters
(words from a Zipf(1.1) distribution over bench_keyword.py's 50,000-word vocabulary), 10
chunks per ``.md`` file (blank-line paragraphs, so each paragraph is exactly one chunk), files
in ten folders ``g0``..``g9``; chunk ``i`` lies in folder ``g{i % 10}``, so the filter "folder
g3" (``kb search --in corpus/g3``) allows the same 10 % of chunks as FTS5's ``grp = 3`` and
bm25s's weight mask. Then, each engine in its own child process (its peak RSS is its own):

- **ingest**: ``kb ingest`` of the folder as a whole command with the built-in embedder
  (chunks/s, wall, peak RSS), the first ``kb search`` after it (which writes the derived
  keyword pack and vector cache), the index size on disk; FTS5, bm25s and the numpy matrix
  built from the same texts / vectors.
- **in-process queries** (the knowledge base opened once; each query timed once after one
  warm-up query outside the set, p50/p95 ms, with the median of each query's best of
  ``--repeat`` runs as an extra column; see :func:`common.once_in_turns`): keyword search
  with content words and with common words, each
  with and without the folder filter, as ``store.keyword_search`` (what FTS5 and bm25s return:
  ranked hits) and through ``kb.search``; semantic (built-in embedder) through ``kb.search``,
  and exact dense ``store.search`` beside numpy brute force over the same vectors; hybrid.
- **whole commands**: ``kb --help``, ``kb search --mode keyword``, hybrid ``kb search`` (median
  of ``--runs`` after a warm-up; peak RSS), and, once per run, a hybrid ``kb search`` with the
  local model (``kbcli[local]``) over a small index of the same corpus embedded by it.

The analyzer is configured to ``language: none, stem: false, stopwords: false`` (the synthetic
words are no English; FTS5 and bm25s do not stem either) and ``chunk_overlap: 0``; see the
``jianmu.yaml`` written beside each index. The goals of issue 16 are evaluated from the same
run, each beside its peer, with the load average. ``--write-docs`` rewrites the section "All
engines, one run" of benchmarks/LOG.md from the JSON (``--from-json`` does it without a run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import itertools
import json
import random
import shutil
import sqlite3
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from bench_keyword import make_vocab, queries  # noqa: E402
from common import (  # noqa: E402
    Peers,
    chunk_queries,
    files_size_mb,
    find_kb,
    latency,
    load_average,
    machine_info,
    paired_latency,
    run_child,
    self_peak_rss_mb,
    tree_env,
    whole_process,
)

K = 10
GROUP = 3  # the filtered folder: g3, 10 % of the chunks
DOCS = HERE / "LOG.md"
START, END = "<!-- bench_all:start -->", "<!-- bench_all:end -->"
CONFIG = """\
# Written by benchmarks/bench_all.py.
rag:
  embedding:
    provider: {provider}
  chunker: structure
limits:
  chunk_size: 500
  chunk_overlap: 0
analysis:
  language: none
  stem: false
  stopwords: false
"""


def parse_size(text: str) -> int:
    """``10k`` -> 10,000; ``1M`` -> 1,000,000; a multiple of 100 (whole blocks of files)."""
    text = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    n = int(float(text[:-1] if scale > 1 else text) * scale)
    if n < 100 or n % 100:
        raise argparse.ArgumentTypeError(f"size {text!r}: a multiple of 100 chunks, at least 100")
    return n


def label(n: int) -> str:
    """1000000 -> '1M', 100000 -> '100k', 300 -> '300'."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


# --- the corpus ---------------------------------------------------------------------------


def chunk_texts(n: int):
    """The ``n`` chunk texts, in order: 300-500 characters of Zipf(1.1) words each (the same
    for every n-prefix)."""
    rng = random.Random(7)
    vocab = make_vocab(50_000, rng)  # bench_keyword's vocabulary, and so its queries
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(len(vocab))))
    for _ in range(n):
        target = rng.randint(300, 500)
        words, length = [], -1
        for word in rng.choices(vocab, cum_weights=cum, k=90):  # 90 words: >= 359 characters
            if length + 1 + len(word) > target:
                break
            words.append(word)
            length += 1 + len(word)
        yield " ".join(words)


def file_of(i: int) -> tuple[int, int]:
    """(file number, paragraph) of chunk ``i``: each block of 100 chunks fills 10 files, and
    file ``j`` holds the chunks ``i`` with ``i % 10 == j % 10`` (its folder is ``g{j % 10}``)."""
    block, within = divmod(i, 100)
    return block * 10 + within % 10, within // 10


def file_path(corpus: Path, j: int) -> Path:
    return corpus / f"g{j % 10}" / f"f{j:07d}.md"


def write_corpus(n: int, corpus: Path) -> float | None:
    """Write the corpus (the files, and beside the folder ``texts.txt`` with chunk ``i`` on line
    ``i`` for the other engines); seconds taken, or None when a complete one is already there."""
    marker = corpus.parent / "corpus.complete"
    if marker.exists() and marker.read_text() == str(n):
        return None
    shutil.rmtree(corpus, ignore_errors=True)
    for g in range(10):
        (corpus / f"g{g}").mkdir(parents=True)
    started = time.perf_counter()
    block: list[str] = []

    def flush(first: int) -> None:
        files: dict[int, list[str]] = {}
        for offset, text in enumerate(block):
            files.setdefault(file_of(first + offset)[0], []).append(text)
        for j, paragraphs in files.items():
            file_path(corpus, j).write_text("\n\n".join(paragraphs) + "\n")
        block.clear()

    with open(corpus.parent / "texts.txt", "w") as lines:
        for i, text in enumerate(chunk_texts(n)):
            lines.write(text + "\n")
            block.append(text)
            if len(block) == 100:
                flush(i - 99)
    flush(n - len(block))
    marker.write_text(str(n))
    return round(time.perf_counter() - started, 2)


def read_texts(corpus: Path) -> list[str]:
    return (corpus.parent / "texts.txt").read_text().splitlines()


def the_queries(n_queries: int) -> tuple[list[str], list[str]]:
    """bench_keyword's queries: content words (ranks 50-5,000) and 3 common words (top 50)."""
    return queries(make_vocab(50_000, random.Random(7)), n_queries)


def query_sets(texts: list[str], n_queries: int) -> dict[str, list[str]]:
    """The keyword query sets, each led by its warm-up query (not timed): ``chunk``, 2-5
    content words drawn from a random chunk (:func:`common.chunk_queries`, the postings real
    queries meet); ``content``, bench_keyword's light set (ranks 50-5,000); ``common``, three
    of the 50 most frequent words (1/5 as many)."""
    content, common = the_queries(n_queries + 1)
    frequent = {w for q in the_queries(200)[1] for w in q.split()}
    return {
        "chunk": chunk_queries(texts, n_queries + 1, frequent),
        "content": content,
        "common": common[: max(21, n_queries // 5 + 1)],
    }


# --- child phases: each engine in its own process -------------------------------------------

ONE = " (1 BLAS thread)"


def blas_threads(n: int):
    """Limit BLAS to ``n`` threads from here until the context ends (threadpoolctl; a no-op
    without it). On a busy 2-core machine a 2-thread matrix-vector product waits for its second
    thread whenever the other core is taken, often a whole scheduler slice (~20 ms): the dense
    rows are measured both ways."""
    if importlib.util.find_spec("threadpoolctl") is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n, user_api="blas")


def phase_kb(d: Path, n_queries: int, repeat: int) -> dict[str, Any]:
    """kb in-process: open once, then every query mode; numpy brute force on its vectors."""
    import numpy as np

    from kbcli import KnowledgeBase, load_config
    from kbcli.filters.syntax import under_folders

    sets = query_sets(read_texts(d / "corpus"), n_queries)
    content = sets["content"]
    dense_qs = content[: max(10, n_queries // 2)]
    flt = under_folders([str((d / "corpus" / f"g{GROUP}").resolve())])
    out: dict[str, Any] = {}
    started = time.perf_counter()
    kb = KnowledgeBase.open(d / "kb.db", config=load_config(d / "jianmu.yaml"), create=False)
    store = kb.store
    out["open_ms"] = round((time.perf_counter() - started) * 1000, 1)
    for mode in ("keyword", "semantic", "hybrid"):  # the first query of each: maps the files
        started = time.perf_counter()
        kb.search(content[0], k=K, mode=mode)
        out[f"first_{mode}_ms"] = round((time.perf_counter() - started) * 1000, 1)

    for name, qs in sets.items():
        out[f"keyword_search {name}"] = latency(lambda q: store.keyword_search(q, K), qs, repeat)
        out[f"keyword_search {name}+filter"] = latency(
            lambda q: store.keyword_search(q, K, flt), qs, repeat
        )
        out[f"kb.search keyword {name}"] = latency(
            lambda q: kb.search(q, k=K, mode="keyword"), qs, repeat
        )
        out[f"kb.search keyword {name}+filter"] = latency(
            lambda q: kb.search(q, k=K, mode="keyword", filter=flt), qs, repeat
        )
    vectors = [kb.embedder.embed_query(q) for q in dense_qs]
    one_thread = importlib.util.find_spec("threadpoolctl") is not None
    tails = ("", ONE) if one_thread else ("",)
    for tail in tails:
        with blas_threads(1) if tail else contextlib.nullcontext():
            # hybrid with the built-in (weak) embedder skips the dense route when the keyword
            # list is full; "hybrid alpha" chooses the weight, so the dense route always runs.
            routes = (("semantic", "semantic", None), ("hybrid", "hybrid", None),
                      ("hybrid alpha", "hybrid", 0.5))  # fmt: skip
            for row, mode, alpha in routes:
                for f, name in ((None, ""), (flt, "+filter")):
                    out[f"kb.search {row}{name}{tail}"] = latency(
                        lambda q, m=mode, f=f, a=alpha: kb.search(
                            q, k=K, mode=m, filter=f, alpha=a
                        ),
                        dense_qs,
                        repeat,
                    )
    out["peak_rss_mb"] = self_peak_rss_mb()  # before the numpy copy below

    # numpy brute force over the same vectors, read from the index's own table, timed in turns
    # with kb's exact dense search.
    started = time.perf_counter()
    with sqlite3.connect(d / "kb.db") as conn:
        rows = conn.execute(
            "SELECT c.id, c.source, v.vec FROM vectors v JOIN chunks c ON c.doc = v.doc"
        ).fetchall()
    ids = [r[0] for r in rows]
    dim = len(rows[0][2]) // 4
    matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(-1, dim)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    prefix = flt["source"]["$prefix"]
    allowed = np.array([(r[1] or "").startswith(prefix) for r in rows])
    del rows
    out["numpy_build_s"] = round(time.perf_counter() - started, 3)
    out["numpy_matrix_mb"] = round(matrix.nbytes / 1e6, 1)
    out["filter_share"] = round(float(allowed.mean()), 4)

    def brute(v, mask=None):
        scores = matrix @ np.asarray(v, dtype=np.float32)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, K)[:K]
        return top[np.argsort(-scores[top])]

    for tail in tails:
        with blas_threads(1) if tail else contextlib.nullcontext():
            for f, mask, name in ((None, None, ""), (flt, allowed, "+filter")):
                pair = {
                    f"dense exact{name}{tail}": lambda v, f=f: store.search(v, K, f),
                    f"numpy{name}{tail}": lambda v, mask=mask: brute(v, mask),
                }
                out.update(paired_latency(pair, vectors, repeat))
    kb_hits = [[r.document.id for r in store.search(v, K)] for v in vectors[:10]]
    kb.close()
    same = [len(set(h) & {ids[i] for i in brute(v)}) / K for h, v in zip(kb_hits, vectors)]
    out["dense_top10_agreement"] = round(statistics.mean(same), 3)
    return out


def phase_peer(name: str, d: Path, n_queries: int, repeat: int) -> dict[str, Any]:
    """One peer engine (:class:`common.Peers`) built from the texts and queried: build time,
    size, and each query set with and without the group filter (the same chunks as kb's)."""
    texts = read_texts(d / "corpus")
    sets = query_sets(texts, n_queries)
    peers = Peers(texts, K, [name])
    del texts
    search = peers.search[name]
    out: dict[str, Any] = {"build_s": peers.build_s[name], "size_mb": peers.size_mb.get(name)}
    for label_, qs in sets.items():
        out[label_] = latency(lambda q: search(q, None), qs, repeat)
        out[label_ + "+filter"] = latency(lambda q: search(q, GROUP), qs, repeat)
    out["peak_rss_mb"] = self_peak_rss_mb()
    return out


PHASES = {
    "kb": phase_kb,
    **{name: functools.partial(phase_peer, name) for name in ("fts5", "bm25s", "tantivy")},
}


def run_phase(name: str, d: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one phase in a child Python; its JSON plus the child's wall time and peak RSS."""
    argv = [sys.executable, __file__, "--phase", name, "--dir", d]
    argv += ["--queries", args.queries, "--repeat", args.repeat]
    done = run_child(argv, tree_env()).check()
    result = json.loads(done.stdout)
    result["child_peak_rss_mb"] = done.peak_rss_mb
    result["child_wall_s"] = round(done.wall_s, 1)
    return result


# --- the parent: corpus, ingest, whole commands ---------------------------------------------


def index_files(db: Path) -> list[Path]:
    """The database and the files kb keeps beside it (WAL, keyword pack, vector cache)."""
    return sorted(p for p in db.parent.glob(db.name + "*") if p.is_file())


def ingest(kb: Path, d: Path, corpus: Path, provider: str) -> dict[str, Any]:
    """A fresh ``kb ingest`` of ``corpus`` into ``d/kb.db`` as a whole command."""
    (d / "jianmu.yaml").write_text(CONFIG.format(provider=provider))
    db = d / "kb.db"
    for path in index_files(db):
        path.unlink()
    env = tree_env(KB_CONFIG=str(d / "jianmu.yaml"))
    done = run_child([kb, "-q", "--db", db, "ingest", corpus, "--json"], env, d).check()
    report = json.loads(done.stdout)
    with sqlite3.connect(db) as conn:
        chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {
        "chunks": chunks,
        "files": report.get("added", report.get("files")),
        "wall_s": round(done.wall_s, 2),
        "cpu_s": round(done.cpu_s, 2),
        "chunks_per_s": round(chunks / done.wall_s, 1),
        "peak_rss_mb": done.peak_rss_mb,
        "db_mb": files_size_mb(index_files(db)),
    }


def commands(kb: Path, d: Path, query: str, runs: int) -> dict[str, Any]:
    """Whole ``kb`` processes over the index in ``d``."""
    env = tree_env(KB_CONFIG=str(d / "jianmu.yaml"))
    db = ["--db", str(d / "kb.db")]
    out: dict[str, Any] = {}
    # The first search after the ingest writes the vector cache (and the keyword pack when its
    # query is long enough to import numpy for the keyword route).
    first = run_child([kb, "-q", *db, "search", query], env, d).check()
    out["first search after ingest"] = {
        "wall_ms": round(first.wall_s * 1000, 1),
        "peak_rss_mb": first.peak_rss_mb,
    }
    out["kb --help"] = whole_process([kb, "--help"], env, d, runs)
    out["kb search --mode keyword"] = whole_process(
        [kb, "-q", *db, "search", query, "--mode", "keyword"], env, d, runs
    )
    out["kb search --mode keyword --in g3"] = whole_process(
        [kb, "-q", *db, "search", query, "--mode", "keyword", "--in", f"corpus/g{GROUP}"],
        env,
        d,
        runs,
    )
    out["kb search (hybrid)"] = whole_process([kb, "-q", *db, "search", query], env, d, runs)
    return out


def local_model(kb: Path, workdir: Path, chunks: int, query: str, runs: int) -> dict[str, Any]:
    """Ingest ``chunks`` chunks of the corpus with the local model, then time a hybrid search."""
    if importlib.util.find_spec("onnxruntime") is None:
        return {"skipped": "kbcli[local] is not installed"}
    d = workdir / f"local-{chunks}"
    d.mkdir(parents=True, exist_ok=True)
    write_corpus(chunks, d / "corpus")
    out: dict[str, Any] = {"chunks": chunks, "load_start": load_average()}
    out["ingest"] = ingest(kb, d, d / "corpus", "local")
    env = tree_env(KB_CONFIG=str(d / "jianmu.yaml"))
    argv = [kb, "-q", "--db", d / "kb.db", "search", query]
    out["kb search (hybrid, local model)"] = whole_process(argv, env, d, runs)
    out["load_end"] = load_average()
    return out


def run_size(n: int, kb: Path, args: argparse.Namespace) -> dict[str, Any]:
    d = args.workdir / str(n)
    d.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"chunks": n, "load_start": load_average()}
    log(f"{label(n)}: corpus")
    result["corpus_write_s"] = write_corpus(n, d / "corpus")
    log(f"{label(n)}: kb ingest")
    result["kb_ingest"] = ingest(kb, d, d / "corpus", "simple")
    query = the_queries(args.queries)[0][0]
    log(f"{label(n)}: whole commands")
    result["commands"] = commands(kb, d, query, args.runs)
    for name in PHASES:
        log(f"{label(n)}: {name} in-process")
        result[name] = run_phase(name, d, args)
    files = index_files(d / "kb.db")  # now with the keyword pack the in-process phase wrote
    result["index_mb"] = files_size_mb(files)
    result["index_files"] = {p.name: files_size_mb([p]) for p in files}
    result["load_end"] = load_average()
    return result


# --- goals and the report -----------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def p50(result: dict[str, Any], key: str) -> float:
    return result[key]["p50"]


def goals(sizes: dict[str, dict[str, Any]], local: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 16's goals from this run, each beside its peer: at 100k (else the largest size
    below 1M) unless stated, and the 1M goals at 1M."""
    rows: list[dict[str, Any]] = []

    def add(goal: str, r: dict | None, measured, peer, met, note: str = "") -> None:
        load = [r["load_start"][0], r["load_end"][0]] if r and "load_start" in r else None
        n = r.get("chunks") or r["ingest"]["chunks"] if r else None
        size = "–" if n is None else label(n) if n % 1000 == 0 else f"{n:,}"
        rows.append(dict(goal=goal, size=size, measured=measured, peer=peer, met=met,
                         load=load, note=note))  # fmt: skip

    below = [r for n, r in sizes.items() if int(n) < 1_000_000]
    base = sizes.get("100000") or max(below, key=lambda r: r["chunks"], default=None)
    if base:
        kb, fts, bm, cmd = base["kb"], base["fts5"], base["bm25s"], base["commands"]
        content, common = p50(kb, "keyword_search content"), p50(kb, "keyword_search common")
        for peer, name in ((fts, "FTS5"), (bm, "bm25s")):
            other = p50(peer, "content")
            add(f"keyword, content words: p50 ≤ ½ {name}'s", base, content, other,
                content <= other / 2, f"peer: {name}")  # fmt: skip
        other = p50(bm, "common")
        add("keyword, common words: p50 within 3× bm25s's", base, common, other,
            common <= 3 * other, "peer: bm25s")  # fmt: skip
        for name, without in (("content", content), ("common", common)):
            with_ = p50(kb, f"keyword_search {name}+filter")
            add(f"keyword, {name} words: with a filter ≤ 1.5× without", base, with_, without,
                with_ <= 1.5 * without, "peer: kb without the filter")  # fmt: skip
        hybrid = p50(kb, "kb.search hybrid")
        add("hybrid (built-in embedder) p50 ≤ 20 ms in-process", base, hybrid,
            p50(kb, "kb.search keyword content"), hybrid <= 20,
            "peer: kb.search keyword (dense route skipped: keywords filled the list)")  # fmt: skip
        if "kb.search hybrid alpha" in kb:
            forced = p50(kb, "kb.search hybrid alpha")
            add("hybrid, alpha 0.5 (both routes) p50 ≤ 20 ms in-process", base, forced,
                p50(kb, "numpy"), forced <= 20, "peer: numpy brute force alone")  # fmt: skip
        for key in ("kb search --mode keyword", "kb --help"):
            ms = cmd[key]["median_ms"]
            add(f"`{key}` ≤ 200 ms (whole command, median)", base, ms, None, ms <= 200,
                f"CPU {cmd[key]['cpu_median_ms']:g} ms, min {cmd[key]['min_ms']:g} ms")  # fmt: skip
        search = local.get("kb search (hybrid, local model)")
        if search:
            ms = search["median_ms"]
            add("local-model hybrid `kb search` ≤ 600 ms", local, ms,
                cmd["kb search (hybrid)"]["median_ms"], ms <= 600,
                f"CPU {search['cpu_median_ms']:g} ms, min {search['min_ms']:g} ms; peer: built-in"
                f" hybrid `kb search` at {label(base['chunks'])}")  # fmt: skip
        wall, scaled = base["kb_ingest"]["wall_s"], 40 * base["chunks"] / 100_000
        add(f"`kb ingest` with the built-in embedder ≤ {scaled:g} s", base, wall,
            bm["build_s"], wall <= scaled, "s; peer: bm25s build")  # fmt: skip
        if local.get("ingest"):
            rate = local["ingest"]["chunks_per_s"]
            add("local embedder ≥ 2× today's chunks/s (6/s in the issue)", local, rate, 6.0,
                rate >= 12, "chunks/s of a local-model `kb ingest`, model load in")  # fmt: skip
    add("API embedding requests ≤ chunks / batch size + 1", None, None, None, None,
        "not measured here: needs an API server (tests/embedders/test_openai.py)")  # fmt: skip
    big = sizes.get("1000000")
    if big:
        kb, bm, cmd = big["kb"], big["bm25s"], big["commands"]
        ms = p50(kb, "keyword_search content")
        add("1M: keyword p50 ≤ 30 ms", big, ms, p50(bm, "content"), ms <= 30, "peer: bm25s")
        ms = p50(kb, "keyword_search common")
        add("1M: common words p50 ≤ 150 ms", big, ms, p50(bm, "common"), ms <= 150,
            "peer: bm25s")  # fmt: skip
        add("1M: approximate dense p50 ≤ 10 ms at recall@10 ≥ 0.95", big,
            p50(kb, "dense exact"), p50(kb, "numpy"), None,
            "exact dense here (recall 1), peer numpy; HNSW: bench_ann.py")  # fmt: skip
        peak = max(kb["peak_rss_mb"], cmd["kb search (hybrid)"]["peak_rss_mb"],
                   cmd["kb search --mode keyword"]["peak_rss_mb"])  # fmt: skip
        add("1M: peak memory during search ≤ 2 GB", big, peak, bm["child_peak_rss_mb"],
            peak <= 2048, "MB; peer: the bm25s process")  # fmt: skip
        wall = big["kb_ingest"]["wall_s"]
        add("1M: build ≤ 15 min", big, wall, bm["build_s"], wall <= 900,
            "s, `kb ingest`; peer: bm25s build")  # fmt: skip
    return rows


def log(message: str) -> None:
    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10k,100k", help="e.g. 10k,100k,1M (multiples of 100)")
    ap.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    ap.add_argument(
        "--write-docs", action="store_true", help="rewrite benchmarks/LOG.md's section"
    )
    ap.add_argument(
        "--from-json", type=Path, nargs="+", help="only render these results into the docs"
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-all"))
    ap.add_argument("--queries", type=int, default=200, help="content-word queries (common: 1/5)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per query for the best-of column (extra)"
    )
    ap.add_argument("--runs", type=int, default=9, help="runs per whole command")
    ap.add_argument("--local-chunks", type=int, default=1000, help="0: no local-model search")
    ap.add_argument("--quick", action="store_true", help="few queries and runs (a smoke test)")
    ap.add_argument("--kb", help="path of the kb command [default: beside this Python]")
    ap.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args.dir, args.queries, args.repeat)))
        return
    if args.from_json:
        write_docs(merge([json.loads(p.read_text()) for p in args.from_json]), args.from_json)
        return
    if args.quick:
        args.queries, args.repeat, args.runs = 20, 1, 1
        args.local_chunks = min(args.local_chunks, 100)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.workdir = args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    kb = find_kb(args.kb)
    info = machine_info()
    info.update(
        started=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        command="python benchmarks/bench_all.py " + " ".join(sys.argv[1:]),
        load_start=load_average(),
        settings={k: getattr(args, k) for k in ("queries", "repeat", "runs", "local_chunks")},
    )
    results: dict[str, Any] = {"info": info, "sizes": {}, "local_model": {}}

    def save() -> None:
        results["goals"] = goals(results["sizes"], results["local_model"])
        results["info"]["load_end"] = load_average()
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")

    if args.local_chunks:
        log(f"local model: {args.local_chunks} chunks")
        query = the_queries(args.queries)[0][0]
        results["local_model"] = local_model(kb, args.workdir, args.local_chunks, query, args.runs)
        save()
    for n in sizes:
        results["sizes"][str(n)] = run_size(n, kb, args)
        save()  # a size that finished is kept if a later one is stopped
        log(f"{label(n)}: done")
    save()
    print(json.dumps(results, indent=1))
    if args.write_docs:
        write_docs(results, [args.out] if args.out else [])


# --- benchmarks/LOG.md ---------------------------------------------------------------------


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return (
            f"{value:,.2f}" if value < 10 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
        )
    return f"{value:,}" if isinstance(value, int) else str(value)


def cell(result: dict[str, Any], path: str) -> str:
    """One table cell: ``"kb/keyword_search content"`` -> "p50 / p95" of that figure, a number
    as itself, ``a|b`` as "a / b"."""
    parts = []
    for one in path.split("|"):
        value: Any = result
        try:
            for key in one.split("/"):
                value = value[key]
        except (KeyError, TypeError):
            return "–"
        parts.append(f"{fmt(value['p50'])} / {fmt(value['p95'])}" if isinstance(value, dict)
                     else fmt(value))  # fmt: skip
    return " / ".join(parts)


BUILD_ROWS = (
    ("kb ingest, whole command (s)", "kb_ingest/wall_s"),
    ("kb ingest (chunks/s)", "kb_ingest/chunks_per_s"),
    ("kb ingest peak RSS (MB)", "kb_ingest/peak_rss_mb"),
    ("first `kb search` after it (ms: writes the vector cache)",
     "commands/first search after ingest/wall_ms"),
    ("first keyword search in a process with numpy (ms: writes the keyword pack)",
     "kb/first_keyword_ms"),
    ("kb index on disk (MB: db, keyword pack, vector cache)", "index_mb"),
    ("FTS5 build (s) / size (MB)", "fts5/build_s|fts5/size_mb"),
    ("bm25s build (s) / size (MB)", "bm25s/build_s|bm25s/size_mb"),
    ("numpy matrix read from kb's table (s) / size (MB)", "kb/numpy_build_s|kb/numpy_matrix_mb"),
    ("peak RSS (MB): kb search process / FTS5 / bm25s",
     "kb/peak_rss_mb|fts5/child_peak_rss_mb|bm25s/child_peak_rss_mb"),
)  # fmt: skip
COMMAND_ROWS = (
    "kb --help", "kb search --mode keyword", "kb search --mode keyword --in g3",
    "kb search (hybrid)",
)  # fmt: skip


def query_rows() -> list[tuple[str, str]]:
    rows = []
    for words in ("content", "common"):
        for f in ("", "+filter"):
            name = f"{words} words{' + filter' if f else ''}"
            rows += [
                (f"kb `keyword_search`, {name}", f"kb/keyword_search {words}{f}"),
                (f"kb `kb.search` keyword, {name}", f"kb/kb.search keyword {words}{f}"),
                (f"FTS5, {name}", f"fts5/{words}{f}"),
                (f"bm25s, {name}", f"bm25s/{words}{f}"),
            ]
    for threads in ("", ONE):
        for f in ("", "+filter"):
            tail = (" + filter" if f else "") + threads
            rows += [
                (f"kb `kb.search` semantic{tail}", f"kb/kb.search semantic{f}{threads}"),
                (f"kb dense exact (`store.search`){tail}", f"kb/dense exact{f}{threads}"),
                (f"numpy brute force{tail}", f"kb/numpy{f}{threads}"),
                (f"kb `kb.search` hybrid{tail}", f"kb/kb.search hybrid{f}{threads}"),
                (
                    f"kb `kb.search` hybrid, alpha 0.5{tail}",
                    f"kb/kb.search hybrid alpha{f}{threads}",
                ),
            ]
    return rows + [("dense top-10 agreement, kb and numpy", "kb/dense_top10_agreement")]


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' results as one (sizes side by side, goals evaluated over all of them)."""
    sizes = {n: r for run in runs for n, r in run["sizes"].items()}
    sizes = dict(sorted(sizes.items(), key=lambda item: int(item[0])))
    local = next((run["local_model"] for run in runs if run.get("local_model")), {})
    infos = [info for run in runs for info in run.get("runs", [run["info"]])]
    return {"runs": infos, "sizes": sizes, "local_model": local, "goals": goals(sizes, local)}


def render(results: dict[str, Any], sources: list[Path]) -> str:
    """The markdown section for ``results`` (one run's, or :func:`merge`'s)."""
    infos = results.get("runs") or [results["info"]]
    settings = infos[0]["settings"]
    lines = [
        START,
        "## All engines, one run",
        "",
        "`python benchmarks/bench_all.py` (see its docstring) writes one deterministic corpus of"
        " real files per size (300–500-character chunks of Zipf words, 10 per `.md` file, in ten"
        " folders; the filter is one folder, 10 % of the chunks, the same rows for every"
        " engine), ingests it with `kb ingest` (built-in embedder), and measures kb, SQLite"
        " FTS5, bm25s and numpy brute force on it, each engine in its own process. Top-10;"
        " in-process: p50 / p95 ms of each query timed once after a warm-up query outside the"
        f" set (best of {settings['repeat']} as an extra column)"
        f" ({settings['queries']} content-word queries, {max(20, settings['queries'] // 5)} of"
        " three common words; semantic and hybrid: half the content queries); whole commands:"
        f" median of {settings['runs']} runs after a warm-up, with bytecode caching on as in"
        " an installed package.",
        "",
        "- *kb `keyword_search`* is the store's ranked hits (what FTS5 and bm25s return);"
        " *`kb.search`* is the library call a user makes (pipeline, documents, fusion)."
        " kb's keyword ranking is BM25 with source context (the default); FTS5 and bm25s"
        " rank plain BM25. With the built-in embedder (weak: spelling, not meaning) a hybrid"
        " search skips the dense route when the keyword route fills the list; *hybrid, alpha"
        " 0.5* sets the weight, which always runs both routes.",
        "- *dense exact* and *numpy brute force* run on the same vectors (read from kb's own"
        " table), timed in turns query by query so both meet the same moments of the shared"
        " machine. The rows marked *1 BLAS thread* repeat the dense routes with BLAS limited"
        " to one thread (threadpoolctl): on 2 busy cores a 2-thread matrix-vector product"
        " often waits a scheduler slice for its second thread.",
        "- Run it: `python benchmarks/bench_all.py --sizes 10k,100k --out"
        " benchmarks/all-results.json --write-docs`; 1M (a long ingest) as its own run,"
        " `--sizes 1M --out benchmarks/all-results-1m.json`, then `python"
        " benchmarks/bench_all.py --from-json benchmarks/all-results.json"
        " benchmarks/all-results-1m.json` rewrites this section from both. `--quick` is a"
        " smoke run (`tests/test_bench_all.py`).",
        "",
    ]
    for info in infos:
        v = info["versions"]
        lines += [
            f"Run of {info['started']}: `{info['command']}`. {info['cpu']}, {info['cores']}"
            f" cores, {fmt(info['ram_gb'])} GB RAM, {info['platform']}; Python {v['python']},"
            f" SQLite {v['sqlite']}, numpy {v['numpy']}, bm25s {v['bm25s']}, faiss-cpu"
            f" {v['faiss-cpu']}, onnxruntime {v['onnxruntime']}. Load average"
            f" {info['load_start']} at the start, {info['load_end']} at the end: the 2 cores"
            " are shared with other engineers' work, so read the ratios within a column."
            + (f" {info['note']}" if info.get("note") else ""),
            "",
        ]
    if sources:
        lines += ["Raw figures: " + ", ".join(f"`{s}`" for s in sources) + ".", ""]
    sizes = list(results["sizes"].values())
    head = "| | " + " | ".join(label(r["chunks"]) for r in sizes) + " |"
    rule = "|---|" + "---|" * len(sizes)

    def table(title: str, rows) -> None:
        nonlocal lines
        lines += [title, "", head, rule]
        lines += [f"| {name} | " + " | ".join(cell(r, path) for r in sizes) + " |"
                  for name, path in rows]  # fmt: skip
        lines.append("")

    table("**Build and size**", BUILD_ROWS)
    table("**In-process queries** (p50 / p95 ms)", query_rows())
    table(
        "**Whole commands** (median ms / peak RSS MB)",
        [(f"`{c}`", f"commands/{c}/median_ms|commands/{c}/peak_rss_mb") for c in COMMAND_ROWS],
    )
    local = results.get("local_model") or {}
    if local.get("ingest"):
        search, ing = local["kb search (hybrid, local model)"], local["ingest"]
        lines += [
            f"Local model (all-MiniLM-L6-v2, ONNX) over {ing['chunks']:,} chunks of the same"
            f" corpus: `kb ingest` {fmt(ing['wall_s'])} s ({fmt(ing['chunks_per_s'])} chunks/s,"
            f" model load included; peak {fmt(ing['peak_rss_mb'])} MB); hybrid `kb search`"
            f" median {fmt(search['median_ms'])} ms (min {fmt(search['min_ms'])}; peak"
            f" {fmt(search['peak_rss_mb'])} MB).",
            "",
        ]
    elif local.get("skipped"):
        lines += [f"Local model: skipped ({local['skipped']}).", ""]
    lines += [
        "**Goals of issue 16, from this run** (ms unless stated)",
        "",
        "| goal | size | kb | peer | kb / peer | met? | load (1 min) | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in results["goals"]:
        met = {True: "yes", False: "**no**", None: "–"}[g["met"]]
        load = f"{g['load'][0]} → {g['load'][1]}" if g.get("load") else "–"
        lines.append(
            f"| {g['goal']} | {g['size']} | {fmt(g['measured'])} | {fmt(g['peer'])}"
            f" | {fmt(ratio(g['measured'], g['peer']))} | {met} | {load} | {g['note']} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def write_docs(results: dict[str, Any], sources: list[Path]) -> None:
    """Replace (or append) the bench_all section of benchmarks/LOG.md."""
    text = DOCS.read_text()
    root = HERE.parent
    sources = [s.resolve().relative_to(root) if s.resolve().is_relative_to(root) else s
               for s in sources]  # fmt: skip
    section = render(results, sources)
    if START in text and END in text:
        before, rest = text.split(START, 1)
        text = before + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.write_text(text)


if __name__ == "__main__":
    main()
