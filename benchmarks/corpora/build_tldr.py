"""Build the tldr-pages collections (BEIR layout) from the shared tarball and the judged
queries kept beside this script.

    python benchmarks/corpora/build_tldr.py [--tarball PATH]

Writes, for ``tldr`` (English, ``pages/``) and ``tldr-zh`` (Chinese, ``pages.zh/``):

- ``corpus.jsonl.gz``: one document per page, ``_id`` ``platform/name`` (``common/tar``),
  ``title`` the page's name, ``text`` the page without its ``# name`` line;
- ``queries.jsonl`` (``_id``, ``text``, ``category``) and ``qrels/test.tsv``: the judgments of
  ``judgments.jsonl`` (written by hand against the page list, before any ranking run) with each
  expected page name expanded to the pages of that name under ``common``, ``linux`` and
  ``osx`` (an alias page and the real one are both right);
- ``live.jsonl``: the same judgments in ``kb eval --queries`` form (``query``, ``expected``
  as ``{"common/tar.md": 2}``), for an index of the unpacked ``pages`` folder.

The corpus files are derived (CC BY 4.0, tldr-pages contributors) and not kept in git.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SETS = {"tldr": "pages", "tldr-zh": "pages.zh"}
PLATFORMS = ("common", "linux", "osx")


def default_tarball() -> Path:
    """``shared/corpora/tldr-pages.tar.gz`` beside the repository (or beside its parent, for a
    worktree one level further down)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        candidate = base / "shared" / "corpora" / "tldr-pages.tar.gz"
        if candidate.is_file():
            return candidate
    return ROOT.parent / "shared" / "corpora" / "tldr-pages.tar.gz"


def read_pages(tarball: Path, folder: str) -> dict[str, str]:
    """``{"common/tar": markdown}`` for every page under ``folder/`` in the tarball."""
    pages: dict[str, str] = {}
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or parts[0] != folder:
                continue
            if not parts[2].endswith(".md"):
                continue
            fh = tar.extractfile(member)
            if fh is not None:
                pages[f"{parts[1]}/{parts[2][:-3]}"] = fh.read().decode("utf-8")
    return pages


def document(page_id: str, markdown: str) -> dict[str, str]:
    lines = markdown.splitlines()
    title = page_id.split("/", 1)[1]
    if lines and lines[0].startswith("# "):
        title, lines = lines[0][2:].strip(), lines[1:]
    return {"_id": page_id, "title": title, "text": "\n".join(lines).strip()}


def build(name: str, folder: str, tarball: Path) -> None:
    out = HERE / name
    pages = read_pages(tarball, folder)
    with gzip.open(out / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        for page_id in sorted(pages):
            fh.write(json.dumps(document(page_id, pages[page_id]), ensure_ascii=False) + "\n")
    judged = [json.loads(line) for line in (out / "judgments.jsonl").open(encoding="utf-8")]
    (out / "qrels").mkdir(exist_ok=True)
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
        (out / "live.jsonl").open("w", encoding="utf-8") as live,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for row in judged:
            expected: dict[str, int] = {}
            for tool, grade in row["expected"].items():
                found = [f"{p}/{tool}" for p in PLATFORMS if f"{p}/{tool}" in pages]
                if not found:
                    raise SystemExit(f"{name} {row['_id']}: no page named {tool}")
                for page_id in found:
                    expected[page_id] = max(grade, expected.get(page_id, 0))
            queries.write(
                json.dumps(
                    {"_id": row["_id"], "text": row["text"], "category": row["category"]},
                    ensure_ascii=False,
                )
                + "\n"
            )
            for page_id, grade in expected.items():
                qrels.write(f"{row['_id']}\t{page_id}\t{grade}\n")
            live.write(
                json.dumps(
                    {
                        "id": row["_id"],
                        "query": row["text"],
                        "category": row["category"],
                        "expected": {f"{p}.md": g for p, g in expected.items()},
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    print(f"{name}: {len(pages)} pages, {len(judged)} queries -> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tarball", type=Path, default=default_tarball())
    args = parser.parse_args()
    for name, folder in SETS.items():
        build(name, folder, args.tarball)


if __name__ == "__main__":
    main()
