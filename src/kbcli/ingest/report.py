"""What one sync did: counts, failures, warnings and the slowest files (``kb ingest --json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SLOWEST_FILES = 5  # per-file times kept in the report (kb ingest --json "slowest")


@dataclass
class FileFailure:
    """A file that could not be indexed, and why."""

    path: str
    error: str


@dataclass
class SyncReport:
    """What one sync did (``to_dict`` is the ``kb ingest --json`` summary)."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0  # indexed files removed: gone from disk (or, with prune, no longer picked)
    stale: int = 0  # indexed files kept although this run did not pick them
    skipped: int = 0
    failed: list[FileFailure] = field(default_factory=list)
    chunks_added: int = 0
    chunks_removed: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    rebuilt: int = 0
    special: int = 0  # FIFOs, sockets, devices: skipped, never opened
    skipped_folders: int = 0  # hidden folders, and .git, node_modules ...: not entered
    links: int = 0  # symbolic links not followed (or leading outside their root)
    unreadable: int = 0  # folders that could not be listed (their indexed files are kept)
    metadata_updated: int = 0
    missing: int = 0  # of the stale files, those that no longer exist (kept with prune=False)
    interrupted: bool = False
    signal: str | None = None  # what interrupted the run: "SIGINT" (Ctrl-C), "SIGTERM", "SIGHUP"
    # The SLOWEST_FILES files the run spent longest on, slowest first: {"path", "seconds"}
    # (reading, parsing, chunking, the embedding of its full batches, and a group write it
    # completed; see :meth:`timed`), plus "ocr_pages" and "ocr_seconds_per_page" for a file
    # with recognised pages.
    slowest: list[dict[str, Any]] = field(default_factory=list)
    vectors_added: int = 0  # chunks embedded (or taken from the cache) after their file's write
    vectors_missing: int = 0  # chunks still without a vector when the run ended

    def __post_init__(self) -> None:
        self._ocr: dict[str, dict[str, Any]] = {}  # path -> its OCR figures, until timed

    def ocr_done(self, path: str, figures: dict[str, Any] | None) -> None:
        """Note the loader's OCR figures (``{"pages", "seconds"}``) for ``path``."""
        if figures and figures.get("pages"):
            self._ocr[path] = figures

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain JSON-ready data."""
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        data["slowest"] = [{**s, "seconds": round(s["seconds"], 3)} for s in self.slowest]
        return data

    def timed(self, path: str, seconds: float) -> None:
        """Note that ``path`` took ``seconds``; keeps the slowest :data:`SLOWEST_FILES`."""
        ocr = self._ocr.pop(path, None)
        if len(self.slowest) < SLOWEST_FILES or seconds > self.slowest[-1]["seconds"]:
            entry: dict[str, Any] = {"path": path, "seconds": seconds}
            if ocr:
                entry["ocr_pages"] = ocr["pages"]
                entry["ocr_seconds_per_page"] = round(ocr["seconds"] / ocr["pages"], 3)
            self.slowest.append(entry)
            self.slowest.sort(key=lambda s: -s["seconds"])
            del self.slowest[SLOWEST_FILES:]
