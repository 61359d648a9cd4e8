"""``kb eval --queries``: your own questions on the live index.

A questions file is JSONL, one ``{"query": ..., "expected": [...]}`` per line: expected pages
as ``path`` or ``path:line`` (a list: grade 1 each; a mapping: ``{"path": grade}``). Each
question is searched in each mode by :func:`kbcli.search.query.search`, the function ``kb search``
calls, for its first k files (the files ``kb search -k K`` shows, in its order), and where
each expected page ranked gives nDCG, hit@1/@3 and MRR per mode, with bootstrap intervals, the
misses (and where their page ranked further down), a suggested ``--min-score``, the latency
(model load apart) and modes compared (:mod:`kbcli.eval.report` draws them).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli import __version__
from kbcli.eval.beir import DatasetError, Progress, percentile
from kbcli.search.query import Hits
from kbcli.search.query import search as search_files

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.knowledge_base import KnowledgeBase
from kbcli.agent.get import AmbiguousPathError, path_suffix_match
from kbcli.embedders.base import EmbedderInfo, embedder_info
from kbcli.protocols import DocumentCatalog, FileLedger, VectorStoreProtocol, supports
from kbcli.search.calibration import stored_floors
from kbcli.system.paths import source_name
from kbcli.types import SearchOptions, SearchResult, normalize_mode

# A question whose expected page is not in the first k files is searched again (untimed) for
# this many files, to say where its page ranked; that longer list is kb search -k DEEPER_FILES.
DEEPER_FILES = 100
HIT_LEVELS = (1, 3)  # hit@1, hit@3 (those not above k)
BOOTSTRAP_ROUNDS = 2000
KEEP_SHARE = 0.95  # the suggested --min-score keeps this share of the expected pages' hits
HIT_NOTE = (
    "hit@k: share of questions whose expected page (the highest-graded one, when grades "
    "differ) is among the first k files; MRR counts the first expected page of any grade"
)


@dataclass(frozen=True)
class Expectation:
    """One expected answer of a question: an indexed source, optionally a line in it."""

    raw: str
    source: str
    line: int | None
    grade: int


@dataclass
class Question:
    """A question of a ``--queries`` file with its expected pages (``path`` or ``path:line``,
    each with a grade; a list means grade 1 each)."""

    id: str
    text: str
    expected: dict[str, int]
    category: str | None = None


def load_questions(path: str | Path) -> list[Question]:
    """Read a JSONL file of ``{"query": ..., "expected": [...] or {path: grade}}`` lines
    (optional ``id``, ``category``); raises :class:`DatasetError` naming the line at fault."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"No queries file {path}: give a JSONL file of query/expected lines")
    out: list[Question] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: expected an object with query and expected")
            text = row.get("query")
            if not isinstance(text, str) or not text.strip():
                raise DatasetError(f"{where}: query must be a non-empty string")
            expected = _expected_of(row.get("expected"), where)
            qid = str(row.get("id", number))
            if qid in seen:
                raise DatasetError(f"{where}: id {qid!r} is used twice")
            seen.add(qid)
            category = row.get("category")
            out.append(Question(qid, text, expected, str(category) if category else None))
    if not out:
        raise DatasetError(f"{path} holds no questions")
    return out


def _expected_of(value: Any, where: str) -> dict[str, int]:
    fix = 'expected must be a path, a list of paths or {"path": grade} (path or path:line)'
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        value = {item: 1 for item in value} if all(isinstance(i, str) for i in value) else None
    if not isinstance(value, dict) or not value:
        raise DatasetError(f"{where}: {fix}")
    out: dict[str, int] = {}
    for key, grade in value.items():
        if not isinstance(key, str) or not key.strip():
            raise DatasetError(f"{where}: {fix}")
        if isinstance(grade, bool) or not isinstance(grade, int) or grade < 1:
            raise DatasetError(f"{where}: the grade of {key!r} must be a whole number, 1 or more")
        out[key.strip()] = grade
    return out


def indexed_sources(store: VectorStoreProtocol) -> list[str]:
    """Every source the index holds, sorted: its file records, else its chunks' ``source``."""
    if supports(store, FileLedger):
        sources = sorted(store.file_records())
        if sources:
            return sources
    docs = store.iter_documents() if supports(store, DocumentCatalog) else store.list_all()
    found = {d.metadata.get("source") for d in docs}
    return sorted(s for s in found if isinstance(s, str))


def resolve_expected(
    questions: Sequence[Question], sources: Sequence[str], base: Path | None = None
) -> dict[str, list[Expectation]]:
    """Each question's expectations against the indexed ``sources``: a path as recorded, or
    relative to the working folder or to ``base`` (the queries file's folder), or the one
    source ending with it (``common/tar.md``, :func:`kbcli.agent.get.path_suffix_match`, as
    ``kb get`` takes it); ``path:line`` names a line. Raises :class:`DatasetError` for a path
    that matches nothing or more than one source."""
    import os
    import re

    known = set(sources)

    def candidates(path: str) -> list[str]:
        out = [path]
        for root in (Path.cwd(), base):
            if root is None:
                continue
            joined = Path(root, path).expanduser()
            out += [source_name(os.path.abspath(joined)), source_name(joined.resolve())]
        return out

    def find(path: str) -> str | None:
        exact = [c for c in candidates(path) if c in known]
        return exact[0] if exact else path_suffix_match(path, sources)

    out: dict[str, list[Expectation]] = {}
    for q in questions:
        items = []
        for raw, grade in q.expected.items():
            line = None
            try:
                found = find(raw)
                m = re.fullmatch(r"(.+):(\d+)", raw)
                if found is None and m:
                    line = int(m[2])
                    found = find(m[1])
            except AmbiguousPathError as exc:
                raise DatasetError(f"Question {q.id}: {exc}") from None
            if found is None:
                sample = sources[0] if sources else "(the index is empty)"
                raise DatasetError(
                    f"Question {q.id}: {raw} is not in the index (indexed paths look like "
                    f"{sample}): fix the path or run kb ingest first"
                )
            items.append(Expectation(raw, found, line, grade))
        out[q.id] = items
    return out


def _file_key(result: SearchResult) -> str:
    source = result.document.metadata.get("source")
    return source if isinstance(source, str) else f"id:{result.document.id}"


def ranked_files(hits: Hits) -> list[tuple[str, list[SearchResult]]]:
    """The files of ``kb search``'s by-file ``hits``, in its order, each with its chunks in the
    pool the search answered (its best chunk first: what a ``path:line`` expectation may
    match, the chunks ``kb search`` counts as matched)."""
    chunks: dict[str, list[SearchResult]] = {}
    for result in hits.results or []:
        chunks.setdefault(_file_key(result), []).append(result)
    out = []
    for hit in hits:
        key = _file_key(hit.result)
        out.append((key, chunks.get(key) or [hit.result]))
    return out


def _covers(hit: SearchResult, line: int) -> bool:
    meta = hit.document.metadata
    start, end = meta.get("line"), meta.get("line_end", meta.get("line"))
    return isinstance(start, int) and isinstance(end, int) and start <= line <= end


def rank_expected(
    groups: Sequence[tuple[str, Sequence[SearchResult]]], expected: Sequence[Expectation]
) -> dict[str, int | None]:
    """The 1-based file rank at which each expectation is found (None: not in ``groups``)."""
    ranks: dict[str, int | None] = {}
    for exp in expected:
        ranks[exp.raw] = None
        for rank, (source, hits) in enumerate(groups, start=1):
            if source == exp.source and (
                exp.line is None or any(_covers(h, exp.line) for h in hits)
            ):
                ranks[exp.raw] = rank
                break
    return ranks


def question_scores(
    ranks: Mapping[str, int | None], expected: Sequence[Expectation], k: int = 10
) -> dict[str, float]:
    """nDCG@k, hit@1, hit@3 (those not above k) and MRR@k of one question from its
    expectations' ranks (trec_eval conventions: gain = grade, log2 discount; a file position
    gains its best expectation)."""
    gains: dict[int, int] = {}
    for exp in expected:
        rank = ranks.get(exp.raw)
        if rank is not None and rank <= k:
            gains[rank] = max(gains.get(rank, 0), exp.grade)
    dcg = sum(g / math.log2(r + 1) for r, g in gains.items())
    ideal = sorted((e.grade for e in expected), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    top = max(e.grade for e in expected)
    top_ranks = [ranks[e.raw] for e in expected if e.grade == top]
    best_top = min((r for r in top_ranks if r is not None), default=None)
    first = min((r for r in ranks.values() if r is not None), default=None)
    hits = {
        f"hit@{level}": 1.0 if best_top is not None and best_top <= level else 0.0
        for level in HIT_LEVELS
        if level <= k
    }
    return {
        f"ndcg@{k}": min(1.0, dcg / idcg) if idcg else 0.0,
        **hits,
        f"mrr@{k}": 1.0 / first if first is not None and first <= k else 0.0,
    }


def bootstrap_interval(
    values: Sequence[float], rounds: int = BOOTSTRAP_ROUNDS, seed: int = 7
) -> tuple[float, float]:
    """95% percentile interval of the mean of ``values`` over resampled questions."""
    import random

    n = len(values)
    if not n:
        return 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], means[min(rounds - 1, int(0.975 * rounds))]


def suggest_min_score(relevant: Sequence[float], others: Sequence[float]) -> dict[str, Any]:
    """A ``--min-score`` that keeps :data:`KEEP_SHARE` of the expected pages' hits (their
    scores ``relevant``), and the share of the other top hits (``others``) it would drop."""
    if not relevant:
        return {"min_score": None, "keeps": 0.0, "drops_others": 0.0}
    ordered = sorted(relevant)
    cut = ordered[max(0, math.floor((1.0 - KEEP_SHARE) * len(ordered)) - 1)]
    if len(ordered) < 20:
        cut = ordered[0]
    keeps = sum(1 for s in relevant if s >= cut) / len(relevant)
    drops = sum(1 for s in others if s < cut) / len(others) if others else 0.0
    return {"min_score": round(cut, 4), "keeps": round(keeps, 4), "drops_others": round(drops, 4)}


def evaluate_questions(
    kb: KnowledgeBase,
    questions: Sequence[Question],
    *,
    modes: Sequence[str] = ("hybrid",),
    k: int = 10,
    base: Path | None = None,
    progress: Progress | None = None,
    search_options: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Search each question on the live index in every mode through
    :func:`kbcli.search.query.search`
    (what ``kb search -k K`` runs: the same files in the same order) and score where its
    expected pages ranked among the first ``k`` files: nDCG@k, hit@1, hit@3 and MRR@k with 95%
    bootstrap intervals, by category, each question's ranked files, ranks and scores, where a
    page missing from the first k ranked among :data:`DEEPER_FILES` (searched again, untimed),
    a suggested ``--min-score`` and, with two modes or more, each mode against the first
    (paired bootstrap of the differences).

    Latency is per question with the model loaded and the index read: the embedder's first
    embedding (its model load) is timed apart (``load_ms``), and so is each mode's first
    search (``latency_ms.first``), made once before the timed ones."""
    if not questions:
        raise DatasetError("No questions to evaluate: give at least one query/expected line")
    modes = [normalize_mode(m) for m in modes]
    expected = resolve_expected(questions, indexed_sources(kb.store), base)
    result: dict[str, Any] = {
        "queries": len(questions),
        "k": k,
        "deeper": DEEPER_FILES,
        "hit_note": HIT_NOTE,
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        "kb_version": __version__,
        "index": index_facts(kb.store),
        "search": _search_facts(kb, SearchOptions(k=k, **(search_options or {}))),
        "load_ms": _load_models(kb, modes, clock),
        "modes": {},
    }
    total = len(questions) * len(modes)
    done = 0
    for mode in modes:
        # built whole: alpha set after construction would not count as chosen (alpha_chosen)
        options = SearchOptions(k=k, mode=mode, **(search_options or {}))
        started = clock()
        search_files(kb, questions[0].text, options, by="file")  # reads the index, loads models
        first = (clock() - started) * 1000.0
        rows = []
        for q in questions:
            started = clock()
            hits = search_files(kb, q.text, options, by="file")
            latency = (clock() - started) * 1000.0
            row = _question_row(q, ranked_files(hits), expected[q.id], k)
            row["latency_ms"] = round(latency, 2)
            missing = [e for e in expected[q.id] if row["ranks"][e.raw] is None]
            if missing and k < DEEPER_FILES:
                deeper = replace(options, k=DEEPER_FILES)  # ranks only: no hit is shown
                longer = search_files(kb, q.text, deeper, by="file", locate=False)
                row["deeper_ranks"] = rank_expected(ranked_files(longer), missing)
                row["deeper_files"] = len(longer)
                row["deeper_k"] = DEEPER_FILES
            rows.append(row)
            done += 1
            if progress is not None:
                progress("search", done, total)
        result["modes"][mode] = _mode_summary(rows, k)
        result["modes"][mode]["latency_ms"]["first"] = round(first, 2)
    if len(modes) > 1:
        result["compare"] = _compare(result["modes"], modes, k)
    floors = _floors_of(kb) if any(m != "keyword" for m in modes) else None
    if floors is not None:
        result["floors"] = floors
    return result


def _question_row(
    q: Question,
    files: Sequence[tuple[str, Sequence[SearchResult]]],
    expected: Sequence[Expectation],
    k: int,
) -> dict[str, Any]:
    """One question's line of the result: its ranked files, where each expectation ranked
    among them, its scores and metrics."""
    ranks = rank_expected(files, expected)
    scores = question_scores(ranks, expected, k)
    first = min((r for r in ranks.values() if r is not None), default=None)
    top_grade = max(e.grade for e in expected)
    top_ranks = [ranks[e.raw] for e in expected if e.grade == top_grade]
    return {
        "id": q.id,
        "query": q.text,
        "category": q.category,
        "ranked": [source for source, _ in files],
        "ranks": ranks,
        "first_rank": first,
        "top_rank": min((r for r in top_ranks if r is not None), default=None),
        "files": len(files),
        "top": files[0][0] if files else None,
        "top_score": round(files[0][1][0].score, 6) if files else None,
        "expected_score": round(files[first - 1][1][0].score, 6) if first is not None else None,
        "other_score": _best_other(files, first),
        **{key: round(v, 4) for key, v in scores.items()},
    }


def _search_facts(kb: KnowledgeBase, options: SearchOptions) -> dict[str, str]:
    """The settings beside the mode that shape every ranking: fusion, alpha, reranker."""
    alpha = f"{options.alpha:g}" if options.alpha_chosen else "kb's choice per query"
    pipeline = kb.pipeline
    rerank = "none"
    if pipeline.has_reranker:
        config = pipeline.config
        rerank = config.rag.rerank.provider if config is not None else "yes"
    return {"fusion": options.fusion, "alpha": alpha, "rerank": rerank}


def _load_models(
    kb: KnowledgeBase, modes: Sequence[str], clock: Callable[[], float]
) -> dict[str, float]:
    """Load what the searches need before they are timed: the embedder's first embedding
    (its model load, milliseconds) when a mode uses vectors."""
    embedder = kb.embedder
    if all(mode == "keyword" for mode in modes):
        return {}
    started = clock()
    embedder.embed_query("warm-up")
    return {"embedder": round((clock() - started) * 1000.0, 2)}


def index_facts(store: VectorStoreProtocol) -> dict[str, Any]:
    """What names the index a report was made on: its location, backend, size, embedder,
    last ingest and generation (from the store's ``stats()``, when it has one)."""
    if not supports(store, DocumentCatalog):
        return {"store": type(store).__name__}
    stats = store.stats()
    recorded = stats.get("embedder")
    keep = ("path", "backend", "files", "chunks", "last_ingest", "generation")
    out = {key: stats[key] for key in keep if stats.get(key) is not None}
    out["store"] = type(store).__name__
    if isinstance(recorded, dict):
        info = EmbedderInfo(recorded["provider"], recorded["model"], recorded.get("dimension"))
        out["embedder"] = info.describe()
    return out


def _best_other(
    groups: Sequence[tuple[str, Sequence[SearchResult]]], first: int | None
) -> float | None:
    """The best score of a file that is not the first expected one (the competition)."""
    for rank, (_, hits) in enumerate(groups, start=1):
        if rank != first:
            return round(hits[0].score, 6)
    return None


def metric_keys(k: int) -> tuple[str, ...]:
    """The metrics of a question at cut-off ``k``: nDCG@k, hit@1, hit@3 (not above k), MRR@k."""
    hits = tuple(f"hit@{level}" for level in HIT_LEVELS if level <= k)
    return (f"ndcg@{k}", *hits, f"mrr@{k}")


def _mode_summary(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    metrics = {}
    for key in metric_keys(k):
        values = [r[key] for r in rows]
        lo, hi = bootstrap_interval(values)
        metrics[key] = {"mean": round(sum(values) / len(values), 4), "lo": round(lo, 4),
                        "hi": round(hi, 4)}  # fmt: skip
    categories: dict[str, dict[str, float]] = {}
    for cat in sorted({r["category"] for r in rows if r["category"]}):
        part = [r for r in rows if r["category"] == cat]
        categories[cat] = {"queries": len(part)} | {
            key: round(sum(r[key] for r in part) / len(part), 4) for key in metric_keys(k)
        }
    latencies = [r["latency_ms"] for r in rows]
    relevant = [r["expected_score"] for r in rows if r["expected_score"] is not None]
    others = [r["other_score"] for r in rows if r["other_score"] is not None]
    return {
        "metrics": metrics,
        "categories": categories,
        "latency_ms": {
            "mean": round(sum(latencies) / len(latencies), 2),
            "p50": round(percentile(latencies, 50), 2),
            "p95": round(percentile(latencies, 95), 2),
            "max": round(max(latencies), 2),
        },
        "suggested": suggest_min_score(relevant, others),
        "questions": rows,
    }


def _compare(summaries: Mapping[str, Any], modes: Sequence[str], k: int) -> dict[str, Any]:
    base = summaries[modes[0]]["questions"]
    out = {}
    for mode in modes[1:]:
        rows = summaries[mode]["questions"]
        deltas = {}
        for key in metric_keys(k):
            d = [b[key] - a[key] for a, b in zip(base, rows)]
            lo, hi = bootstrap_interval(d)
            deltas[key] = {"delta": round(sum(d) / len(d), 4), "lo": round(lo, 4),
                           "hi": round(hi, 4)}  # fmt: skip
        out[f"{mode} vs {modes[0]}"] = deltas
    return out


def _floors_of(kb: KnowledgeBase) -> dict[str, float] | None:
    if not supports(kb.store, DocumentCatalog) or kb.store.embedder_info is None:
        return None
    floors = stored_floors(kb.store, embedder_info(kb.embedder))
    return None if floors is None else {"floor": floors.floor, "hit_floor": floors.hit_floor}
