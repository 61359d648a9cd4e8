"""Progress of a long ``kb ingest`` as plain lines, for a stderr that is not a terminal (a log,
cron mail, an agent's transcript): no animation, one line every :data:`EVERY` seconds at
most, none at all for a run shorter than that.

    Indexing: 1,200/7,310 files, 35.2/s, about 3 min left
    Indexing: 7,310/7,310 files, done in 3 min 28 s (35.1/s)
    Embedding 12,484 chunks with local/all-MiniLM-L6-v2, 384 dimensions
    About 26 min more to embed (8.1 chunks/s); keyword search works now (kb search --mode keyword)
    Embedding: 4,096/12,484 chunks, 8.2/s, about 17 min left

A stage that ran for :data:`EVERY` seconds or more ends with a line of its own (the last
periodic one could say "about 3 s left"). An embedding stage of at least
:data:`ANNOUNCE_CHUNKS` chunks is announced when it starts (the model may take a while to load
and to run its first batch), and one expected to take :data:`LONG_EMBED` seconds or more says
so as soon as its first batch gives a rate (:func:`long_embed`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

EVERY = 10.0  # seconds between two lines
LABELS = {"files": "Indexing", "chunks": "Embedding"}
ANNOUNCE_CHUNKS = 256  # an embedding stage of at least this many chunks gets a first line
LONG_EMBED = 60.0  # seconds: an embedding expected to take longer says so after its first batch


def _left(seconds: float) -> str:
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min left"
    return f"about {seconds / 3600:.1f} h left"


def took(seconds: float) -> str:
    """``42 s``, ``3 min 28 s``, ``1 h 12 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def embedding_start(total: int, embedder: str | None) -> str:
    """The line that opens an embedding stage."""
    return f"Embedding {total:,} chunks" + (f" with {embedder}" if embedder else "")


def long_embed(done: int, total: int, seconds: float) -> str | None:
    """What to say before a long embedding, from its first ``done`` of ``total`` chunks in
    ``seconds``: how long the rest takes and that keyword search works meanwhile; None when
    the rest is short (under :data:`LONG_EMBED` seconds)."""
    if done <= 0 or done >= total or seconds <= 0:
        return None
    rate = done / seconds
    rest = (total - done) / rate
    if rest < LONG_EMBED:
        return None
    about = _left(rest).removesuffix(" left").capitalize()
    return (
        f"{about} more to embed ({rate:.1f} chunks/s); keyword search works now "
        "(kb search --mode keyword)"
    )


class ProgressLines:
    """A ``progress(name, done, total, unit="files")`` callback writing a line to ``stream``
    at most every ``every`` seconds (the first after ``every`` seconds of a stage), with the
    rate and the time left of the current stage (a new ``unit`` starts a new stage); see the
    module docstring for the lines a stage begins and ends with. ``embedder`` names the
    embedder in the line that opens an embedding stage (a callable: asked only then)."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        embedder: str | Callable[[], str] | None = None,
    ):
        self.stream = stream
        self.every = EVERY if every is None else every
        self.clock = clock
        self.embedder = embedder
        self.unit: str | None = None
        self.started = self.last = 0.0
        self.first_done = 0
        self.ended = False
        self.estimated = False

    def __call__(self, name: str, done: int, total: int, unit: str = "files") -> None:
        now = self.clock()
        if unit != self.unit:
            self.unit, self.started, self.last, self.first_done = unit, now, now, done
            self.ended = self.estimated = False
            if unit == "chunks" and total >= ANNOUNCE_CHUNKS and done < total:
                named = self.embedder() if callable(self.embedder) else self.embedder
                self._print(embedding_start(total, named))
            return
        if not total or self.ended:
            return
        label = LABELS.get(unit, unit.capitalize())
        elapsed = now - self.started
        rate = (done - self.first_done) / max(elapsed, 1e-9)
        if done >= total:
            self.ended = True
            if elapsed >= self.every:  # a long stage ends with a line of its own
                self._print(f"{label}: {done:,}/{total:,} {unit}, done in {took(elapsed)} "
                            f"({rate:.1f}/s)")  # fmt: skip
            return
        if unit == "chunks" and not self.estimated and done > self.first_done:
            self.estimated = True  # said once, after the first batch, when the rest is long
            notice = long_embed(done - self.first_done, total - self.first_done, elapsed)
            if notice is not None:
                self.last = now
                self._print(notice)
                return
        if now - self.last < self.every:
            return
        self.last = now
        parts = [f"{label}: {done:,}/{total:,} {unit}"]
        if rate > 0:
            parts.append(f"{rate:.1f}/s")
            parts.append(_left((total - done) / rate))
        self._print(", ".join(parts))

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)
