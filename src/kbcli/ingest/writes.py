"""The write half of a sync: prepared files swapped into a store with a file ledger, a group
of files per transaction, each file whole (:class:`PendingWrites`), and a failed write turned
into one :class:`~kbcli.errors.StoreError` line (:func:`write_errors`).

:class:`Indexable` is what the write path uses of a knowledge base (its store, ingest steps and
embedder); :func:`ledger_store` checks that its store keeps a file ledger.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, cast

from kbcli.embedders.base import EmbedderInfo, embedder_info
from kbcli.errors import InvalidOptionError, StoreError
from kbcli.ingest.pipeline import IngestPipeline
from kbcli.ingest.report import SyncReport
from kbcli.protocols import (
    DocumentCatalog,
    EmbedderProtocol,
    FileLedger,
    VectorStoreProtocol,
    supports,
)
from kbcli.system.signals import deferred
from kbcli.types import Document, FileRecord

CHECKPOINT_EVERY = 200  # files; keeps the WAL from growing without bound in a long run
# Prepared files are written in groups: one transaction per group instead of per file (a commit
# costs ~1-2 ms). Each file is still all-or-nothing: a crash rolls back the group, leaving
# every file in it at its previous version. As many files as a checkpoint's span: a group of
# 64 left the 8 files before each checkpoint a group of their own, and each group updates the
# frequencies of every term it holds (at 100k chunks, fewer groups saved ~10 % of the ingest).
WRITE_BATCH_FILES = CHECKPOINT_EVERY
WRITE_BATCH_CHUNKS = 4000


@dataclass
class Prepared:
    """A file ready for its write: its new record and chunks; ``is_new`` (None: only its
    metadata changed) and the vectors it already has (``vectors``, None where unknown)."""

    record: FileRecord
    docs: list[Document]
    is_new: bool | None
    vectors: Sequence[Sequence[float] | None] | None = None


def as_vectors(vectors: Sequence[array[float] | None]) -> list[list[float]]:
    """``vectors`` as a store's ``add`` / ``replace_file`` take them. They stay float32 arrays
    (None where not known yet): every store takes any float sequence or None there (what the
    catalog protocols declare as ``list[list[float]]``), and lists would cost 7x."""
    return cast("list[list[float]]", list(vectors))


class Indexable(Protocol):
    """What the write path (:func:`~kbcli.ingest.sync.sync`,
    :func:`~kbcli.ingest.sync.ingest_one`) uses of a knowledge base: its store, the ingest
    steps that load, chunk and embed (:class:`~kbcli.ingest.pipeline.IngestPipeline`), and the
    embedder."""

    @property
    def store(self) -> VectorStoreProtocol: ...

    @property
    def ingestor(self) -> IngestPipeline: ...

    @property
    def embedder(self) -> EmbedderProtocol: ...


class LedgerStore(DocumentCatalog, FileLedger, Protocol):
    """A store a sync can write: a document catalog with a file ledger."""


def ledger_store(kb: Indexable) -> LedgerStore:
    """``kb``'s store, which must keep a file ledger (InvalidOptionError otherwise)."""
    store = kb.store
    if not supports(store, FileLedger) or not supports(store, DocumentCatalog):
        raise InvalidOptionError(
            f"{type(store).__name__} keeps no file ledger: incremental sync needs a store with "
            "one (SQLiteStore, InMemoryStore); use KnowledgeBase.ingest_file instead"
        )
    return store


@contextmanager
def write_errors() -> Iterator[None]:
    """Turn a failed write (disk full, I/O error) into one StoreError line.

    Each file's rows are swapped in one transaction, so the batch being written rolls back:
    files written before it stay at their new version, the others at their previous one.
    """
    import sqlite3

    try:
        yield
    except (OSError, sqlite3.OperationalError) as exc:
        reason = root_reason(exc)
        raise StoreError(
            f"Writing to the index failed ({reason}): files not yet written keep their "
            "previous version and the index stays searchable; free disk space (or fix the "
            "disk) and run kb ingest again"
        ) from exc


def root_reason(exc: BaseException) -> str:
    """The first cause in the chain that names the real problem (a failed ROLLBACK after a
    full disk reports "no transaction is active"; the disk-full error is its context)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    for candidate in seen:
        if isinstance(candidate, OSError) and candidate.errno is not None:
            return candidate.strerror or str(candidate)
        text = str(candidate)
        if "full" in text or "I/O" in text:
            return text
    return " ".join(str(exc).split()) or type(exc).__name__


class PendingWrites:
    """Prepared files waiting for their write, one transaction per group, each file whole.

    Files are written with the vectors already known (the embedding cache: unchanged chunk
    texts, renamed files; a relabelled file's own) and nothing costly is embedded here: a
    chunk without a vector is searchable by keyword from the moment its file is written, and
    :func:`fill_vectors` embeds what is missing afterwards (in this run, or the next one). A
    cheap embedder's vectors (the built-in one) are all known: embedded as each file is
    queued, written with its chunks, never cached, and nothing is left to fill.
    """

    def __init__(self, kb: Indexable, report: SyncReport):
        self.kb = kb
        self.store = ledger_store(kb)
        self.report = report
        self.items: list[tuple[FileRecord, list[Document], bool | None]] = []
        self.chunks = 0
        # float32 arrays, as every store keeps them: a 64-d vector as a list of floats costs
        # ~2.1 KB against ~0.3 KB, and a big file's vectors are all held until its write.
        self.vectors: dict[str, array[float]] = {}
        self.lacking: dict[str, None] = {}  # sources written with chunks still lacking vectors

    def add(self, file: Prepared) -> None:
        """Queue a file (its vectors known are kept, so they are not embedded again)."""
        docs = file.docs
        self.items.append((file.record, docs, file.is_new))
        if file.vectors is not None:
            self._keep((d.text, v) for d, v in zip(docs, file.vectors) if v is not None)
        self.chunks += len(docs)
        texts = [d.text for d in docs if d.text not in self.vectors]
        self._keep(self.kb.ingestor.cached_vectors(texts).items())
        if self.chunks >= WRITE_BATCH_CHUNKS or len(self.items) >= WRITE_BATCH_FILES:
            self.flush()

    def _keep(self, pairs: Iterable[tuple[str, Sequence[float]]]) -> None:
        self.vectors.update((text, array("f", v)) for text, v in pairs)

    def flush(self) -> None:
        """Write every queued file."""
        if not self.items:
            return
        store = self.store
        info = embedder_info(self.kb.embedder)
        # A termination signal waits until the files are written and counted (else the
        # interrupted sync would write them again and count them twice); Ctrl-C in the
        # middle rolls the transaction back and the caller writes them again, once.
        with deferred():
            with store.transaction():
                removed = self._write_all(info)
            self._count(removed)
            self.items, self.chunks, self.vectors = [], 0, {}

    def _count(self, removed: list[int]) -> None:
        report = self.report
        for (record, docs, is_new), gone in zip(self.items, removed):
            if any(d.text not in self.vectors for d in docs):
                self.lacking[record.path] = None
            if is_new is None:
                report.metadata_updated += 1
                continue
            report.chunks_removed += gone
            report.chunks_added += len(docs)
            if is_new:
                report.added += 1
            else:
                report.updated += 1

    def _write_all(self, info: EmbedderInfo) -> list[int]:
        """Swap every queued file in (inside the caller's transaction); the chunks removed from
        each. Files of up to :data:`WRITE_BATCH_CHUNKS` chunks go to the store together
        (``replace_files``: one keyword update for all of them), a bigger one by itself."""
        removed: list[int] = []
        together: list[
            tuple[FileRecord, list[Document], list[list[float]] | None, EmbedderInfo | None]
        ] = []
        for record, docs, _ in self.items:
            if len(docs) <= WRITE_BATCH_CHUNKS:
                complete = all(d.text in self.vectors for d in docs)
                together.append((record, docs, self._known(docs), info if complete else None))
                continue
            removed += self.store.replace_files(together)
            together = []
            removed.append(self._write(record, docs, info))
        return removed + self.store.replace_files(together)

    def _known(self, docs: list[Document]) -> list[list[float]]:
        """The vectors known for ``docs``, None where not known yet."""
        return as_vectors([self.vectors.get(d.text) for d in docs])

    def _write(self, record: FileRecord, docs: list[Document], info: EmbedderInfo) -> int:
        """Swap one file in (inside the caller's transaction); returns the chunks removed.

        A chunk whose vector is not known yet is written without one (``None``), and then the
        store records no embedder and caches nothing for the file: :func:`fill_vectors` does
        both. A file of more than :data:`WRITE_BATCH_CHUNKS` chunks goes to the store in slices
        of that size within the same transaction (still all or nothing), so the store never
        prepares every row of a huge file at once (per-chunk term counts cost ~3 KB each).
        """
        store = self.store
        complete = all(d.text in self.vectors for d in docs)
        head = docs[:WRITE_BATCH_CHUNKS]
        vectors = self._known(head)
        removed = store.replace_file(record, head, vectors, embedder=info if complete else None)
        for start in range(WRITE_BATCH_CHUNKS, len(docs), WRITE_BATCH_CHUNKS):
            part = docs[start : start + WRITE_BATCH_CHUNKS]
            vectors = self._known(part)
            store.add(part, vectors, embedder=info if complete else None)
        return removed
