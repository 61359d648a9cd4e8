"""The figures of ``kb stats``, ``kb doctor``, ``kb config`` and ``kb eval``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kbcli.cli.render.messages import message, plural, result, rich_console
from kbcli.cli.render.names import human_size


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
        ("Files", f"{files} file{plural(files)} indexed by kb ingest"),
        ("Chunks", f"{chunks} searchable piece{plural(chunks)} of text{per_file}"),
        ("Sources", _sources_words(files, sources)),
        ("Size on disk", human_size(stats["size_bytes"])),
        ("Embedder", describe_embedder(stats.get("embedder"))),
        *_vector_row(stats),
        ("Analyzer", stats.get("analyzer") or "none yet"),
        ("Vocabulary", f"{stats['vocabulary']} terms"),
        ("Last ingest", stats.get("last_ingest") or "never"),
        ("Database", str(stats["path"])),
        *_read_server_row(stats.get("read_server")),
        *(
            [("Read-only", "yes: searches work here, writes are refused")]
            if stats.get("read_only")
            else []
        ),
    ]
    console = rich_console()
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


def _read_server_row(standby: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``Read server`` for ``kb stats`` of a PostgreSQL index read from a hot standby: where,
    and how far its replay is behind the primary (or why it cannot be reached)."""
    if not standby:
        return []
    if "error" in standby:
        return [("Read server", f"{standby['path']}: {standby['error']}")]
    if "behind_bytes" not in standby:
        return [("Read server", f"{standby['path']} (not in recovery: no replay to wait for)")]
    behind = standby["behind_bytes"]
    lag = (
        "replayed everything the primary wrote"
        if not behind
        else (
            f"{human_size(behind)} of WAL behind, last replayed commit "
            f"{standby['replay_delay_seconds']:g} s ago"
        )
    )
    return [("Read server", f"{standby['path']}, replay at {standby['replay_lsn']}: {lag}")]


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
    rich_console().print(table)


def _sources_words(files: int, sources: int) -> str:
    """What the distinct ``source`` values of the chunks are, against the indexed files."""
    text = f"{sources} distinct source{plural(sources)} (file paths and other source values)"
    if sources == files:
        return f"{sources} (each indexed file is one source)"
    if sources < files:
        empty = files - sources
        return f"{text}; {empty} indexed file{plural(empty)} gave no text"
    extra = sources - files
    return f"{text}; {extra} not from kb ingest (kb add, the library)"


def eval_summary(result: dict[str, Any]) -> None:
    """``kb eval`` figures, one ``label  value`` line each."""
    from rich.text import Text

    console = rich_console()
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
