"""How often ``kb ask`` refuses, as its evidence floor moves: on questions whose answer is in the
knowledge base, and on questions it has no answer to.

No answer model is needed, and none is called: ``kb ask`` refuses *before* any request, on
the evidence alone, so :func:`kbcli.agent.answer.select_evidence` (the code ``kb ask`` runs) decides
exactly what ``kb ask`` would. Each question is searched once (``-k`` 8, as ``kb ask``); each
hit's coverage is kept, and every threshold is then applied to the same hits.

Two sets of questions per judged collection A (usable splits only, see the eval README; the
held-out ``*.enc`` files are never opened):

* **answerable**: A's judged questions asked against A's index. Reported: how often kb ask
  refuses, and how often it answers with a judged relevant passage among the evidence it
  would give the model (the ``max_evidence`` budget applied);
* **unanswerable**: A's questions asked against the index of another collection B of the same
  language (scifact <-> cranfield, cmrc2018 <-> drcd). Reported: how often kb ask answers
  (it should refuse). A few of those questions may be answerable from B by chance (both
  Chinese sets are Wikipedia); the rate is an upper bound of wrong answers.

Run:  python benchmarks/bench_ask.py --data /work/shared/eval [--queries 300] [--all]
          [--modes keyword,hybrid] [--pairs en,zh] [--flat] [--db-dir DIR] [--json]

``--flat`` weighs every question term 1 instead of its idf, for comparison.
Indexes are built with the built-in embedder (no key, no model) into ``--db-dir`` (default: a
temporary folder) and reused from there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine_info  # noqa: E402

from kbcli.agent.answer import budget_evidence, select_evidence  # noqa: E402
from kbcli.config.lookup import AnswerConfig, load_config  # noqa: E402
from kbcli.eval.beir import _open_index, load_beir  # noqa: E402
from kbcli.types import SearchOptions  # noqa: E402

PAIRS = {
    "en": (("scifact", "train"), ("cranfield", "test")),
    "zh": (("cmrc2018-dev-retrieval", "test"), ("drcd-retrieval", "dev")),
}
THRESHOLDS = [0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7]
K = 8


def measure(kb, data, questions, mode: str, judged: bool) -> tuple[list[list[tuple]], float]:
    """Per question, its hits as ``(coverage, relevant, result)``; and ms per question."""
    options = SearchOptions(k=K, mode=mode)
    out, started = [], time.perf_counter()
    for qid in questions:
        chosen = select_evidence(kb, data.queries[qid], options, 0.0)
        rels = data.qrels.get(qid, {}) if judged else {}
        out.append(
            [
                (c, rels.get(str(r.document.metadata.get("doc_id")), 0) > 0, r)
                for r, c in chosen.passed
            ]
        )
    return out, 1000 * (time.perf_counter() - started) / max(1, len(questions))


def rates(hits: list[list[tuple]], threshold: float, settings: AnswerConfig) -> dict:
    answered = relevant = 0
    for one in hits:
        passed = [(r, c) for c, _rel, r in one if c >= threshold]
        if not passed:
            continue
        answered += 1
        given = {e.id for e in budget_evidence(passed, settings.max_evidence)}
        relevant += any(rel and r.document.id in given for _c, rel, r in one)
    n = max(1, len(hits))
    return {"answered": answered / n, "refused": 1 - answered / n, "with_judged": relevant / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "eval")
    parser.add_argument("--queries", type=int, default=300, help="questions per set (sampled)")
    parser.add_argument("--all", action="store_true", help="every judged question")
    parser.add_argument("--modes", default="keyword,hybrid")
    parser.add_argument("--pairs", default="en,zh", help="en (scifact, cranfield), zh (cmrc, drcd)")
    parser.add_argument(
        "--flat", action="store_true", help="every term weighs 1 (to compare with idf weights)"
    )
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = AnswerConfig()
    config = load_config()
    tmp = tempfile.TemporaryDirectory(prefix="kb-bench-ask-")
    db_dir = args.db_dir or Path(tmp.name)
    db_dir.mkdir(parents=True, exist_ok=True)
    if args.flat:
        flatten_weights()
    report: dict = {"machine": machine_info(), "k": K, "flat": args.flat, "rows": []}
    for pair in (PAIRS[name] for name in args.pairs.split(",")):
        loaded = {name: load_beir(args.data / name, split) for name, split in pair}
        kbs = {
            name: _open_index(db_dir / f"{name}.db", loaded[name], config, None, "keyword", None)
            for name in loaded
        }
        for (asked, _), (other, _) in (pair, pair[::-1]):
            data = loaded[asked]
            judged = [
                q
                for q, rels in data.qrels.items()
                if q in data.queries and any(g > 0 for g in rels.values())
            ]
            if not args.all and len(judged) > args.queries:
                judged = sorted(random.Random(7).sample(judged, args.queries))
            for mode in args.modes.split(","):
                inside, ms = measure(kbs[asked], data, judged, mode, True)
                outside, ms_out = measure(kbs[other], data, judged, mode, False)
                by_threshold = []
                for t in THRESHOLDS:
                    answerable, unanswerable = (
                        rates(inside, t, settings),
                        rates(outside, t, settings),
                    )
                    by_threshold.append(
                        {
                            "min_coverage": t,
                            "answerable_refused": answerable["refused"],
                            "answerable_with_judged": answerable["with_judged"],
                            "unanswerable_answered": unanswerable["answered"],
                        }
                    )
                report["rows"].append(
                    {
                        "questions": asked,
                        "against": other,
                        "mode": mode,
                        "n": len(judged),
                        "ms_per_question": round((ms + ms_out) / 2, 1),
                        "by_threshold": by_threshold,
                    }
                )
                if not args.json:
                    print_row(report["rows"][-1])
        for kb in kbs.values():
            kb.close()
    if args.json:
        print(json.dumps(report, indent=2))
    tmp.cleanup()


def flatten_weights() -> None:
    """Make every question term weigh 1 in kb ask's floor (this process only)."""
    from kbcli.agent import answer

    class Flat(answer.TermWeights):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.weights = {term: 1.0 for term in self.weights}

    answer.TermWeights = Flat


def print_row(row: dict) -> None:
    print(
        f"\n{row['questions']} questions ({row['n']}), mode {row['mode']}; unanswerable = "
        f"asked against {row['against']}; {row['ms_per_question']} ms per question (search + floor)"
    )
    print("min_coverage | answerable: refused | answered with a judged passage | "
          "unanswerable: answered")  # fmt: skip
    for r in row["by_threshold"]:
        print(
            f"{r['min_coverage']:>12.2f} | {r['answerable_refused']:>20.1%} | "
            f"{r['answerable_with_judged']:>30.1%} | {r['unanswerable_answered']:>22.1%}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
