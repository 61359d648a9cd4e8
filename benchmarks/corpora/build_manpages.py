"""Build the man-page collection (BEIR layout) from this machine's section-1 man pages.

    python benchmarks/corpora/build_manpages.py            # writes benchmarks/corpora/manpages/

Every page in /usr/share/man/man1 except the generated floods (``gcloud*``: 16,631 pages, and
``git-*`` subcommands: 150; ``git`` itself is kept) is rendered with ``man -l`` and ``col -b``
at 100 columns. The header and footer lines are dropped, each top-level section (``NAME``,
``SYNOPSIS``, ``DESCRIPTION`` ...) becomes a ``## `` heading, the text is dedented and cut at a
line end before MAX_CHARS characters; aliases rendering the same page (gzip, gunzip, zcat) are
kept once. The document's title is the command name (the file name up to ``.1``).
``corpus.jsonl.gz`` holds the pages; the queries and graded judgments are written by hand in
``queries.jsonl`` and ``qrels/test.tsv`` (not by this script).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

MAN_DIR = Path("/usr/share/man/man1")
OUT = Path(__file__).resolve().parent / "manpages"
MAX_CHARS = 6000
_SECTION = re.compile(r"^[A-Z][A-Z0-9 ,/&()-]*$")


def selected(names: list[str]) -> list[Path]:
    """The pages kept: no gcloud pages, no git subcommands, one file per command name."""
    out = {}
    for name in sorted(names):
        stem = name.split(".1")[0]
        if stem.startswith("gcloud") or stem.startswith("git-"):
            continue
        out.setdefault(stem, MAN_DIR / name)
    return [out[k] for k in sorted(out)]


def render(path: Path) -> str:
    """The page as plain text (``man -l`` then ``col -b``), or '' when man fails."""
    env = {**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "", "LC_ALL": "C.UTF-8"}
    try:
        shown = subprocess.run(
            ["man", "-l", str(path)], capture_output=True, env=env, timeout=30, check=True
        ).stdout
        plain = subprocess.run(["col", "-b"], input=shown, capture_output=True, check=True)
    except (subprocess.SubprocessError, OSError):
        return ""
    return plain.stdout.decode("utf-8", "replace")


def to_markdown(rendered: str) -> str:
    """Sections as ``## NAME`` headings, bodies dedented, capped at MAX_CHARS."""
    lines = rendered.splitlines()[1:-1]  # the "TAR(1) ... TAR(1)" header and the footer
    out: list[str] = []
    for line in lines:
        if line and not line[0].isspace() and _SECTION.match(line.strip()):
            out += ["", f"## {line.strip().title()}", ""]
        else:
            out.append(line[7:] if line.startswith(" " * 7) else line.strip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    if len(text) > MAX_CHARS:
        text = text[: text.rfind("\n", 0, MAX_CHARS)].rstrip()
    return text


def distinct(rows: list[dict]) -> list[dict]:
    """One page per text: aliases rendering the same page (gzip, gunzip, zcat) keep the name
    the page's NAME section lists first, else the shortest name."""
    by_text: dict[str, list[dict]] = {}
    for row in rows:
        by_text.setdefault(row["text"], []).append(row)
    kept = []
    for group in by_text.values():
        names = {r["_id"]: r for r in group}
        m = re.search(r"## Name\n\n([^\s,]+)", group[0]["text"])
        first = m.group(1) if m else None
        kept.append(names.get(first) or min(group, key=lambda r: (len(r["_id"]), r["_id"])))
    return sorted(kept, key=lambda r: r["_id"])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    pages = selected(os.listdir(MAN_DIR))
    rows = []
    for i, path in enumerate(pages, 1):
        text = to_markdown(render(path))
        if len(text) > 50:
            name = path.name.split(".1")[0]
            rows.append({"_id": name, "title": name, "text": text})
        if i % 100 == 0:
            print(f"{i}/{len(pages)}", file=sys.stderr)
    rows = distinct(rows)
    with gzip.open(OUT / "corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} pages -> {OUT / 'corpus.jsonl.gz'}", file=sys.stderr)


if __name__ == "__main__":
    main()
