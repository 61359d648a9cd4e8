"""The progress bar of ``kb ingest`` and ``kb eval`` on stderr (only on a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .messages import diagnostics, rich_console
from .names import shorten_source


@contextmanager
def progress(enabled: bool, lines: bool = False) -> Iterator[Callable[..., None] | None]:
    """A ``progress(path, done, total, unit="files")`` callback drawing a bar on stderr (done
    of total, rate, time left, current file; ``unit="chunks"`` for vectors embedded after
    their files), or with ``lines`` (stderr not a terminal) plain lines every ~10 s
    (:class:`kbcli.progress.ProgressLines`), else None (``--quiet``)."""
    if not enabled:
        if lines:
            from ..progress import ProgressLines

            every = ProgressLines()

            def line(path: str, done: int, total: int, unit: str = "files") -> None:
                with diagnostics():  # a closed stderr stops the lines, not the ingest
                    every(path, done, total, unit)

            yield line
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
        console=rich_console(stderr=True),
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
