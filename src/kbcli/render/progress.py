"""The progress bar of ``kb ingest`` and ``kb eval`` on stderr (only on a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .messages import rich_console
from .names import shorten_source


@contextmanager
def progress(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A ``progress(path, done, total)`` callback drawing a bar on stderr (files done of total,
    files per second, time left, current file), or None when ``enabled`` is false (not a
    terminal, or ``--quiet``): nothing animated then."""
    if not enabled:
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
        TextColumn("Indexing"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("files"),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=rich_console(stderr=True),
        transient=True,
    )
    task = bar.add_task("looking for files…", total=None, rate="")

    def update(path: str, done: int, total: int) -> None:
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
