"""What ``kb status`` prints: one line per root (what differs since its last sync), the
vectors still to fill, a watch, when the index last changed, then the one summary line."""

from __future__ import annotations

from kbcli.cli.render.messages import plural, rich_console
from kbcli.ingest.status import IndexStatus, RootStatus


def status_output(status: IndexStatus) -> None:
    """The status as text on stdout: a table of roots, then the index's lines and summary."""
    from rich.table import Table
    from rich.text import Text

    console = rich_console()
    if status.roots:
        table = Table(show_edge=False, pad_edge=False)
        for column in ("Root", "Last sync", "Indexed", "New", "Changed", "Gone"):
            table.add_column(column, justify="left" if column in ("Root", "Last sync") else "right")
        for root in status.roots:
            table.add_row(
                Text(root.path),
                root.synced_at or "-",
                f"{root.indexed:,}",
                f"{root.new:,}" if root.walked else "-",
                f"{root.changed:,}",
                f"{root.gone:,}",
            )
        console.print(table)
        for root in status.roots:
            for example in _examples(root):
                console.print(Text(example), soft_wrap=True)
    else:
        console.print("No ingested roots recorded (kb ingest PATH records them).")
    pending = status.vectors_pending
    rows = [
        ("Vectors", f"{pending:,} chunk{plural(pending)} without vectors" if pending else "all"),
        ("Watch", _watch(status)),
    ]
    changed_at = (status.watermark or {}).get("changed_at")
    rows.append(("Index changed", changed_at or status.last_ingest or "never"))
    for key, value in rows:
        row = Text(f"{key:<14} ", style="bold")
        row.append(value)
        console.print(row, soft_wrap=True)
    console.print(Text(status.summary()), soft_wrap=True)


def _watch(status: IndexStatus) -> str:
    if status.watch_running is None:
        return "unknown"
    if not status.watch_running:
        return "not running"
    return f"running (pid {status.watch_pid})" if status.watch_pid else "running"


def _examples(root: RootStatus) -> list[str]:
    """``  new: /notes/a.md, /notes/b.md (+3 more)`` for each kind a root has."""
    lines = []
    for kind, paths in root.examples.items():
        count = getattr(root, kind)
        if not paths:
            continue
        more = f" (+{count - len(paths):,} more)" if count > len(paths) else ""
        lines.append(f"  {kind}: {', '.join(paths)}{more}")
    return lines
