"""Progress of a long ``kb ingest`` as plain lines, for a stderr that is not a terminal (a log,
cron mail, an agent's transcript): no animation, one line every :data:`EVERY` seconds at
most, none at all for a run shorter than that.

    Indexing: 1,200/7,310 files, 35.2/s, about 3 min left
    Embedding: 4,096/12,484 chunks, 61.0/s, about 2 min left
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

EVERY = 10.0  # seconds between two lines
LABELS = {"files": "Indexing", "chunks": "Embedding"}


def _left(seconds: float) -> str:
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min left"
    return f"about {seconds / 3600:.1f} h left"


class ProgressLines:
    """A ``progress(name, done, total, unit="files")`` callback writing a line to ``stream``
    at most every ``every`` seconds (the first after ``every`` seconds of a stage), with the
    rate and the time left of the current stage (a new ``unit`` starts a new stage)."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream
        self.every = EVERY if every is None else every
        self.clock = clock
        self.unit: str | None = None
        self.started = self.last = 0.0
        self.first_done = 0

    def __call__(self, name: str, done: int, total: int, unit: str = "files") -> None:
        now = self.clock()
        if unit != self.unit:
            self.unit, self.started, self.last, self.first_done = unit, now, now, done
            return
        if now - self.last < self.every or not total:
            return
        self.last = now
        rate = (done - self.first_done) / max(now - self.started, 1e-9)
        parts = [f"{LABELS.get(unit, unit.capitalize())}: {done:,}/{total:,} {unit}"]
        if rate > 0:
            parts.append(f"{rate:.1f}/s")
            if done < total:
                parts.append(_left((total - done) / rate))
        stream = self.stream or sys.stderr
        print(", ".join(parts), file=stream, flush=True)
