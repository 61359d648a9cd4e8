"""Output for the ``kb`` command: Rich tables and progress, JSON, messages on stderr.

Results go to stdout; notes, warnings, errors and progress go to stderr. ``--json`` output is
plain ``json.dumps`` on stdout and nothing else. Rich is imported only by the functions that
draw tables or progress, so JSON output and error messages stay cheap.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

SNIPPET_WIDTH = 160
HIGHLIGHT_STYLE = "bold yellow"


# --- messages (stderr, no Rich needed) --------------------------------------------------------


def error(message: str) -> None:
    """One ``Error: ...`` line on stderr."""
    typer.secho("Error: ", fg="red", bold=True, err=True, nl=False)
    typer.echo(message, err=True)


def warning(message: str) -> None:
    """One ``Warning: ...`` line on stderr."""
    typer.secho("Warning: ", fg="yellow", err=True, nl=False)
    typer.echo(message, err=True)


def message(text: str) -> None:
    """An informational line on stderr (notes, "nothing found")."""
    typer.echo(text, err=True)


def result(text: str) -> None:
    """A plain result line on stdout."""
    typer.echo(text)


def print_json(data: Any, *, one_line: bool = False) -> None:
    """``data`` as JSON on stdout (the only thing ``--json`` writes there); ``one_line`` for
    logs that take one line per run."""
    indent = None if one_line else 2
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=indent, default=str) + "\n")
    sys.stdout.flush()


def print_jsonl(items: Sequence[Any]) -> None:
    """One JSON object per line on stdout."""
    for item in items:
        sys.stdout.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def stderr_is_terminal() -> bool:
    """True when stderr is an interactive terminal (progress bars are drawn only then)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# --- text helpers -----------------------------------------------------------------------------


def human_size(n: int | float) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover


def shorten_source(source: Any, width: int = 48) -> str:
    """A source path as the user would type it: relative to the current folder, or ``~/...``;
    long paths keep their tail (``.../folder/file.md``)."""
    if source is None or source == "":
        return "-"
    text = _as_typed(str(source))
    if len(text) <= width:
        return text
    parts = Path(text).parts
    tail = str(Path(*parts[-2:])) if len(parts) >= 2 else parts[-1]
    if len(tail) + 4 > width:
        return "…" + text[-(width - 1) :]
    return "…/" + tail


def display_path(source: Any) -> str:
    """A source as the user would type it, whole: relative to the current folder or ``~/...``
    (both open in a shell), never cut, and shell-quoted by :func:`quote_name` when it holds a
    newline or another control character."""
    if source is None or source == "":
        return "-"
    return quote_name(_as_typed(str(source)))


def _as_typed(text: str) -> str:
    """An absolute path relative to the current folder, else to ``~/``; anything else as is."""
    path = Path(text)
    if path.is_absolute():
        for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
            try:
                return prefix + str(path.relative_to(base))
            except ValueError:
                continue
    return text


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b", "\f": "\\f",
            "\v": "\\v", "\x1b": "\\e", "'": "\\'", "\\": "\\\\"}  # fmt: skip


def needs_quoting(name: str) -> bool:
    """True when ``name`` would not read back as itself one per line: it holds a newline, a
    control or other unprintable character, a byte that is not UTF-8, or starts like a
    quoted name (``$'``)."""
    return not name.isprintable() or name.startswith("$'")


def quote_name(name: str) -> str:
    """``name`` as is, or, when :func:`needs_quoting`, in the shell's ANSI-C quoting
    (``$'docs/a\\nb.md'``, read back by bash, zsh and ksh): ``\\n \\t \\e``..., and ``\\xHH``
    for each byte of another unprintable character or of a byte that is not UTF-8, as the file
    system holds it. Like ``ls --quoting-style=shell-escape``, only for such names."""
    if not needs_quoting(name):
        return name
    out = []
    for ch in name:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:  # its bytes: the same in every locale (what \u gives depends on the shell's)
            try:
                raw = ch.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate no file system name holds
                out.append(f"\\u{code:04x}")
                continue
            out.extend(f"\\x{byte:02x}" for byte in raw)
    return "$'" + "".join(out) + "'"


def file_names(sources: Sequence[str], null: bool = False) -> None:
    """``--format files``: each source once per line (quoted by :func:`quote_name` where a
    line could not hold it, with a warning once), or with ``null`` each followed by a NUL byte
    as the file system spells it (``find -print0``, ``xargs -0``)."""
    names = list(dict.fromkeys(sources))
    if null:
        out = sys.stdout.buffer
        for name in names:
            try:
                raw = os.fsencode(name)  # the bytes of the file's name
            except UnicodeEncodeError:  # not a file system name (a lone surrogate)
                raw = name.encode("utf-8", "backslashreplace")
            out.write(raw + b"\0")
        out.flush()
        return
    quoted = 0
    for name in names:
        quoted += needs_quoting(name)
        result(quote_name(name))
    if quoted:
        warning(
            f"{quoted} file name{_s(quoted)} hold{'s' if quoted == 1 else ''} a newline or "
            "another control character: shown shell-quoted as $'...'; -0 prints exact names "
            "separated by NUL bytes (xargs -0)"
        )


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def term_pattern(terms: Sequence[str]) -> re.Pattern[str] | None:
    """A case-insensitive pattern for query terms: a word-like term matches at the start of a
    word (``password`` highlights ``passwords``); CJK terms match anywhere."""
    alternatives = []
    for term in sorted({t for t in terms if t}, key=len, reverse=True):
        escaped = re.escape(term)
        if _CJK.search(term) or not re.match(r"\w", term):
            alternatives.append(escaped)
        else:
            alternatives.append(rf"(?<!\w){escaped}\w*")
    if not alternatives:
        return None
    return re.compile("|".join(alternatives), re.IGNORECASE)


def snippet(
    text: str, pattern: re.Pattern[str] | None = None, width: int = SNIPPET_WIDTH
) -> tuple[str, list[tuple[int, int]]]:
    """About ``width`` characters of ``text`` around the first match of ``pattern`` (the start
    when nothing matches), whitespace collapsed, ``…`` where cut. Returns the snippet and the
    spans of every match inside it."""
    flat = " ".join(text.split())
    first = pattern.search(flat) if pattern else None
    start = 0
    if first and first.start() > width // 3:
        start = first.start() - width // 3
        space = flat.rfind(" ", 0, start + 1)
        start = space + 1 if space > start - 20 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    body = flat[start:end]
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(flat) else ""
    out = prefix + body + suffix
    spans = []
    if pattern:
        spans = [(m.start() + len(prefix), m.end() + len(prefix)) for m in pattern.finditer(body)]
    return out, [s for s in spans if s[1] > s[0]]


def _rich_snippet(text: str, pattern: re.Pattern[str] | None, width: int = SNIPPET_WIDTH) -> Any:
    from rich.text import Text

    plain, spans = snippet(text, pattern, width)
    rich_text = Text(plain)
    for start, end in spans:
        rich_text.stylize(HIGHLIGHT_STYLE, start, end)
    return rich_text


# --- commands' output -------------------------------------------------------------------------


def search_json(results: Sequence[Any], explain: bool = False) -> list[dict[str, Any]]:
    """The JSON shape of search results: ``{id, score, text, metadata}`` (+ ``explain``)."""
    out = []
    for r in results:
        item = {
            "id": r.document.id,
            "score": r.score,
            "text": r.document.text,
            "metadata": r.document.metadata,
        }
        if explain:
            item["explain"] = r.explain
        out.append(item)
    return out


def no_results_text(results: Any) -> str:
    """What an empty search says; a reranker's refusal also says why."""
    if getattr(results, "refused", False):
        best = results.best_relevance
        return (
            f"No relevant knowledge found: none of the {results.candidates} candidates reached "
            f"min_relevance {results.min_relevance:g}"
            + (f" (best {best:.3f})." if best is not None else ".")
        )
    return "No relevant knowledge found."


SEARCH_FORMATS = ("table", "json", "jsonl", "csv", "md", "files")


def hit_json(hit: Any, unit: str, explain: bool = False) -> dict[str, Any]:
    """One search hit as JSON: ``{id, score, text, metadata, unit, location, line}``, with
    ``matched_chunks`` for file hits and ``explain`` when asked."""
    r = hit.result
    item: dict[str, Any] = {
        "id": r.document.id,
        "score": r.score,
        "text": r.document.text,
        "metadata": r.document.metadata,
        "unit": unit,
        "location": hit.location,
        "line": hit.line,
    }
    if unit == "file":
        item["matched_chunks"] = hit.matched
    if explain:
        item["explain"] = r.explain
    return item


def search_output(
    hits: Sequence[Any], fmt: str, unit: str, explain: bool, null: bool = False
) -> None:
    """Search hits on stdout as ``fmt`` (every format but ``table``); ``null``: ``files``
    separated by NUL bytes."""
    if fmt == "json":
        print_json([hit_json(h, unit, explain) for h in hits])
    elif fmt == "jsonl":
        print_jsonl([hit_json(h, unit, explain) for h in hits])
    elif fmt == "files":
        file_names([h.source for h in hits if h.source is not None], null)
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["rank", "score", "location", "source", "line", "chunk", "matched", "id"]
                        + ["text"])  # fmt: skip
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            writer.writerow(
                [rank, f"{h.result.score:.4f}", h.location, h.source or "", h.line or "",
                 meta.get("chunk_index", ""), h.matched, h.result.document.id,
                 " ".join(h.result.document.text.split())]
            )  # fmt: skip
    elif fmt == "md":
        result(f"| # | Score | Location | {'Chunks' if unit == 'file' else 'Chunk'} | Text |")
        result("|---:|---:|---|---:|---|")
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            text, _ = snippet(h.result.document.text, None, SNIPPET_WIDTH)
            count = str(h.matched) if unit == "file" else _chunk_label(meta)
            cells = [str(rank), f"{h.result.score:.3f}", f"`{h.location}`", count, text]
            result("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        raise ValueError(f"unknown format {fmt!r}")


MIN_SNIPPET = 20  # narrower than this, the snippet goes under the location instead


def search_table(
    hits: Sequence[Any],
    terms: Sequence[str],
    explain: bool = False,
    unit: str = "chunk",
    console: Any = None,
) -> None:
    """Rank, score, ``path:line``, chunk (or matched chunks) and a highlighted snippet for each
    hit. The location is never cut or wrapped (``$EDITOR +LINE path`` must copy whole): the
    snippet takes the width left; when less than :data:`MIN_SNIPPET` is left, each hit is a
    block instead, its location on a line of its own. ``explain`` goes under the snippet."""
    from rich.console import Group
    from rich.text import Text

    console = console or _console()
    pattern = term_pattern(terms)
    rows = []
    for rank, hit in enumerate(hits, 1):
        r = hit.result
        meta = r.document.metadata
        location = display_path(meta.get("source")) + (
            f":{hit.line}" if hit.line is not None else ""
        )
        count = str(hit.matched) if unit == "file" else _chunk_label(meta)
        if unit == "file" and meta.get("page") is not None:
            count += f" (p. {meta['page']})"
        body: Any = _rich_snippet(r.document.text, pattern)
        if explain:
            body = Group(body, Text(explain_text(r.explain), style="dim"))
        rows.append((str(rank), f"{r.score:.3f}", location, count, body))
    header = ("#", "Score", "Location", "Chunks" if unit == "file" else "Chunk")
    if _table_fits(console.width, header, [row[:4] for row in rows]):
        _hits_table(console, header, rows)
    else:
        _hits_blocks(console, unit, rows)


def _table_fits(width: int, header: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
    """True when columns as wide as their longest cell leave :data:`MIN_SNIPPET` for a last
    column (a Rich table: one space of padding each side, a rule between columns)."""
    from rich.cells import cell_len

    widths = [max(cell_len(str(cell)) for cell in column) for column in zip(header, *rows)]
    borders = len(widths) + 2
    return sum(widths) + 2 * (len(widths) + 1) + borders + MIN_SNIPPET <= width


def _hits_table(console: Any, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.cells import cell_len
    from rich.table import Table

    table = Table(show_lines=True, expand=False)
    table.add_column(header[0], justify="right", no_wrap=True)
    table.add_column(header[1], justify="right", no_wrap=True)
    longest = max(cell_len(row[2]) for row in rows)
    table.add_column(header[2], no_wrap=True, min_width=longest)
    table.add_column(header[3], justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1, min_width=MIN_SNIPPET)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _hits_blocks(console: Any, unit: str, rows: Sequence[Sequence[Any]]) -> None:
    """A narrow terminal: ``#1  0.873  2 chunks``, the location alone on the next line (the
    terminal may fold it, the text stays one line), the snippet indented under it."""
    from rich.padding import Padding
    from rich.text import Text

    for number, (rank, score, location, count, body) in enumerate(rows):
        if number:
            console.print()
        what = f"chunks {count}" if unit == "file" else f"chunk {count}"
        console.print(Text(f"#{rank}  {score}  {what}", style="bold"), soft_wrap=True)
        console.print(Text(location), soft_wrap=True)
        console.print(Padding(body, (0, 0, 0, 3), expand=False))


def _chunk_label(meta: dict[str, Any]) -> str:
    index = meta.get("chunk_index")
    label = "-" if index is None else str(index)
    if meta.get("page") is not None:
        label += f" (p. {meta['page']})"
    return label


def explain_text(explain: Any) -> str:
    """``--explain`` under a hit, one fact a line, in words: ``keyword #1 (4.187 = chunk
    1.396 + 2.000×file 1.396)``, ``dense not found``, ``alpha 0.001 (keyword-first: ...)``;
    never a Python literal (``True``, ``{...}``, ``[...]``)."""
    if not explain:
        return "-"
    if not isinstance(explain, dict):
        return _fmt(explain)
    note = explain.get("alpha_note")
    lines = []
    for key, value in explain.items():
        if key == "alpha_note" or (key == "keyword_first" and note):
            continue  # said beside alpha
        if isinstance(value, dict) and "rank" in value:
            line = f"{key} #{value['rank']} ({_fmt(value.get('score'))}"
            if "bm25_chunk" in value:
                line += (
                    f" = chunk {_fmt(value['bm25_chunk'])}"
                    f" + {_fmt(value['source_weight'])}×file {_fmt(value['bm25_source'])}"
                )
            lines.append(line + ")")
        elif value is None:
            lines.append(f"{key} not found")
        elif key == "alpha" and note:
            lines.append(f"alpha {_fmt(value)} ({note})")
        elif key == "duplicates" and isinstance(value, list):
            lines.append(f"duplicates {len(value)} collapsed ({_fmt(value)})")
        else:
            lines.append(f"{key} {_fmt(value)}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    """One explain value in words: floats to 3 places, yes/no, lists and mappings spelled."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def numbered(shown: Any) -> None:
    """``kb get`` output: a ``path:line`` header for a chunk, then ``NUMBER  text`` lines."""
    if shown.origin == "chunk":
        meta = shown.metadata or {}
        where = shown.source or "-"
        if isinstance(meta.get("line"), int):
            end = meta.get("line_end")
            where += f":{meta['line']}" + (f"-{end}" if isinstance(end, int) else "")
        result(f"{where} (chunk {_chunk_label(meta)}, id {shown.id})")
        result(shown.lines[0][1] if shown.lines else "")
        return
    width = len(str(max((n for n, _ in shown.lines), default=1)))
    out = sys.stdout
    for number, text in shown.lines:
        out.write(f"{number:>{width}}  {text}\n")
    out.flush()


def documents_json(docs: Sequence[Any]) -> list[dict[str, Any]]:
    """The JSON shape of listed chunks: ``{id, text, metadata, created_at}``."""
    return [
        {
            "id": d.id,
            "text": d.text,
            "metadata": d.metadata,
            "created_at": d.created_at.isoformat() if d.created_at else None,
        }
        for d in docs
    ]


def documents_output(docs: Sequence[Any], fmt: str, null: bool = False) -> None:
    """Listed chunks on stdout as ``fmt`` (every format but ``table``); ``null``: ``files``
    separated by NUL bytes."""
    items = documents_json(docs)
    if fmt == "json":
        print_json(items)
    elif fmt == "jsonl":
        print_jsonl(items)
    elif fmt == "files":
        sources = (d.metadata.get("source") for d in docs)
        file_names([str(source) for source in sources if source is not None], null)
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["id", "source", "line", "chunk", "created_at", "text"])
        for d, item in zip(docs, items):
            meta = d.metadata
            writer.writerow(
                [d.id, meta.get("source", ""), meta.get("line", ""), meta.get("chunk_index", ""),
                 item["created_at"] or "", " ".join(d.text.split())]
            )  # fmt: skip
    elif fmt == "md":
        result("| ID | Location | Chunk | Text |")
        result("|---|---|---:|---|")
        for d in docs:
            meta = d.metadata
            where = str(meta.get("source", "-"))
            if isinstance(meta.get("line"), int):
                where += f":{meta['line']}"
            text, _ = snippet(d.text, None, 80)
            cells = [f"`{d.id}`", f"`{where}`", _chunk_label(meta), text]
            result("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        raise ValueError(f"unknown format {fmt!r}")


def documents_table(docs: Sequence[Any], console: Any = None) -> None:
    """Id, source, chunk index and the start of each chunk; the source is never cut (as in
    :func:`search_table`: a narrow terminal gets one block per chunk)."""
    from rich.cells import cell_len
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = console or _console()
    rows = [
        (d.id, display_path(d.metadata.get("source")), _chunk_label(d.metadata),
         snippet(d.text, None, 80)[0])
        for d in docs
    ]  # fmt: skip
    header = ("ID", "Source", "Chunk")
    if not _table_fits(console.width, header, [row[:3] for row in rows]):
        for number, (doc_id, source, chunk, text) in enumerate(rows):
            if number:
                console.print()
            console.print(Text(f"{doc_id}  chunk {chunk}", style="bold"), soft_wrap=True)
            console.print(Text(source), soft_wrap=True)
            console.print(Padding(Text(text), (0, 0, 0, 3), expand=False))
        return
    table = Table()
    table.add_column("ID", no_wrap=True)
    table.add_column("Source", no_wrap=True, min_width=max(cell_len(row[1]) for row in rows))
    table.add_column("Chunk", justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1, min_width=MIN_SNIPPET)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def describe_embedder(embedder: dict[str, Any] | None) -> str:
    """``openai / text-embedding-3-small (1536 dimensions)``, or ``none yet``."""
    if not embedder:
        return "none yet"
    dim = embedder.get("dimension")
    dims = f" ({dim} dimensions)" if dim else ""
    return f"{embedder.get('provider')} / {embedder.get('model')}{dims}"


def stats_table(stats: dict[str, Any]) -> None:
    """The index's counts and settings, one ``Label  value`` line each (never wrapped, so a
    path stays whole for copying)."""
    from rich.text import Text

    files, sources, chunks = stats.get("files", 0), stats["sources"], stats["chunks"]
    per_file = f", about {chunks / sources:.0f} per source" if sources else ""
    rows = [
        ("Files", f"{files} file{_s(files)} indexed by kb ingest"),
        ("Chunks", f"{chunks} searchable piece{_s(chunks)} of text{per_file}"),
        ("Sources", _sources_words(files, sources)),
        ("Size on disk", human_size(stats["size_bytes"])),
        ("Embedder", describe_embedder(stats.get("embedder"))),
        *_vector_row(stats),
        ("Analyzer", stats.get("analyzer") or "none yet"),
        ("Vocabulary", f"{stats['vocabulary']} terms"),
        ("Last ingest", stats.get("last_ingest") or "never"),
        ("Database", str(stats["path"])),
    ]
    console = _console()
    for key, value in rows:
        line = Text(f"{key:<13} ", style="bold")
        line.append(value)
        console.print(line, soft_wrap=True)


def _vector_row(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """``Vectors`` for ``kb stats`` when the store counts them: how many chunks have one, and
    how many still wait (keyword search has them all already)."""
    vectors, chunks = stats.get("vectors"), stats.get("chunks")
    if not isinstance(vectors, int) or not isinstance(chunks, int):
        return []
    missing = max(0, chunks - vectors)
    text = f"{vectors} of {chunks} chunks"
    if missing:
        text += (
            f"; {missing} still without a vector (keyword search finds them; the next "
            "kb ingest embeds them)"
        )
    return [("Vectors", text)]


def doctor_lines(findings: Sequence[Any]) -> None:
    """One line per ``kb doctor`` check on stdout: ok, repaired (and how) or drift (and why)."""
    for f in findings:
        if f.ok and f.repaired:
            result(f"repaired  {f.check}: {f.detail} -> {f.action}")
        elif f.ok:
            result(f"ok        {f.check}")
        else:
            tail = f" (tried: {f.action})" if f.action else ""
            result(f"drift     {f.check}: {f.detail}{tail}")
    drift = sum(1 for f in findings if not f.ok)
    if drift:
        message(f"{drift} check{'s' if drift != 1 else ''} drifted: run 'kb doctor --repair'")


def config_table(rows: Sequence[dict[str, Any]]) -> None:
    """``kb config``: setting, value and origin, one line each; wraps rather than cuts."""
    from rich.table import Table

    table = Table(box=None, show_header=True, pad_edge=False)
    table.add_column("Setting", no_wrap=True, style="bold")
    table.add_column("Value", overflow="fold")
    table.add_column("From", overflow="fold")
    for row in rows:
        value = row["value"]
        shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
        table.add_row(row["key"], shown, row["origin"])  # as jianmu.yaml writes it
    _console().print(table)


def _sources_words(files: int, sources: int) -> str:
    """What the distinct ``source`` values of the chunks are, against the indexed files."""
    text = f"{sources} distinct source{_s(sources)} (file paths and other source values)"
    if sources == files:
        return f"{sources} (each indexed file is one source)"
    if sources < files:
        empty = files - sources
        return f"{text}; {empty} indexed file{_s(empty)} gave no text"
    extra = sources - files
    return f"{text}; {extra} not from kb ingest (kb add, the library)"


@contextmanager
def progress(
    enabled: bool, lines: bool = False
) -> Iterator[Callable[..., None] | None]:
    """A ``progress(path, done, total, unit="files")`` callback drawing a bar on stderr (done
    of total, rate, time left, current file; ``unit="chunks"`` for vectors embedded after
    their files), or with ``lines`` (stderr not a terminal) plain lines every ~10 s
    (:class:`kbcli.progress.ProgressLines`), else None (``--quiet``)."""
    if not enabled:
        if lines:
            from .progress import ProgressLines

            yield ProgressLines()
        else:
            yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.fields[label]}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=_console(stderr=True),
        transient=True,
    )
    task = bar.add_task("looking for files…", total=None, rate="", unit="files", label="Indexing")

    def update(path: str, done: int, total: int, unit: str = "files") -> None:
        nonlocal task
        if bar.tasks and bar.tasks[0].fields.get("unit") != unit:
            bar.remove_task(task)
            task = bar.add_task("", total=total, rate="", unit=unit, label="Embedding")
        speed = bar.tasks[0].speed if bar.tasks else None
        rate = f"{speed:.1f}/s" if speed else ""
        bar.update(
            task,
            completed=done,
            total=total,
            description=shorten_source(path, 32) if path else "",
            rate=rate,
        )

    with bar:
        yield update


def eval_summary(result: dict[str, Any]) -> None:
    """``kb eval`` figures, one ``label  value`` line each."""
    from rich.text import Text

    console = _console()
    latency = result.get("latency_ms", {})
    rows = [("Dataset", f"{result['dataset']} ({result['split']}, {result['queries']} queries)")]
    rows.append(("Mode", str(result["mode"])))
    rows += [
        (key, f"{value:.4f}")
        for key, value in result.items()
        if "@" in key and isinstance(value, float)
    ]
    rows.append(
        ("Latency", f"mean {latency.get('mean', 0):.1f} ms, p95 {latency.get('p95', 0):.1f} ms")
    )
    for key, value in rows:
        line = Text(f"{key:<11} ", style="bold")
        line.append(value)
        console.print(line, soft_wrap=True)


def ingest_summary(report: Any) -> list[str]:
    """The human summary of a sync report, one line per fact worth saying."""
    indexed = report.added + report.updated
    # every file seen is counted once: new, changed, relabelled (same bytes, new --meta) or
    # unchanged
    relabelled = (
        f"{report.metadata_updated} relabelled (new --meta, nothing re-embedded), "
        if report.metadata_updated
        else ""
    )
    lines = [
        f"Indexed {indexed} file{_s(indexed)} ({report.added} new, {report.updated} changed), "
        f"{relabelled}{report.unchanged} unchanged; {report.chunks_added} "
        f"chunk{_s(report.chunks_added)} added, {report.chunks_removed} removed."
    ]
    filled, waiting = getattr(report, "vectors_added", 0), getattr(report, "vectors_missing", 0)
    if filled:
        lines.append(f"Embedded {filled} chunk{_s(filled)} after their files were written.")
    if waiting:
        lines.append(
            f"{waiting} chunk{_s(waiting)} still without a vector: keyword search finds them; "
            "the next kb ingest embeds them."
        )
    rebuilt = getattr(report, "rebuilt", 0)
    if rebuilt:
        lines.append(f"Rebuilt the index: re-embedded {rebuilt} chunk{_s(rebuilt)}.")
    if report.removed:
        n = report.removed
        lines.append(f"Removed {n} indexed file{_s(n)} no longer found under the given paths.")
    if report.skipped:
        lines.append(
            f"Skipped {report.skipped} file{_s(report.skipped)} (other extensions or hidden)."
        )
    special = getattr(report, "special", 0)
    if special:
        lines.append(
            f"Skipped {special} special file{_s(special)} (FIFOs, sockets or devices; never "
            "opened)."
        )
    links = getattr(report, "links", 0)
    if links:
        lines.append(
            f"Skipped {links} symbolic link{_s(links)} (not followed without --follow-symlinks, "
            "broken, or leading outside the folder)."
        )
    unreadable = getattr(report, "unreadable", 0)
    if unreadable:
        lines.append(
            f"Could not read {unreadable} folder{_s(unreadable)} or entr"
            f"{'y' if unreadable == 1 else 'ies'} (see warnings); their indexed files were kept."
        )
    if report.failed:
        n = len(report.failed)
        lines.append(f"Failed {n} file{_s(n)} (reasons above).")
    missing = getattr(report, "missing", 0)
    if missing:
        verb = "file no longer exists" if missing == 1 else "files no longer exist"
        lines.append(f"{missing} indexed {verb} and stayed (--no-prune).")
    if report.stale > missing:
        n = report.stale - missing
        verb = "file still exists but is" if n == 1 else "files still exist but are"
        lines.append(
            f"{n} indexed {verb} no longer picked (--ext, .kbignore, hidden, links); run "
            "with --prune to remove them."
        )
    lines.append(f"Done in {report.seconds:.1f} s.")
    return lines


def interrupted_summary(report: Any) -> str:
    """What an interrupted ingest kept, and that the next run resumes."""
    kept = report.added + report.updated
    relabelled = f", {report.metadata_updated} relabelled" if report.metadata_updated else ""
    by = f" ({report.signal})" if report.signal not in (None, "SIGINT") else ""
    return (
        f"Interrupted{by}: kept {kept} file{_s(kept)} indexed in this run ({report.added} new, "
        f"{report.updated} changed{relabelled}; {report.unchanged} were unchanged). Every file "
        "is at its old or its new version; run the same kb ingest again to resume."
    )


def _s(n: int) -> str:
    return "" if n == 1 else "s"


# --- kb ask -----------------------------------------------------------------------------------


def cited_location(evidence: Any) -> tuple[str, str]:
    """``(path:line, " (p. N)")`` of a cited passage: the path as the user would type it
    (relative to the current folder or ``~``, never cut), the page part empty without one."""
    if evidence.source is None:
        where = evidence.id
    else:
        where = shorten_source(evidence.source, width=10_000)
        if evidence.line is not None:
            where += f":{evidence.line}"
    return where, f" (p. {evidence.page})" if evidence.page is not None else ""


def _unknown_note(given: int) -> str:
    shown = f"[1]-[{given}]" if given > 1 else "[1]"
    return f"the model was given {shown} only"


def answer_output(answer: Any, fmt: str, *, streamed: bool = False) -> None:
    """``kb ask``'s answer on stdout as ``text`` or ``md``: the answer (unless ``streamed``
    already printed it), then each source it cited as ``[n] path:line`` and each citation
    naming no source, flagged."""
    text = (answer.text or "").strip()
    if streamed:
        sys.stdout.write("\n")
    else:
        result(text)
    given = len(answer.evidence)
    if fmt == "md":
        result("")
        result("**Sources**")
        result("")
        for e in answer.citations:
            where, page = cited_location(e)
            heading = f" — {' '.join(e.heading.split())}" if e.heading else ""
            result(f"- [{e.n}] `{where}`{page}{heading}")
        for n in answer.unknown_citations:
            result(f"- [{n}] **unknown citation**: {_unknown_note(given)}")
        if not answer.citations and not answer.unknown_citations:
            result("- none cited: this answer may not come from the knowledge base")
        sys.stdout.flush()
        return
    result("")
    if not answer.citations and not answer.unknown_citations:
        result("Sources: none cited (this answer may not come from the knowledge base)")
        return
    result("Sources:")
    for e in answer.citations:
        where, page = cited_location(e)
        result(f"  [{e.n}] {where}{page}")
    for n in answer.unknown_citations:
        result(f"  [{n}] unknown citation: {_unknown_note(given)}")


def prompt_output(answer: Any, as_json: bool = False) -> None:
    """``kb ask --show-prompt``: the messages that would be sent (and, as JSON, the numbered
    evidence)."""
    if as_json:
        print_json(
            {"messages": answer.messages, "evidence": [e.to_dict() for e in answer.evidence]}
        )
        return
    for message in answer.messages:
        result(f"--- {message['role']} ---")
        result(message["content"])
