"""Retrieval evaluation on BEIR-layout collections (``kb eval``).

A collection folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``; or ``corpus.jsonl.gz``),
``queries.jsonl``
(``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``, one header
line). Each document (title + blank line + text) goes through the normal ingest path (chunked
like any file) with metadata ``doc_id`` and the document as the chunks' ``source`` (as a file
is); each judged query is searched for a pool of chunks and documents are ranked by their best
chunk, in the order the search returned them (equal scores as the search ordered them).

Metrics follow trec_eval: a query with no results scores 0, nDCG@k uses the graded judgment
itself as the gain (``gain = rel``, as trec_eval's ``ndcg_cut``; BEIR's pytrec_eval does the
same) with a ``log2(rank + 1)`` discount; judgments of 0 or less are not relevant. Only
queries with at least one relevant document are evaluated.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.config.lookup import StoreConfig, defaults
from kbcli.embedders import SimpleEmbedder
from kbcli.embedders.base import embedder_info
from kbcli.errors import KBError
from kbcli.pipeline import KnowledgeBase, LazyEmbedder
from kbcli.protocols import DocumentCatalog, supports
from kbcli.search.calibration import calibrate_index, has_floor
from kbcli.types import SearchOptions, Section, normalize_mode

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.config.schema import Config
    from kbcli.knowledge_base import KnowledgeBase
    from kbcli.protocols import EmbedderProtocol
    from kbcli.types import SearchOptions, SearchResult

SPLIT_PREFERENCE = ("test", "dev", "train")
# Chunks recalled per query (the timed search). Documents are ranked by their best chunk, and
# the chunks of one document tend to rank together, so when the pool names fewer than
# RANKING_DEPTH documents the query is searched again with twice the pool (untimed) until it
# does or the index runs out: Recall@100 needs 100 documents.
CHUNK_POOL = 200
RANKING_DEPTH = 100
INGEST_BATCH = 64
FINGERPRINT_KEY = "eval_corpus"
INCOMPLETE = "incomplete:"  # fingerprint prefix while a corpus is being indexed

Progress = Callable[[str, int, int], None]


class DatasetError(KBError):
    """An evaluation collection is missing files or holds malformed lines."""

    exit_code = 2


@dataclass
class BeirDataset:
    """A loaded BEIR collection: corpus ``{id: (title, text)}``, queries, graded qrels."""

    path: Path
    split: str
    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def name(self) -> str:
        return self.path.name


# --- loading ---------------------------------------------------------------------------------


def available_splits(dataset_dir: str | Path) -> list[str]:
    """Names of the readable ``qrels/*.tsv`` files (held-out ``*.enc`` files are never read)."""
    qrels = Path(dataset_dir) / "qrels"
    if not qrels.is_dir():
        return []
    return sorted(p.name[: -len(".tsv")] for p in qrels.glob("*.tsv") if p.is_file())


def choose_split(dataset_dir: str | Path, split: str | None = None) -> str:
    """``split`` if its file exists; otherwise ``test``, then ``dev``, then ``train``, then the
    only split there is. Raises :class:`DatasetError` naming the available splits."""
    splits = available_splits(dataset_dir)
    listed = ", ".join(splits) if splits else "none"
    if split is not None:
        if split not in splits:
            raise DatasetError(
                f"No qrels/{split}.tsv in {dataset_dir}: choose a split from: {listed}"
            )
        return split
    for name in SPLIT_PREFERENCE:
        if name in splits:
            return name
    if len(splits) == 1:
        return splits[0]
    if not splits:
        raise DatasetError(f"No qrels/*.tsv in {dataset_dir}: is it a BEIR-layout folder?")
    raise DatasetError(f"Several splits in {dataset_dir} ({listed}): choose one with --split")


def _read_jsonl(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    if not path.is_file() and path.with_name(path.name + ".gz").is_file():
        path = path.with_name(path.name + ".gz")
    if not path.is_file():
        raise DatasetError(f"Missing {path}: a BEIR folder needs corpus.jsonl and queries.jsonl")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path} line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise DatasetError(f"{path} line {number} has no _id field")
            yield number, row


def _text_field(row: dict[str, Any], key: str, path: Path, number: int) -> str:
    value = row.get(key) or ""
    if not isinstance(value, str):
        raise DatasetError(f"{path} line {number}: {key} must be a string")
    return value


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: grade}}`` from a TREC/BEIR qrels TSV (header line optional)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"Missing qrels file {path}")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            fields = line.rstrip("\n\r").split("\t")
            if not line.strip():
                continue
            if len(fields) == 4:  # TREC form: qid iter docno rel
                fields = [fields[0], fields[2], fields[3]]
            if len(fields) != 3:
                raise DatasetError(
                    f"{path} line {number}: expected query-id, corpus-id, score separated by tabs"
                )
            try:
                grade = int(float(fields[2]))
            except ValueError:
                if number == 1:
                    continue  # header
                raise DatasetError(
                    f"{path} line {number}: score {fields[2]!r} is not a number"
                ) from None
            qrels.setdefault(fields[0], {})[fields[1]] = grade
    return qrels


def load_beir(dataset_dir: str | Path, split: str | None = None) -> BeirDataset:
    """Read a BEIR folder (see the module docstring); ``split`` as :func:`choose_split`."""
    root = Path(dataset_dir).expanduser()
    if not root.is_dir():
        raise DatasetError(f"No folder {root}: give the path of a BEIR-layout collection")
    split = choose_split(root, split)
    corpus: dict[str, tuple[str, str]] = {}
    path = root / "corpus.jsonl"
    for number, row in _read_jsonl(path):
        title = _text_field(row, "title", path, number)
        corpus[str(row["_id"])] = (title, _text_field(row, "text", path, number))
    queries: dict[str, str] = {}
    path = root / "queries.jsonl"
    for number, row in _read_jsonl(path):
        queries[str(row["_id"])] = _text_field(row, "text", path, number)
    qrels = load_qrels(root / "qrels" / f"{split}.tsv")
    return BeirDataset(root, split, corpus, queries, qrels)


# --- metrics ---------------------------------------------------------------------------------


def rank_documents(scored: Iterable[tuple[str, float]]) -> list[str]:
    """Document ids by best score (a document's best chunk), ties broken by id."""
    best: dict[str, float] = {}
    for doc_id, score in scored:
        if doc_id not in best or score > best[doc_id]:
            best[doc_id] = score
    return [d for d, _ in sorted(best.items(), key=lambda item: (-item[1], item[0]))]


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with ``gain = grade`` and ``log2(rank + 1)`` discount (trec_eval ``ndcg_cut``)."""
    dcg = sum(
        max(qrels.get(doc, 0), 0) / math.log2(rank + 1)
        for rank, doc in enumerate(ranking[:k], start=1)
    )
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (grade > 0) found in the top ``k``."""
    relevant = {d for d, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document in the top ``k`` (0 if none)."""
    for rank, doc in enumerate(ranking[:k], start=1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(0, math.ceil(q / 100.0 * len(ordered)) - 1)
    return ordered[index]


def hit_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1.0 when a document with the query's highest grade is in the top ``k`` (the obvious page
    where graded judgments name one; any relevant document where they are binary), else 0."""
    top = max((g for g in qrels.values() if g > 0), default=0)
    if top == 0:
        return 0.0
    return 1.0 if any(qrels.get(d, 0) == top for d in ranking[:k]) else 0.0


def score_run(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int = 10
) -> dict[str, float]:
    """Mean nDCG@k, Recall@k, Recall@100, MRR@k, hit@1 and hit@3 of ``run`` (query -> ranked
    doc ids) over the queries of ``qrels`` that have a relevant document; missing queries
    score 0."""
    judged = [q for q, rels in qrels.items() if any(g > 0 for g in rels.values())]
    totals = {
        f"ndcg@{k}": 0.0,
        f"recall@{k}": 0.0,
        "recall@100": 0.0,
        f"mrr@{k}": 0.0,
        "hit@1": 0.0,
        "hit@3": 0.0,
    }
    for q in judged:
        ranking = run.get(q, [])
        rels = qrels[q]
        totals[f"ndcg@{k}"] += ndcg_at_k(ranking, rels, k)
        totals[f"recall@{k}"] += recall_at_k(ranking, rels, k)
        totals["recall@100"] += recall_at_k(ranking, rels, 100)
        totals[f"mrr@{k}"] += mrr_at_k(ranking, rels, k)
        totals["hit@1"] += hit_at_k(ranking, rels, 1)
        totals["hit@3"] += hit_at_k(ranking, rels, 3)
    n = len(judged)
    return {key: (value / n if n else 0.0) for key, value in totals.items()}


# --- the runner ------------------------------------------------------------------------------


def corpus_fingerprint(dataset_dir: str | Path, chunking: str) -> str:
    """Identifies a corpus file plus the chunk settings it was indexed with."""
    digest = hashlib.sha256()
    path = Path(dataset_dir) / "corpus.jsonl"
    if not path.is_file() and path.with_name("corpus.jsonl.gz").is_file():
        path = path.with_name("corpus.jsonl.gz")
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    digest.update(chunking.encode())
    return digest.hexdigest()[:32]


def evaluate(
    dataset_dir: str | Path,
    *,
    split: str | None = None,
    mode: str = "hybrid",
    k: int = 10,
    db: str | Path | None = None,
    embedder: EmbedderProtocol | None = None,
    config: Config | None = None,
    progress: Progress | None = None,
    search_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Index a BEIR collection and measure retrieval quality and latency in ``mode``.

    ``db``: a database file to index into and keep; reused when it already holds this corpus
    (same file, same chunk settings), indexed again when a run indexing this corpus into it
    was interrupted, an error when it holds anything else. Without it a
    temporary database is used. ``embedder``: default the configured one (the built-in simple
    embedder for ``keyword`` mode, where vectors do not matter). ``progress(stage, done,
    total)`` is called as documents are indexed (``"index"``) and queries run (``"search"``).
    ``search_options``: extra :class:`~kbcli.types.SearchOptions` fields (alpha, fusion...).

    Returns ``{"dataset", "split", "mode", "queries", "ndcg@10", "recall@10", "recall@100",
    "mrr@10", "latency_ms": {"mean", "p95"}}`` (``@10`` follows ``k``).
    """
    mode = normalize_mode(mode)
    config = config or defaults()
    # built whole: alpha set after construction would not count as chosen (alpha_chosen)
    options = SearchOptions(
        k=max(CHUNK_POOL, 2 * k), mode=mode, **{"dedupe": False, **(search_options or {})}
    )
    data = load_beir(dataset_dir, split)
    with tempfile.TemporaryDirectory(prefix="kb-eval-") as tmp:
        path = Path(db).expanduser() if db is not None else Path(tmp) / "eval.db"
        kb = _open_index(path, data, config, embedder, mode, progress)
        try:
            run, latencies = _run_queries(kb, data, options, progress)
        finally:
            kb.close()
    scores = score_run(run, data.qrels, k)
    judged = sum(1 for rels in data.qrels.values() if any(g > 0 for g in rels.values()))
    return {
        "dataset": data.name,
        "split": data.split,
        "mode": mode,
        "queries": judged,
        **{key: round(value, 4) for key, value in scores.items()},
        "latency_ms": {
            "mean": round(sum(latencies) / len(latencies), 2) if latencies else 0.0,
            "p95": round(percentile(latencies, 95), 2),
        },
    }


def _open_index(
    path: Path,
    data: BeirDataset,
    config: Config,
    embedder: EmbedderProtocol | None,
    mode: str,
    progress: Progress | None,
) -> KnowledgeBase:
    if embedder is None:
        embedder = _default_embedder(config, mode)
    limits = config.limits
    chunking = f"{config.rag.chunker}:{limits.chunk_size}:{limits.chunk_overlap};source=doc_id"
    fingerprint = corpus_fingerprint(data.path, chunking)
    # Always a local file of its own: SQLite, or the SQLite catalog of a FAISS or Chroma store
    # (its vector index beside the file) when that is the configured store.
    backend = config.store.backend if config.store.backend in ("faiss", "chroma") else "sqlite"
    settings = {k: v for k, v in config.store.settings.items() if k != "path"}
    local = replace(config, store=StoreConfig(backend, settings if backend != "sqlite" else {}))
    kb = KnowledgeBase.from_config(local, db=path, embedder=embedder)
    store = kb.store
    assert supports(store, DocumentCatalog)  # SQLite, or its catalog beside FAISS or Chroma
    recorded = store.get_meta(FINGERPRINT_KEY)
    if recorded == fingerprint:
        _check_reuse(kb, path)
        if mode != "keyword" and not has_floor(kb):
            calibrate_index(kb)
        return kb
    unfinished = INCOMPLETE + fingerprint
    if recorded == unfinished:  # an earlier run of this corpus was interrupted: start over
        store.delete_where({})
    elif recorded is not None or store.count():
        kb.close()
        raise DatasetError(
            f"{path} already holds other documents: give a new --db path for {data.name}"
        )
    try:
        store.set_meta(FINGERPRINT_KEY, unfinished)
        _ingest_corpus(kb, data, progress)
    except BaseException:
        kb.close()
        raise
    store.set_meta(FINGERPRINT_KEY, fingerprint)
    if mode != "keyword":
        calibrate_index(kb)  # the relevance floors a search of this index applies
    return kb


def _check_reuse(kb: KnowledgeBase, path: Path) -> None:
    """A kept index must match the embedder of this run (one built with another analyzer or
    keyword fields re-tokenises itself at its first search, without re-embedding)."""
    store = kb.store
    assert supports(store, DocumentCatalog)  # as _open_index checked
    recorded = store.embedder_info
    info = embedder_info(kb.embedder)
    problem = None
    if recorded is not None and (recorded.provider, recorded.model) != (
        info.provider,
        info.model,
    ):
        problem = f"embedder {recorded.describe()}, not {info.describe()}"
    if problem:
        kb.close()
        raise DatasetError(
            f"{path} was indexed with {problem}: give another --db path or delete it"
        )


def _default_embedder(config: Config, mode: str) -> EmbedderProtocol:
    if mode == "keyword":
        return SimpleEmbedder()
    try:
        import importlib

        importlib.import_module("kbcli.embedders.resolve")
    except ImportError:
        return SimpleEmbedder()

    return LazyEmbedder(config)


def _ingest_corpus(kb: KnowledgeBase, data: BeirDataset, progress: Progress | None) -> None:
    """Chunk, embed and store every document: the ingest path of ``KnowledgeBase.ingest_text``,
    batched so the embedder sees many chunks per call and SQLite commits per batch."""
    ingestor = kb.ingestor
    items = list(data.corpus.items())
    total = len(items)

    for start in range(0, total, INGEST_BATCH):
        docs = []
        for doc_id, (title, text) in items[start : start + INGEST_BATCH]:
            body = f"# {title}\n\n{text}" if title else text
            chunks = ingestor.chunk_sections([Section(body, {})])
            # The document is the chunks' source, as a file is for ingested files.
            docs.extend(ingestor.build_documents(chunks, {"doc_id": doc_id, "source": doc_id}))
        if docs:
            ingestor.store_documents(docs)
        if progress is not None:
            progress("index", min(start + INGEST_BATCH, total), total)


def _documents_of(hits: Sequence[SearchResult]) -> list[str]:
    """Document ids in the order of their best chunk among ``hits``, as the search ranked
    them (its own tie-break: hybrid hits past both fusion windows score 0 and are ordered by
    route rank, which sorting by score and id would undo)."""
    return list(dict.fromkeys(str(h.document.metadata.get("doc_id")) for h in hits))


def _run_queries(
    kb: KnowledgeBase, data: BeirDataset, options: SearchOptions, progress: Progress | None
) -> tuple[dict[str, list[str]], list[float]]:
    judged = [
        q
        for q, rels in data.qrels.items()
        if q in data.queries and any(g > 0 for g in rels.values())
    ]
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    for done, qid in enumerate(judged, start=1):
        start = time.perf_counter()
        hits = kb.search_with(data.queries[qid], options)
        latencies.append((time.perf_counter() - start) * 1000.0)
        ranking = _documents_of(hits)
        pool = options.k
        while len(ranking) < RANKING_DEPTH and len(hits) >= pool:
            # Deeper only extends the ranking: a deeper search ranks the timed search's hits
            # first, in the same order (hybrid fusion reads a fixed window of each route).
            pool *= 2
            hits = kb.search_with(data.queries[qid], replace(options, k=pool))
            seen = set(ranking)
            ranking += [d for d in _documents_of(hits) if d not in seen]
        run[qid] = ranking
        if progress is not None and (done % 20 == 0 or done == len(judged)):
            progress("search", done, len(judged))
    return run, latencies
