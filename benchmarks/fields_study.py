"""Field-weight study for keyword ranking: chunk each collection once with the real ingest path,
then score variants (title / heading / body weights, title once or per chunk at the source
level, how many query terms are scored) with the formula of :mod:`kbcli.text.bm25`.

    python benchmarks/fields_study.py --data /work/shared/eval [--max-queries 1000]

Documents are ranked by their best chunk, as ``kb eval`` does. Prints nDCG@10, hit@1 and
hit@3 per collection and variant, and a paired bootstrap of each variant against the first.
Only the usable splits are read (never a ``*.enc`` file).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbcli.config.lookup import Config  # noqa: E402
from kbcli.eval.beir import load_beir, ndcg_at_k  # noqa: E402
from kbcli.pipeline import IngestPipeline  # noqa: E402
from kbcli.text.analysis import Analyzer, FieldWeights, chunk_fields, document_title  # noqa: E402
from kbcli.text.bm25 import K1, SOURCE_WEIGHT, B, bm25_idf  # noqa: E402
from kbcli.types import Section  # noqa: E402

COLLECTIONS = {
    "scifact": ("scifact", "train"),
    "cranfield": ("cranfield", "test"),
    "cmrc2018": ("cmrc2018-dev-retrieval", "test"),
    "drcd": ("drcd-retrieval", "dev"),
    "manpages": (None, "test"),
}


@dataclass(frozen=True)
class Variant:
    name: str
    weights: FieldWeights
    title_once: bool = False  # the source counts the title once, not once per chunk
    max_terms: int = 32
    strip_title_line: bool = False  # drop the "# Title" line from the first chunk's body
    legacy: bool = False  # today's index: text + full heading path, no title field
    twin: float = 0  # title terms indexed as their own terms, queried with this weight
    twin_heading: float = 0  # the same for heading-path terms
    twin_max: int = 0  # twins only for titles of at most this many terms (0: any)
    name_match: float = 0  # whole-title term (titles of <= 3 terms), matched by query n-grams


def chunked(path: Path, split: str):
    """(dataset, [(doc_id, [(text, metadata)])]) chunked as kb eval ingests."""
    ds = load_beir(path, split)
    ing = IngestPipeline(config=Config())
    docs = []
    for doc_id, (title, text) in ds.corpus.items():
        body = f"# {title}\n\n{text}" if title else text
        chunks = ing.chunk_sections([Section(body, {})])
        t = document_title((c.metadata.get("heading") for c in chunks), None)
        docs.append(
            (doc_id, [(c.text, {**c.metadata, "title": t} if t else c.metadata) for c in chunks])
        )
    return ds, docs


TWIN = "\x00t:"
HTWIN = "\x00h:"
NAME = "\x00n:"


def counts_of(a: Analyzer, v: Variant, text: str, meta: dict) -> tuple[Counter, Counter]:
    """(fields except title, title) weighted counts."""
    if v.legacy:
        h = meta.get("heading")
        return Counter(a.terms(f"{text}\n{h}" if h else text)), Counter()
    title, heading, body = chunk_fields(text, meta)
    if v.strip_title_line and body.startswith("# "):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    rest: Counter = Counter()
    for t in a.terms(heading):
        rest[t] += v.weights.heading
    for t in a.terms(body):
        rest[t] += v.weights.body
    tt: Counter = Counter()
    title_terms = a.terms(title)
    short = not v.twin_max or len(title_terms) <= v.twin_max
    for t in title_terms:
        if v.twin and short:
            tt[TWIN + t] += 1
        tt[t] += v.weights.title
    if v.name_match and 0 < len(set(title_terms)) <= 3:
        tt[NAME + " ".join(sorted(set(title_terms)))] += 1
    if v.twin_heading:
        for t in a.terms(heading):
            rest[HTWIN + t] += 1
    return rest, tt


class Index:
    def __init__(self, a: Analyzer, v: Variant, docs):
        self.v = v
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.spost: dict[str, dict[int, int]] = {}
        self.dl: list[int] = []
        self.src: list[int] = []
        self.sl: list[int] = []
        self.doc_ids = [d for d, _ in docs]
        for s, (_, chunks) in enumerate(docs):
            stf: Counter = Counter()
            title_tf: Counter = Counter()
            for text, meta in chunks:
                rest, tt = counts_of(a, v, text, meta)
                tf = rest + tt
                c = len(self.dl)
                self.dl.append(sum(tf.values()))
                self.src.append(s)
                for t, n in tf.items():
                    self.postings.setdefault(t, []).append((c, n))
                stf.update(rest)
                if v.title_once:
                    title_tf = tt
                else:
                    stf.update(tt)
            stf.update(title_tf)
            self.sl.append(sum(stf.values()))
            for t, n in stf.items():
                self.spost.setdefault(t, {})[s] = n
        self.n, self.ns = len(self.dl), len(self.sl)
        self.avgdl = sum(self.dl) / self.n
        self.avgsl = sum(self.sl) / self.ns

    def rank(self, counts: Counter, seq: list[str] | None = None) -> list[str]:
        if self.v.name_match and seq:
            counts = Counter(counts)
            keys = {
                NAME + " ".join(sorted(set(seq[i : i + n])))
                for n in (1, 2, 3)
                for i in range(len(seq) - n + 1)
            }
            for key in keys:
                if key in self.postings:
                    counts[key] = self.v.name_match
        found = [(len(self.postings[t]), t, n) for t, n in counts.items() if t in self.postings]
        found.sort(key=lambda x: x[0])
        if self.v.max_terms:
            found = found[: self.v.max_terms]
        twins = []
        for _, t, n in found:
            for prefix, w in ((TWIN, self.v.twin), (HTWIN, self.v.twin_heading)):
                if w and prefix + t in self.postings:
                    twins.append((len(self.postings[prefix + t]), prefix + t, n * w))
        found += twins
        chunk: dict[int, float] = {}
        source: dict[int, float] = {}
        for df, t, n in found:
            w = bm25_idf(self.n, df) * n
            for c, tf in self.postings[t]:
                norm = 1 - B + B * self.dl[c] / self.avgdl
                chunk[c] = chunk.get(c, 0.0) + w * tf * (K1 + 1) / (tf + K1 * norm)
            sp = self.spost[t]
            sw = bm25_idf(self.ns, len(sp)) * n
            for s, tf in sp.items():
                norm = 1 - B + B * self.sl[s] / self.avgsl
                source[s] = source.get(s, 0.0) + sw * tf * (K1 + 1) / (tf + K1 * norm)
        best: dict[int, float] = {}
        for c, x in chunk.items():
            s = self.src[c]
            if x > best.get(s, -1.0):
                best[s] = x
        scored = sorted(
            ((-(x + SOURCE_WEIGHT * source[s]), self.doc_ids[s]) for s, x in best.items())
        )
        return [d for _, d in scored[:10]]


def hit(ranking: list[str], rels: dict[str, int], k: int) -> float:
    top = max(rels.values())
    return float(any(rels.get(d, 0) == top for d in ranking[:k]))


def bootstrap(a: list[float], b: list[float], rounds: int = 2000) -> tuple[float, float]:
    """95% interval of mean(b - a) by a paired bootstrap over queries."""
    rng = random.Random(7)
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds)]


VARIANTS = [
    Variant("today (text+heading)", FieldWeights(), legacy=True),
    Variant("t1 h1 b1", FieldWeights(1, 1, 1)),
    Variant("t2 h1 b1", FieldWeights(2, 1, 1)),
    Variant("t3 h1 b1", FieldWeights(3, 1, 1)),
    Variant("t5 h1 b1", FieldWeights(5, 1, 1)),
    Variant("t3 h2 b1", FieldWeights(3, 2, 1)),
    Variant("t3 h1 b1 title once", FieldWeights(3, 1, 1), title_once=True),
    Variant("t3 h1 b1 no title line", FieldWeights(3, 1, 1), strip_title_line=True),
    Variant("t3 h1 b1 all terms", FieldWeights(3, 1, 1), max_terms=0),
    Variant("today, all terms", FieldWeights(), legacy=True, max_terms=0),
    Variant("twin title 1", FieldWeights(0, 1, 1), twin=1),
    Variant("twin title 2", FieldWeights(0, 1, 1), twin=2),
    Variant("twin title 1 + t1", FieldWeights(1, 1, 1), twin=1),
    Variant("twin title 2 + t1", FieldWeights(1, 1, 1), twin=2),
    Variant("twin title 0.25 + t1", FieldWeights(1, 1, 1), twin=0.25),
    Variant("twin title 0.5 + t1", FieldWeights(1, 1, 1), twin=0.5),
    Variant("t8 h1 b1", FieldWeights(8, 1, 1)),
    Variant("t2 h1 b1 all terms", FieldWeights(2, 1, 1), max_terms=0),
    Variant("t2 + name 1", FieldWeights(2, 1, 1), max_terms=0, name_match=1),
    Variant("t2 + name 0.5", FieldWeights(2, 1, 1), max_terms=0, name_match=0.5),
    Variant("t2 + name 2", FieldWeights(2, 1, 1), max_terms=0, name_match=2),
    Variant("twin<=4 0.5", FieldWeights(1, 1, 1), twin=0.5, twin_max=4),
    Variant("twin<=4 1", FieldWeights(1, 1, 1), twin=1, twin_max=4),
    Variant("twin<=2 0.5", FieldWeights(1, 1, 1), twin=0.5, twin_max=2),
    Variant("twin<=2 1", FieldWeights(1, 1, 1), twin=1, twin_max=2),
    Variant("t5 h2 b1", FieldWeights(5, 2, 1)),
    Variant("t5 h1 b1 title once", FieldWeights(5, 1, 1), title_once=True),
    Variant("t2 h1 b2", FieldWeights(2, 1, 2)),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "eval")
    p.add_argument("--only", nargs="*")
    p.add_argument("--variants", nargs="*")
    p.add_argument("--max-queries", type=int, default=0)
    args = p.parse_args()
    a = Analyzer()
    variants = [v for v in VARIANTS if not args.variants or v.name in args.variants]
    for name, (folder, split) in COLLECTIONS.items():
        if args.only and name not in args.only:
            continue
        path = (
            ROOT / "benchmarks" / "corpora" / "manpages" if folder is None else args.data / folder
        )
        ds, docs = chunked(path, split)
        qids = [
            q for q, r in ds.qrels.items() if q in ds.queries and any(g > 0 for g in r.values())
        ]
        if args.max_queries and len(qids) > args.max_queries:
            qids = random.Random(1).sample(sorted(qids), args.max_queries)
        qcounts = {q: a.query_counts(ds.queries[q]) for q in qids}
        qseq = {q: a.terms(ds.queries[q]) for q in qids}
        base = None
        print(f"## {name} ({len(qids)} queries)")
        for v in variants:
            idx = Index(a, v, docs)
            per = [], [], []
            for q in qids:
                rels = {d: g for d, g in ds.qrels[q].items() if g > 0}
                r = idx.rank(qcounts[q], qseq[q])
                per[0].append(ndcg_at_k(r, ds.qrels[q], 10))
                per[1].append(hit(r, rels, 1))
                per[2].append(hit(r, rels, 3))
            means = [sum(x) / len(x) for x in per]
            line = f"{v.name:28s} ndcg {means[0]:.4f} hit1 {means[1]:.3f} hit3 {means[2]:.3f}"
            if base is None:
                base = per[0]
            else:
                lo, hi = bootstrap(base, per[0])
                line += f"  d_ndcg [{lo:+.4f}, {hi:+.4f}]"
            print(line, flush=True)


if __name__ == "__main__":
    main()
