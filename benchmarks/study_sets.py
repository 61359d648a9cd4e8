"""The judged collections the semantic-route study reads (:mod:`semantic_study`) and the
routes it records, shared with the fusion replay (:mod:`fusion_variants`)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT / "benchmarks" / "corpora"
SETS = {
    "scifact": "train",
    "cranfield": "test",
    "cmrc2018-dev-retrieval": "test",
    "drcd-retrieval": "dev",
    "manpages": "test",
    "tldr": "test",
    "tldr-zh": "test",
}
# Unrelated real questions for each set: the queries of a collection about something else.
UNRELATED = {
    "scifact": "tldr",
    "cranfield": "tldr",
    "manpages": "scifact",
    "tldr": "scifact",
    "cmrc2018-dev-retrieval": "tldr",
    "drcd-retrieval": "tldr",
    "tldr-zh": "drcd-retrieval",
}
POOL = 100  # chunks recorded per route and query
UNRELATED_QUERIES = 200


def default_data() -> Path:
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return ROOT.parent / "shared" / "eval"


def set_dir(data: Path, name: str) -> Path:
    own = CORPORA / name
    if own.is_dir():
        if name.startswith("tldr") and not (own / "corpus.jsonl.gz").exists():
            import subprocess

            subprocess.run([sys.executable, str(CORPORA / "build_tldr.py")], check=True)
        return own
    return data / name


def categories(folder: Path) -> dict[str, str]:
    """Query id -> category (``queries.jsonl``'s ``category``; man pages: named / task)."""
    out: dict[str, str] = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if "category" in row:
                out[str(row["_id"])] = row["category"]
    if folder.name == "manpages":
        out = {q: manpage_category(folder, q) for q in load_queries(folder)}
    return out


def load_queries(folder: Path) -> dict[str, str]:
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        return {str(r["_id"]): r["text"] for r in map(json.loads, fh)}


def manpage_category(folder: Path, qid: str) -> str:
    """The man-page README's split: 84 task queries that do not name the tool, 26 that do
    (the query contains the name of its grade-2 page)."""
    global _MAN_QRELS
    if _MAN_QRELS is None:
        from kbcli.eval.beir import load_qrels

        _MAN_QRELS = load_qrels(folder / "qrels" / "test.tsv")
    text = load_queries(folder)[qid].lower().split()
    named = any(g == 2 and doc.lower() in text for doc, g in _MAN_QRELS.get(qid, {}).items())
    return "named" if named else "paraphrase"


_MAN_QRELS: dict | None = None


CHECK = ROOT / "benchmarks" / "semantic-check.json"


def load_routes(cache: Path, name: str, embedder: str) -> dict[str, Any] | None:
    path = cache / f"{name}-{embedder}.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)
