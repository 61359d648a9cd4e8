"""The progress bar of ``kb ingest`` and ``kb eval`` on stderr (only on a terminal)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kbcli.cli.render.messages import diagnostics, rich_console
from kbcli.cli.render.names import shorten_source
from kbcli.cli.render.progress_lines import ProgressLines, long_embed


@contextmanager
def progress(
    enabled: bool, lines: bool = False, embedder: Callable[[], str] | None = None
) -> Iterator[Callable[..., None] | None]:
    """A ``progress(path, done, total, unit="files")`` callback drawing a bar on stderr (done
    of total, rate, time left, current file; ``unit="chunks"`` for vectors embedded after
    their files, with a line above the bar after the first batch of a long embedding: how
    long it takes, and that keyword search works meanwhile), or with ``lines`` (stderr not a
    terminal) plain lines every ~10 s
    (:class:`kbcli.cli.render.progress_lines.ProgressLines`; ``embedder()``
    names the embedder when an embedding stage starts), else None (``--quiet``)."""
    if not enabled:
        if lines:
            every = ProgressLines(embedder=embedder)

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

    said = [False]  # the long embedding's line, once
    began = [0.0]  # when the embedding stage began,
    first = [0]  # and the chunks done then

    def update(path: str, done: int, total: int, unit: str = "files") -> None:
        nonlocal task
        if bar.tasks and bar.tasks[0].fields.get("unit") != unit:
            bar.remove_task(task)
            task = bar.add_task("", total=total, rate="", unit=unit, label="Embedding")
            began[0], first[0] = time.monotonic(), done
        elif unit == "chunks" and not said[0] and done > first[0]:
            said[0] = True
            notice = long_embed(done - first[0], total - first[0], time.monotonic() - began[0])
            if notice is not None:
                bar.console.print(notice)
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
