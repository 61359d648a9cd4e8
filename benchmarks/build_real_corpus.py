"""A large corpus of real text for measuring approximate search on real embeddings.

Writes a BEIR folder (``corpus.jsonl``, ``queries.jsonl``) from text every machine like this one
has: the English eval collections (SciFact, Cranfield, CISI), the man-page corpus, then Python's
own standard library sources, the documentation files (.md, .rst, .txt) of the installed
packages and their sources, then the system's text files under /usr/share/doc and its C headers
(/usr/include), in a fixed order, up to ``--chars`` characters. In the development venv the
documentation files end at 44M characters (10,953 documents), the package sources at 299M
(30,425 documents) and everything holds 428M (40,615 documents, 1,259,399 chunks; the 1M-th
chunk is in document 33,673; files over 200k characters are left out). Queries are the
collections' real queries, interleaved (their relevance judgements are not needed: the
ground truth of an approximate search is exact search; SciFact's train judgements are copied
only because a BEIR folder has them). ``bench_ann.py --dataset OUT --docs N`` then embeds it
with the local model.

    python benchmarks/build_real_corpus.py --out /tmp/realcorpus --chars 60000000
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
MANPAGES = ROOT / "benchmarks" / "corpora" / "manpages"
COLLECTIONS = ("scifact", "cranfield", "cisi")
MAX_FILE_CHARS = 200_000  # a generated file (a table, a font) says little per character


def _jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _files() -> Iterator[tuple[str, str]]:
    """(name, text) of the stdlib sources, installed packages' documentation files, then
    their sources."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    purelib = Path(sysconfig.get_paths()["purelib"])
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" not in path.parts:
            yield f"stdlib/{path.relative_to(stdlib)}", path.read_text("utf-8", "replace")
    for path in sorted(purelib.rglob("*")):
        if path.suffix in (".md", ".rst", ".txt") and path.is_file():
            yield f"packages/{path.relative_to(purelib)}", path.read_text("utf-8", "replace")
    for path in sorted(purelib.rglob("*.py")):
        yield f"packages/{path.relative_to(purelib)}", path.read_text("utf-8", "replace")
    # last, so that the documents before them stay the same: enough text for 1M chunks
    for root in (Path("/usr/share/doc"), Path("/usr/include")):
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.suffix != ".gz":
                data = path.read_bytes()
                if b"\0" not in data:  # text only
                    yield str(path), data.decode("utf-8", "replace")


def documents() -> Iterator[dict]:
    """Every document in the fixed order, ``_id`` prefixed by its origin."""
    for name in COLLECTIONS:
        for doc in _jsonl(EVAL / name / "corpus.jsonl"):
            title = doc.get("title", "")
            yield {"_id": f"{name}:{doc['_id']}", "title": title, "text": doc["text"]}
    for doc in _jsonl(MANPAGES / "corpus.jsonl.gz"):
        yield {"_id": f"man:{doc['_id']}", "title": doc.get("title", ""), "text": doc["text"]}
    for name, text in _files():
        if text.strip() and len(text) <= MAX_FILE_CHARS:
            yield {"_id": name, "title": name, "text": text}


def queries() -> list[dict]:
    """The collections' queries, interleaved so any prefix mixes them."""
    lists = [list(_jsonl(EVAL / name / "queries.jsonl")) for name in COLLECTIONS]
    lists.append(list(_jsonl(MANPAGES / "queries.jsonl")))
    out = []
    for i in range(max(len(q) for q in lists)):
        for origin, q in zip((*COLLECTIONS, "man"), lists):
            if i < len(q):
                out.append({"_id": f"{origin}:{q[i]['_id']}", "text": q[i]["text"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--chars", type=int, default=60_000_000, help="stop after this much text")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = chars = 0
    with open(args.out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for doc in documents():
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
            n += 1
            chars += len(doc["text"])
            if chars >= args.chars:
                break
    with open(args.out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in queries():
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    (args.out / "qrels").mkdir(exist_ok=True)
    with open(EVAL / "scifact" / "qrels" / "train.tsv") as src:
        lines = src.read().splitlines()
    with open(args.out / "qrels" / "train.tsv", "w") as fh:
        fh.write(lines[0] + "\n")
        for line in lines[1:]:
            q, d, score = line.split("\t")
            fh.write(f"scifact:{q}\tscifact:{d}\t{score}\n")
    print(f"{n} documents, {chars:,} characters -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
