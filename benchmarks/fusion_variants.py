"""Fusion rules replayed over recorded routes (``semantic_study.py fusion`` and ``floors``).

Each rule maps one query's two recorded routes (lists of ``[chunk id, document id, score]``)
to fused chunk scores; documents are then ranked by their best chunk (ties by id) and scored
with ``kbcli.eval.beir``'s metrics. The rule kb ships is :func:`kbcli.search.combine.fuse`,
called here exactly as ``retrievers.fuse`` calls it, so the study measures the product.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbcli.eval.beir import hit_at_k, load_beir, mrr_at_k, ndcg_at_k, rank_documents
from kbcli.search.calibration import Floors, dense_cutoff, floor_from_scores
from kbcli.search.fusion import (
    RRF_K,
    confident_alpha,
    keyword_first_fusion,
    keyword_margin,
    min_max,
    rrf_fusion,
    weighted_fusion,
)
from kbcli.text.analysis import has_cjk

Route = list[list[Any]]  # [chunk id, doc id, score]
ENGLISH_ONLY = {"minilm", "static", "simple"}
EMBEDDER_ALPHA = {"static": 0.3}  # what kb uses unless --alpha: StaticEmbedder.alpha


class Query:
    """One judged query's text, routes and the index facts a rule may use."""

    def __init__(
        self,
        text: str,
        keyword: Route,
        dense: Route,
        floor: float,
        embedder: str,
        titles: dict[str, str] | None = None,
    ):
        self.text = text
        self.titles = titles or {}
        self.keyword = keyword
        self.dense = dense
        self.floor = floor
        self.embedder = embedder
        self.docs = {c: d for c, d, _ in keyword + dense}

    @property
    def dense_weak(self) -> bool:
        """The dense route cannot be trusted for this query (weak embedder, or English-only
        model and a Chinese query): what kb's ``weak_for`` says."""
        return self.embedder == "simple" or (self.embedder in ENGLISH_ONLY and has_cjk(self.text))


Rule = Callable[[Query], dict[str, float]]


def scores(route: Route) -> dict[str, float]:
    return {c: s for c, _, s in route}


def keyword_only(q: Query) -> dict[str, float]:
    return scores(q.keyword)


def dense_only(q: Query) -> dict[str, float]:
    return scores(q.dense)


def dense_above_floor(q: Query) -> dict[str, float]:
    return {c: s for c, s in scores(q.dense).items() if s >= q.floor}


def semantic_kb(q: Query) -> dict[str, float]:
    """Semantic mode as kb runs it: the nonsense gate, then the hit floor (a weak embedder:
    every dense hit, when a word of the query is indexed)."""
    if q.embedder == "simple":
        return scores(q.dense) if q.keyword else {}
    top = max((s for _, _, s in q.dense), default=0.0)
    cut = dense_cutoff(Floors(q.floor, q.hit_floor), top, bool(q.keyword), q.dense_weak)
    return {c: s for c, s in scores(q.dense).items() if cut is None or s >= cut}


def minmax(alpha: float) -> Rule:
    def rule(q: Query) -> dict[str, float]:
        return weighted_fusion(scores(q.dense), scores(q.keyword), alpha)

    return rule


def rrf(q: Query) -> dict[str, float]:
    return rrf_fusion([c for c, _, _ in q.dense], [c for c, _, _ in q.keyword], k=RRF_K)


def before(alpha: float = 0.6) -> Rule:
    """kb before this change: min-max α, keyword-first (α 0.001) when the dense route is weak
    for the query."""

    def rule(q: Query) -> dict[str, float]:
        if q.dense_weak:
            return keyword_first_fusion(scores(q.dense), scores(q.keyword), 0.001)
        return weighted_fusion(scores(q.dense), scores(q.keyword), alpha)

    return rule


# Embedders that declare ``keyword_sure_margin`` (the per-query weight), as in kbcli.
PER_QUERY = ("e5", "static")


def product(
    alpha: float | None = None,
    floor: str | bool = "kb",
    named: bool = True,
    per_query: bool = True,
    base: float | None = None,
) -> Rule:
    """``kbcli.search.retrievers.fuse`` as ``HybridRetriever`` calls it in weighted mode:
    keyword-first
    when the dense route is weak for the query, the index's floor, the named rule; without
    ``alpha`` (as when a search does not choose it) the embedder's weight set per query by
    the keyword route's margin (``per_query``, :func:`kbcli.search.fusion.confident_alpha`), from
    ``base`` instead of the embedder's weight when given."""
    from kbcli.search.combine import fuse, named_hit
    from kbcli.text.analysis import Analyzer
    from kbcli.types import Document, SearchOptions, SearchResult

    analyzer = Analyzer()

    def rule(q: Query) -> dict[str, float]:
        chosen = alpha if alpha is not None else EMBEDDER_ALPHA.get(q.embedder, 0.6)
        if alpha is None and base is not None:
            chosen = base
        if alpha is None and per_query and q.embedder in PER_QUERY:
            chosen = confident_alpha(chosen, keyword_margin((d, s) for _, d, s in q.keyword))
        options = SearchOptions(k=1000, mode="hybrid", dedupe=False, alpha=chosen)

        def results(route: Route) -> list:
            return [
                SearchResult(Document(c, "", {"title": q.titles.get(d, "")}), s)
                for c, d, s in route
            ]

        keyword, dense = results(q.keyword), results(q.dense)
        weak = q.dense_weak
        hits = fuse(
            keyword,
            dense,
            len(keyword) + len(dense),
            options,
            0.001 if weak else chosen,
            keyword_first=weak,
            floor=_floor(q, floor),
            named=named_hit(q.text, keyword, analyzer) if named else None,
        )
        return {h.document.id: h.score for h in hits}

    return rule


def _floor(q: Query, mode: str | bool) -> float | None:
    """kb: :func:`kbcli.search.calibration.dense_cutoff`. Alternatives measured: hit (every
    dense-only hit under the gate goes), gate (all of them when the query's best dense score
    is under the gate, else those under the hit floor), gate-only (the first part)."""
    if not mode:
        return None
    top = max((s for _, _, s in q.dense), default=0.0)
    if mode == "kb":
        floors = Floors(q.floor, q.hit_floor)
        return dense_cutoff(floors, top, bool(q.keyword), q.dense_weak)
    if mode == "hit" or mode is True:
        return q.floor
    if top < q.floor and (mode != "gate-empty" or not q.keyword):
        return float("inf")
    return q.hit_floor if mode in ("gate", "gate-empty") else None


def per_query(ranking: list[str], rels: dict[str, int]) -> tuple[float, float, float, float]:
    return (
        ndcg_at_k(ranking, rels, 10),
        hit_at_k(ranking, rels, 1),
        hit_at_k(ranking, rels, 3),
        mrr_at_k(ranking, rels, 10),
    )


def run_rule(rule: Rule, queries: dict[str, Query], qrels: dict[str, dict[str, int]]) -> dict:
    out = {}
    for qid, q in queries.items():
        fused = rule(q)
        ranking = rank_documents((q.docs[c], s) for c, s in fused.items())
        out[qid] = per_query(ranking, qrels[qid])
    return out


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summary(per: dict[str, tuple], ids: list[str] | None = None) -> dict[str, float]:
    ids = ids if ids is not None else list(per)
    cols = list(zip(*(per[q] for q in ids))) if ids else [[], [], [], []]
    return {
        "ndcg@10": mean(list(cols[0])),
        "hit@1": mean(list(cols[1])),
        "hit@3": mean(list(cols[2])),
        "mrr@10": mean(list(cols[3])),
        "queries": len(ids),
    }


def bootstrap_delta(a: list[float], b: list[float], rounds: int = 2000) -> tuple[float, float]:
    """95% interval of mean(b - a) over queries resampled with replacement."""
    rng = random.Random(7)
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    if not n:
        return 0.0, 0.0
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds)]


def load_set(cache: Path, data: Path, name: str, embedder: str) -> tuple | None:
    from study_sets import SETS, categories, load_routes, set_dir

    rec = load_routes(cache, name, embedder)
    if rec is None:
        return None
    folder = set_dir(data, name)
    ds = load_beir(folder, SETS[name])
    from kbcli.search.calibration import probes_for

    known = None if embedder == "e5" else {"en"}
    rec["probes"] = [p for p in rec["probes"] if p["text"] in probes_for(known)]
    best = [max(p["dense"], default=0.0) for p in rec["probes"]]
    floor = floor_from_scores(best)
    hit_floor = floor.hit_floor
    floor = floor.floor
    titles = {doc: title for doc, (title, _) in ds.corpus.items()}
    queries = {
        qid: Query(ds.queries[qid], r["keyword"], r["dense"], floor, embedder, titles)
        for qid, r in rec["queries"].items()
    }
    for q in queries.values():
        q.hit_floor = hit_floor
    qrels = {q: ds.qrels[q] for q in queries}
    return queries, qrels, categories(folder), floor, rec


def variants() -> dict[str, Rule]:
    out: dict[str, Rule] = {
        "keyword": keyword_only,
        "dense": dense_only,
        "dense ≥ floor": dense_above_floor,
        "semantic (kb)": semantic_kb,
        "before (min-max α0.6)": before(0.6),
        "min-max α0.5": minmax(0.5),
        "min-max α0.3": minmax(0.3),
        "rrf": rrf,
    }
    out["kb (default)"] = product()
    out["kb: fixed α, floor, named"] = product(per_query=False)
    out["kb: α0.6, floor, named"] = product(0.6)
    out["kb: α0.6, named, gate, hit floor"] = product(0.6, floor="gate")
    out["kb: α0.6, named, hit floor"] = product(0.6, floor="hit")
    out["kb: α0.6, named, gate only"] = product(0.6, floor="gate-only")
    out["kb: α0.6, named, gate if no keyword"] = product(0.6, floor="gate-empty")
    out["kb: α0.6, named, no floor"] = product(0.6, floor=False)
    out["kb: α0.6, floor, not named"] = product(0.6, named=False)
    out["kb: α0.5, floor, named"] = product(0.5)
    out["kb: α0.7, floor, named"] = product(0.7)
    for alpha in (0.2, 0.3, 0.4):
        out[f"kb: α{alpha}, floor, named"] = product(alpha)
    for base in (0.05, 0.1, 0.15, 0.2):  # the ramp from another base (e5, static)
        out[f"kb: per-query from α{base}"] = product(base=base)
    if os.environ.get("KB_STUDY_GRID"):
        out.update(grid())
    return out


def run_stage(args: Any) -> None:
    from study_sets import SETS

    if args.stage == "table":
        out = Path(args.out).with_suffix(".md")
        out.write_text(table(args), encoding="utf-8")
        print(f"wrote {out}")
        return

    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    rules = variants()
    for name in args.sets:
        for embedder in args.embedders:
            loaded = load_set(args.cache, args.data, name, embedder)
            if loaded is None:
                continue
            queries, qrels, cats, floor, rec = loaded
            if args.stage == "floors":
                results[f"floors|{name}|{embedder}"] = floors(queries, qrels, rec, floor)
                print(name, embedder, json.dumps(results[f"floors|{name}|{embedder}"]))
                continue
            base = run_rule(keyword_only, queries, qrels)
            print(f"\n{name} ({SETS[name]}) {embedder}: floor {floor:.3f}")
            groups = {"all": list(queries)}
            for cat in sorted(set(cats.values())):
                groups[cat] = [q for q in queries if cats.get(q) == cat]
            for label, rule in rules.items():
                per = run_rule(rule, queries, qrels)
                for group, ids in groups.items():
                    s = summary(per, ids)
                    lo, hi = bootstrap_delta([base[q][1] for q in ids], [per[q][1] for q in ids])
                    s["hit@1 delta ci"] = [round(lo, 4), round(hi, 4)]
                    results[f"fusion|{name}|{embedder}|{label}|{group}"] = s
                    if group == "all" or len(groups) > 1:
                        print(
                            f"  {label:32} {group:11} n={s['queries']:4} "
                            f"nDCG {s['ndcg@10']:.3f} h1 {s['hit@1']:.3f} h3 {s['hit@3']:.3f} "
                            f"mrr {s['mrr@10']:.3f}"
                        )
            sys.stdout.flush()
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True))


def floors(queries: dict[str, Query], qrels: dict, rec: dict, floor: float) -> dict[str, Any]:
    """How the floor separates: nonsense probes' best dense scores, unrelated questions' best,
    and the relevant documents' best dense chunk score (share below the floor = recall lost)."""
    relevant_best = []
    top_hit = []
    for qid, q in queries.items():
        rels = {d for d, g in qrels[qid].items() if g > 0}
        found = [s for _, d, s in q.dense if d in rels]
        relevant_best.append(max(found) if found else None)
        top_hit.append(q.dense[0][2] if q.dense else 0.0)
    known = [s for s in relevant_best if s is not None]
    probes = [max(p["dense"], default=0.0) for p in rec["probes"]]
    unrelated = [max(p["dense"], default=0.0) for p in rec["unrelated"]]

    def share_below(values: list[float]) -> float:
        return round(sum(1 for v in values if v < floor) / len(values), 4) if values else 0.0

    return {
        "floor": round(floor, 4),
        "probe best max": round(max(probes), 4),
        "probe best median": round(statistics.median(probes), 4),
        "unrelated best median": round(statistics.median(unrelated), 4) if unrelated else None,
        "unrelated below floor": share_below(unrelated),
        "relevant in pool": len(known),
        "relevant below floor": share_below(known),
        "top-1 below floor": share_below(top_hit),
        "relevant median": round(statistics.median(known), 4) if known else None,
    }


# --- experimental rules (the study's grid) ---------------------------------------------------


def zscores(values: dict[str, float], depth: int | None = None) -> dict[str, float]:
    """(s - mean) / stdev over the route's top ``depth`` scores (all without it)."""
    if not values:
        return {}
    ordered = sorted(values.values(), reverse=True)
    pool = ordered[:depth] if depth else ordered
    mu = sum(pool) / len(pool)
    sd = (sum((v - mu) ** 2 for v in pool) / len(pool)) ** 0.5 or 1.0
    return {k: (v - mu) / sd for k, v in values.items()}


def by_source(route: dict[str, float], docs: dict[str, str]) -> dict[str, float]:
    best: dict[str, float] = {}
    for c, s in route.items():
        d = docs[c]
        if s > best.get(d, float("-inf")):
            best[d] = s
    return best


def experiment(
    alpha: float = 0.5,
    norm: str = "z",
    depth: int | None = None,
    level: str = "chunk",
    floor: bool = True,
    sure: float | None = None,
    weak_cjk: bool = True,
    title_pin: bool = False,
    post_floor: bool = False,
) -> Rule:
    def rule(q: Query) -> dict[str, float]:
        d, k = scores(q.dense), scores(q.keyword)
        fused = _experiment(q, d, k)
        if title_pin:
            terms = _terms(q.text)
            named = [c for c in k if terms and _terms(q.titles.get(q.docs[c], "")) == terms]
            if named:
                best = max(named, key=lambda c: k[c])
                fused[best] = max(fused.values()) + 1.0
        if post_floor:
            fused = {c: s for c, s in fused.items() if c in k or d.get(c, 0.0) >= q.floor}
        return fused

    def _experiment(q: Query, d: dict, k: dict) -> dict[str, float]:
        if floor:
            d = {c: s for c, s in d.items() if s >= q.floor}
        if weak_cjk and q.dense_weak:
            return keyword_first_fusion(d, k, 0.001)
        if level == "source":
            dd, kk = by_source(d, q.docs), by_source(k, q.docs)
        else:
            dd, kk = d, k
        if norm == "z":
            nd, nk = zscores(dd, depth), zscores(kk, depth)
            # a route that did not find a document gives it its pool's lowest value
            dmin = min(nd.values(), default=0.0)
            kmin = min(nk.values(), default=0.0)
        elif norm == "bounded":
            nk = max_scale(kk)
            top = max(dd.values(), default=0.0)
            lo = q.floor if floor else 0.0
            nd = {c: (s - lo) / (top - lo) if top > lo else 1.0 for c, s in dd.items()}
            dmin = kmin = 0.0
        else:
            nd, nk = min_max(dd), min_max(kk)
            dmin = kmin = 0.0
        keys = set(nd) | set(nk)
        fused = {c: alpha * nd.get(c, dmin) + (1 - alpha) * nk.get(c, kmin) for c in keys}
        if level == "source":
            own = {}
            for c in set(d) | set(k):
                src = q.docs[c]
                own[c] = fused.get(src, 0.0) + 1e-6 * (d.get(c, 0.0) + k.get(c, 0.0))
            fused = own
        if sure is not None:
            pinned = _keyword_sure(k, q.docs, sure)
            if pinned is not None:
                fused[pinned] = max(fused.values()) + 1.0
        return fused

    return rule


def _keyword_sure(keyword: dict, docs: dict, sure: float) -> str | None:
    """The gap rule tried and not kept (docs/search.md): the keyword route's best chunk when
    its file's best score is at least ``1 / sure`` times the next file's, else None."""
    best: dict = {}
    top: dict = {}
    for chunk, score in keyword.items():
        doc = docs[chunk]
        if score > best.get(doc, float("-inf")):
            best[doc], top[doc] = score, chunk
    ranked = sorted(best, key=best.get, reverse=True)
    if not ranked or best[ranked[0]] <= 0:
        return None
    if len(ranked) == 1 or best[ranked[1]] <= sure * best[ranked[0]]:
        return top[ranked[0]]
    return None


_ANALYZER = None


def _terms(text: str) -> tuple:
    global _ANALYZER
    if _ANALYZER is None:
        from kbcli.text.analysis import Analyzer

        _ANALYZER = Analyzer()
    return tuple(sorted(set(_ANALYZER.query_counts(text))))


def max_scale(values: dict[str, float]) -> dict[str, float]:
    top = max(values.values(), default=0.0)
    return {c: s / top for c, s in values.items()} if top > 0 else {c: 0.0 for c in values}


def grid() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for level in ("chunk", "source"):
        for norm in ("minmax", "bounded", "z"):
            for alpha in (0.3, 0.5, 0.6, 0.7):
                out[f"{level} {norm} α{alpha}"] = experiment(alpha, norm, level=level)
    for sure in (0.5, 0.7, 0.8):
        out[f"source z α0.5 sure{sure}"] = experiment(0.5, "z", level="source", sure=sure)
        out[f"source bounded α0.5 sure{sure}"] = experiment(
            0.5, "bounded", level="source", sure=sure
        )
    for depth in (10, 30):
        out[f"source z α0.5 depth{depth}"] = experiment(0.5, "z", depth, level="source")
    for alpha in (0.5, 0.6, 0.7):
        for norm in ("minmax", "bounded"):
            for level in ("chunk", "source"):
                base = f"{level} {norm} α{alpha} nofloor"
                out[base] = experiment(alpha, norm, level=level, floor=False)
                out[base + " title"] = experiment(
                    alpha, norm, level=level, floor=False, title_pin=True
                )
                out[base + " title post"] = experiment(
                    alpha, norm, level=level, floor=False, title_pin=True, post_floor=True
                )
                out[base + " title sure0.7"] = experiment(
                    alpha, norm, level=level, floor=False, title_pin=True, sure=0.7
                )
    return out


# --- the page section ------------------------------------------------------------------------

EMBEDDERS_SHOWN = ("simple", "minilm", "static", "e5")
ROWS = (
    ("keyword", "keyword"),
    ("semantic, before (every dense hit)", "dense"),
    ("semantic, after (floors)", "semantic (kb)"),
    ("hybrid, before (min-max α0.6)", "before (min-max α0.6)"),
    ("hybrid, after (kb)", "kb (default)"),
    ("hybrid, rrf", "rrf"),
)
PARAPHRASE = {"tldr": "paraphrase", "manpages": "paraphrase", "tldr-zh": "paraphrase"}


def leave_one_out(best: list[float]) -> float:
    """Share of the probes that would pass a gate calibrated on the others (generalisation)."""
    passed = 0
    for i, value in enumerate(best):
        others = best[:i] + best[i + 1 :]
        if value >= floor_from_scores(others).floor:
            passed += 1
    return passed / len(best) if best else 0.0


def table(args: Any) -> str:
    """The markdown section of docs/quality.md written from the recorded routes."""
    from study_sets import SETS

    lines = [
        "## The semantic route: fusion, floors and embedders, before / after (issue 32)",
        "",
        "Generated by `python benchmarks/semantic_study.py table` from the routes that",
        "`semantic_study.py routes` records (each route's top 100 chunks for every judged query,",
        "through `kb eval`'s ingest path), replayed through `kbcli.search.retrievers.fuse`",
        "and `kbcli.search.calibration.dense_cutoff` exactly as `HybridRetriever` calls them.",
        "Before = kb",
        "at b373094 (min-max α 0.6 for a real embedder, keyword-first for a weak one or a",
        "Chinese query to an English model, every dense hit kept); after = this branch",
        "(the same fusion plus the named rule, the floors, the static embedder's own α 0.3).",
        "Documents ranked by their best chunk; hit@k: a document with the query's top grade",
        "in the first k. Δh1: hit@1 after − keyword, with its 95% paired-bootstrap interval.",
        "",
        "| set | embedder | row | nDCG@10 | hit@1 | hit@3 | MRR@10 | paraphrase hit@1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    floors_rows = []
    for name in SETS:
        for embedder in EMBEDDERS_SHOWN:
            loaded = load_set(args.cache, args.data, name, embedder)
            if loaded is None:
                continue
            queries, qrels, cats, floor, rec = loaded
            rules = variants()
            base = run_rule(keyword_only, queries, qrels)
            para = [q for q in queries if name in PARAPHRASE and cats.get(q) == PARAPHRASE[name]]
            first = ENGLISH_FIRST.setdefault(name, embedder)
            for label, key in ROWS:
                if key == "keyword" and embedder != first:
                    continue
                per = run_rule(rules[key], queries, qrels)
                s = summary(per)
                p = f"{summary(per, para)['hit@1']:.3f}" if para else "–"
                if key == "kb (default)":
                    lo, hi = bootstrap_delta([base[q][1] for q in queries],
                                             [per[q][1] for q in queries])  # fmt: skip
                    delta = s["hit@1"] - summary(base)["hit@1"]
                    label = f"{label} (Δh1 {delta:+.3f} [{lo:+.3f}, {hi:+.3f}])"
                lines.append(
                    f"| {name} | {'–' if key == 'keyword' else embedder} | {label} | "
                    f"{s['ndcg@10']:.3f} | {s['hit@1']:.3f} | {s['hit@3']:.3f} | "
                    f"{s['mrr@10']:.3f} | {p} |"
                )
            best = [max(p_["dense"], default=0.0) for p_ in rec["probes"]]
            unrelated = rec["unrelated"]
            silent = sum(
                1 for u in unrelated
                if not u["keyword"] and max(u["dense"], default=0.0) < floor
            )  # fmt: skip
            nofloor = summary(run_rule(product(floor=False), queries, qrels))["ndcg@10"]
            after = summary(run_rule(product(), queries, qrels))["ndcg@10"]
            floors_rows.append(
                f"| {name} | {embedder} | {floor:.3f} | {queries_floor(queries):.3f} | "
                f"{len(best)} | {leave_one_out(best):.0%} | "
                f"{silent}/{len(unrelated)} | {nofloor:.3f} → {after:.3f} |"
            )
    from study_sets import CHECK

    if CHECK.exists():
        checked = json.loads(CHECK.read_text())
        lines += [
            "",
            "The real path, `kbcli.eval.beir.evaluate` on the same indexes",
            "(`semantic_study.py check`: 200-chunk pools per route instead of the replay's 100,",
            "the floors each index calibrated; latency per query, ms, with the 1-minute load",
            "average):",
            "",
            "| set | embedder | mode | nDCG@10 | hit@1 | hit@3 | MRR@10 | latency mean / p95 "
            "| load |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for key, r in checked.items():
            name, embedder, mode, *chosen = key.split("|")
            mode = " ".join([mode, *chosen])
            lat = r["latency_ms"]
            lines.append(
                f"| {name} | {embedder} | {mode} | {r['ndcg@10']:.3f} | {r['hit@1']:.3f} | "
                f"{r['hit@3']:.3f} | {r['mrr@10']:.3f} | {lat['mean']:.0f} / {lat['p95']:.0f} "
                f"| {r['load']:.1f} |"
            )
    lines += [
        "",
        "Relevance floors per index and embedder (`kbcli.search.calibration`; gate = best nonsense",
        "probe + 0.02, hit floor = median probe). Leave-one-out: share of the probes that a",
        "gate calibrated on the other probes would let through (how well the gate holds for",
        "nonsense it was not calibrated on). Unrelated: real questions of another collection",
        "(SciFact claims on tldr, tldr tasks on SciFact...) that get no hit at all (the gate",
        "and no keyword match). Hybrid nDCG@10 without → with the floors.",
        "",
        "| set | embedder | gate | hit floor | probes | probes through (leave-one-out) | "
        "unrelated questions with no hit | hybrid nDCG@10 no floors → floors |",
        "|---|---|---|---|---|---|---|---|",
        *floors_rows,
    ]
    return "\n".join(lines) + "\n"


ENGLISH_FIRST: dict[str, str] = {}  # the keyword row is shown once per set (first embedder)


def queries_floor(queries: dict[str, Query]) -> float:
    return next(iter(queries.values())).hit_floor if queries else 0.0
