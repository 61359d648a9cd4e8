"""Output for the ``kb`` command: Rich tables and progress, JSON, messages on stderr.

Results go to stdout; notes, warnings, errors and progress go to stderr. ``--json`` output is
plain ``json.dumps`` on stdout and nothing else. Rich is imported only by the functions that
draw tables or progress, so JSON output and error messages stay cheap.
"""

from __future__ import annotations

import json
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


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout (the only thing ``--json`` writes there)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
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
    text = str(source)
    path = Path(text)
    if path.is_absolute():
        for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
            try:
                text = prefix + str(path.relative_to(base))
                break
            except ValueError:
                continue
    if len(text) <= width:
        return text
    parts = Path(text).parts
    tail = str(Path(*parts[-2:])) if len(parts) >= 2 else parts[-1]
    if len(tail) + 4 > width:
        return "…" + text[-(width - 1) :]
    return "…/" + tail


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


def search_table(results: Sequence[Any], terms: Sequence[str], explain: bool = False) -> None:
    """Rank, score, source, chunk and a highlighted snippet for each hit."""
    from rich.table import Table

    pattern = term_pattern(terms)
    table = Table(show_lines=True, expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("Score", justify="right", no_wrap=True)
    table.add_column("Source", overflow="fold", max_width=32)
    table.add_column("Chunk", justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1)
    if explain:
        table.add_column("Explain", no_wrap=True)
    for rank, r in enumerate(results, 1):
        meta = r.document.metadata
        row = [
            str(rank),
            f"{r.score:.3f}",
            shorten_source(meta.get("source"), 32),
            _chunk_label(meta),
            _rich_snippet(r.document.text, pattern),
        ]
        if explain:
            row.append(_explain_text(r.explain))
        table.add_row(*row)
    _console().print(table)


def _chunk_label(meta: dict[str, Any]) -> str:
    index = meta.get("chunk_index")
    label = "-" if index is None else str(index)
    if meta.get("page") is not None:
        label += f" (p. {meta['page']})"
    return label


def _explain_text(explain: Any) -> str:
    if not explain:
        return "-"
    if not isinstance(explain, dict):
        return str(explain)
    lines = []
    for key, value in explain.items():
        if isinstance(value, dict) and "rank" in value:
            line = f"{key} #{value['rank']} ({_fmt(value.get('score'))}"
            if "bm25_chunk" in value:
                line += (
                    f" = chunk {_fmt(value['bm25_chunk'])}"
                    f" + {_fmt(value['source_weight'])}×file {_fmt(value['bm25_source'])}"
                )
            lines.append(line + ")")
        elif value is None:
            lines.append(f"{key} -")
        else:
            lines.append(f"{key} {_fmt(value)}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


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


def documents_table(docs: Sequence[Any]) -> None:
    """Id, source, chunk index and the start of each chunk."""
    from rich.table import Table

    table = Table()
    table.add_column("ID", no_wrap=True)
    table.add_column("Source", overflow="fold", max_width=32)
    table.add_column("Chunk", justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1)
    for d in docs:
        text, _ = snippet(d.text, None, 80)
        source = shorten_source(d.metadata.get("source"), 32)
        table.add_row(d.id, source, _chunk_label(d.metadata), text)
    _console().print(table)


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

    rows = [
        ("Chunks", str(stats["chunks"])),
        ("Sources", f"{stats['sources']} ({stats.get('files', 0)} indexed files)"),
        ("Size on disk", human_size(stats["size_bytes"])),
        ("Embedder", describe_embedder(stats.get("embedder"))),
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


@contextmanager
def progress(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A ``progress(path, done, total)`` callback drawing a bar on stderr, or None when
    ``enabled`` is false (not a terminal, or ``--quiet``): nothing animated then."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        TextColumn("Indexing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=_console(stderr=True),
        transient=True,
    )
    task = bar.add_task("", total=None)

    def update(path: str, done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, description=shorten_source(path, 40))

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
    lines = [
        f"Indexed {indexed} file{_s(indexed)} ({report.added} new, {report.updated} changed), "
        f"{report.unchanged} unchanged; {report.chunks_added} chunk{_s(report.chunks_added)} "
        f"added, {report.chunks_removed} removed."
    ]
    rebuilt = getattr(report, "rebuilt", 0)
    if rebuilt:
        lines.append(f"Rebuilt the index: re-embedded {rebuilt} chunk{_s(rebuilt)}.")
    if report.removed:
        lines.append(f"Removed {report.removed} file{_s(report.removed)} that no longer exist.")
    if report.skipped:
        lines.append(
            f"Skipped {report.skipped} file{_s(report.skipped)} (other extensions or hidden)."
        )
    if report.failed:
        n = len(report.failed)
        lines.append(f"Failed {n} file{_s(n)} (reasons above).")
    if report.stale:
        verb = "file no longer exists" if report.stale == 1 else "files no longer exist"
        lines.append(f"{report.stale} indexed {verb}; run with --prune to remove them.")
    lines.append(f"Done in {report.seconds:.1f} s.")
    return lines


def _s(n: int) -> str:
    return "" if n == 1 else "s"
