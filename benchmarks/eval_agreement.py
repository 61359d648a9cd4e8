"""kb eval --queries against kb search, -k 5 against -k 100, and eval's latency figures.

For each ``--k`` and mode, every question of ``--queries`` is evaluated with
``kbcli.eval.questions.evaluate_questions`` (what ``kb eval --queries`` runs) and searched with
``kbcli.search.query.search(..., by="file")`` at ``-k K`` (what ``kb search -k K`` runs); a question
disagrees when one of its expected pages has another rank among the first K files in the two
(eval's rank beyond K counts as not shown). Printed per mode and k: the questions that
disagree, and hit@1 as eval reports it and as kb search's lists give it. Then the latency
figures of the first evaluation of this process (cold: it pays the model load unless eval
keeps it apart): mean, p50, p95 per question, the model load and first search when reported.

With ``--depth SHALLOW,DEEP`` (e.g. ``5,100``), per mode: the questions whose files at
``kb search -k SHALLOW`` are not the first SHALLOW files at ``-k DEEP`` (a user asking for more
results must see the same top, followed by more), and the questions whose chunks from the
library's ``KnowledgeBase.search(k=SHALLOW)`` are not the first of ``search(k=DEEP)``.
``--k ''`` skips the eval comparison.

Run it with ``PYTHONPATH`` naming the source tree to measure (before/after a change)::

    PYTHONPATH=src python benchmarks/eval_agreement.py --db tldr.db \\
        --queries benchmarks/corpora/tldr/live.jsonl --k 5,10,20
    PYTHONPATH=src python benchmarks/eval_agreement.py --db tldr.db \\
        --queries benchmarks/corpora/tldr/live.jsonl --k '' --modes hybrid --depth 5,100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if not os.environ.get("PYTHONPATH"):  # this tree's kbcli, unless told which
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--modes", default="keyword,semantic,hybrid")
    ap.add_argument("--k", default="5,10,20", help="cut-offs, comma-separated")
    ap.add_argument("--depth", default="", help="SHALLOW,DEEP: is -k SHALLOW the top of -k DEEP")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    import kbcli
    from kbcli.eval.questions import evaluate_questions, load_questions
    from kbcli.knowledge_base import KnowledgeBase
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    questions = load_questions(args.queries)
    modes = [m for m in args.modes.split(",") if m]
    base = Path(args.queries).resolve().parent
    out: dict[str, Any] = {
        "source": str(Path(kbcli.__file__).parent),
        "load": os.getloadavg(),
        "questions": len(questions),
        "agreement": [],
        "depth": [],
        "latency": None,
    }
    kb = KnowledgeBase.open(args.db, create=False)
    try:
        if args.depth:
            shallow, deep = (int(x) for x in args.depth.split(","))
            for mode in modes:
                out["depth"].append(depth_row(kb, questions, mode, shallow, deep))
        for k in [int(x) for x in args.k.split(",") if x]:
            started = time.perf_counter()
            result = evaluate_questions(kb, questions, modes=modes, k=k, base=base)
            took = time.perf_counter() - started
            if out["latency"] is None:  # the cold run
                out["latency"] = {
                    "load_ms": result.get("load_ms"),
                    "modes": {m: result["modes"][m]["latency_ms"] for m in modes},
                    "run_s": round(took, 2),
                }
            for mode in modes:
                disagree, shown_hits = [], 0
                for q, row in zip(questions, result["modes"][mode]["questions"]):
                    hits = search(kb, q.text, SearchOptions(k=k, mode=mode), by="file")
                    files = [h.source or "" for h in hits]
                    for path, rank in row["ranks"].items():
                        tail = "/" + path.split(":")[0]
                        place = next((i for i, s in enumerate(files, 1) if s.endswith(tail)), None)
                        if (rank if rank is not None and rank <= k else None) != place:
                            disagree.append(q.id)
                            break
                    top = max(q.expected.values())
                    best = [p for p, g in q.expected.items() if g == top]
                    shown_hits += bool(files) and any(files[0].endswith("/" + p) for p in best)
                out["agreement"].append({
                    "mode": mode, "k": k, "disagree": len(disagree), "ids": disagree[:12],
                    "hit@1 eval": result["modes"][mode]["metrics"]["hit@1"]["mean"],
                    "hit@1 search": round(shown_hits / len(questions), 4),
                })  # fmt: skip
    finally:
        kb.close()
    if args.json:
        print(json.dumps(out))
        return
    print(f"kbcli from {out['source']}; {out['questions']} questions; "
          f"load average {', '.join(f'{x:.2f}' for x in out['load'])}")  # fmt: skip
    for row in out["depth"]:
        ids = f" ({', '.join(row['ids'])})" if row["ids"] else ""
        print(f"{row['mode']:<9} kb search -k {row['shallow']} is not the top of -k "
              f"{row['deep']} for {row['files differ']:>3} of {out['questions']} questions{ids}; "
              f"library search(k={row['shallow']}) not the top of k={row['deep']}: "
              f"{row['chunks differ']}")  # fmt: skip
    if not out["agreement"]:
        return
    for row in out["agreement"]:
        ids = f" ({', '.join(row['ids'])})" if row["ids"] else ""
        print(f"{row['mode']:<9} k={row['k']:<3} disagree {row['disagree']:>3}{ids}; hit@1 "
              f"eval {row['hit@1 eval']:.3f}, kb search {row['hit@1 search']:.3f}")  # fmt: skip
    lat = out["latency"]
    print(f"cold run ({lat['run_s']} s): model load {lat['load_ms'] or 'not reported'}")
    for mode, figures in lat["modes"].items():
        first = f", first search {figures['first']} ms" if "first" in figures else ""
        print(f"  {mode:<9} mean {figures['mean']} ms, p50 {figures['p50']} ms, "
              f"p95 {figures['p95']} ms, max {figures['max']} ms{first}")  # fmt: skip
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def depth_row(kb: Any, questions: list[Any], mode: str, shallow: int, deep: int) -> dict[str, Any]:
    """How many questions rank differently at ``-k shallow`` and ``-k deep`` (see the module
    docstring): files of ``kb search`` (``kbcli.search.query.search`` by file) and chunks of the
    library's ``search``."""
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    files_differ, chunks_differ = [], []
    for q in questions:
        lists = []
        for k in (shallow, deep):
            hits = search(kb, q.text, SearchOptions(k=k, mode=mode), by="file", locate=False)
            lists.append([h.source or "" for h in hits])
        if lists[0] != lists[1][:shallow]:
            files_differ.append(q.id)
        if '"' in q.text or any(w.startswith("-") for w in q.text.split()):
            continue  # the library's search takes no query syntax
        ids = [[r.document.id for r in kb.search(q.text, k=k, mode=mode)] for k in (shallow, deep)]
        if ids[0] != ids[1][:shallow]:
            chunks_differ.append(q.id)
    return {"mode": mode, "shallow": shallow, "deep": deep, "files differ": len(files_differ),
            "ids": files_differ[:12], "chunks differ": len(chunks_differ)}  # fmt: skip


if __name__ == "__main__":
    main()
