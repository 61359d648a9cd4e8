"""Vectors filled in after the writes: files are searchable by keyword as soon as they are
written, their chunks' vectors are embedded and stored afterwards in committed batches, and an
interrupted fill is resumed by the next sync (:func:`fill_vectors`)."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

from kbcli.embedders.base import embedder_info
from kbcli.ingest.report import SyncReport
from kbcli.ingest.writes import Indexable, as_vectors, ledger_store
from kbcli.protocols import IndexMetadata, VectorWriter, supports
from kbcli.system.crashpoints import crash_point
from kbcli.system.signals import deferred
from kbcli.types import Document

# Chunks embedded and stored per transaction when vectors are filled in after the writes.
FILL_BATCH = 256


def missing_vectors(store: IndexMetadata) -> int | None:
    """How many chunks of ``store`` have no vector (``stats()`` chunks less vectors), or None
    when its stats do not say."""
    try:
        stats = store.stats()
    except (AttributeError, NotImplementedError):
        return None
    chunks, vectors = stats.get("chunks"), stats.get("vectors")
    if not isinstance(chunks, int) or not isinstance(vectors, int):
        return None
    return max(0, chunks - vectors)


def fill_vectors(
    kb: Indexable,
    report: SyncReport,
    first: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Embed the chunks that have no vector yet and store them, :data:`FILL_BATCH` at a
    time (the first batch: one request of the embedder's, so its rate is known soon), each
    batch committed (an interrupted fill keeps what it stored; the next sync
    resumes). The sources in ``first`` (written by this run) are looked at first, then, while
    chunks are still missing, every other file, then the chunks of no file (notes, added
    text). ``progress(done, total)`` counts chunks.

    Vectors go in alone where the store can (:class:`~kbcli.protocols.VectorWriter`: the
    chunks' rows and keyword postings stay as written), else by the catalog's ``add`` with the
    chunks' own ids, texts and metadata (the embedding cache finds them there as the index's
    own).
    """
    store = ledger_store(kb)
    missing = missing_vectors(store)
    if missing == 0:
        report.vectors_missing = 0
        return
    first = list(dict.fromkeys(first))

    def others() -> Iterator[Iterable[Document]]:  # read only while chunks are still missing
        seen = set(first)
        files = store.file_records()
        for source in files:
            if source not in seen:
                yield store.iter_documents(source=source, with_embeddings=True)
        # then the chunks no file holds: notes written keyword-first (an agent's note whose
        # vector was never stored) and text added under a source of its own, then those
        # without a source; a scan, reached only when the files held too few
        for source, _ in store.sources():
            if source not in files and source not in seen:
                yield store.iter_documents(source=source, with_embeddings=True)
        yield (
            d
            for d in store.iter_documents(with_embeddings=True)
            if d.metadata.get("source") is None
        )

    order = itertools.chain(
        (store.iter_documents(source=s, with_embeddings=True) for s in first), others()
    )
    total = missing if missing is not None else 0
    batch = max(1, int(getattr(kb.embedder, "batch_size", 64) or 64))
    size = max(batch, FILL_BATCH // batch * batch)
    waiting: list[Document] = []
    done = 0
    if progress is not None and total:
        progress(0, total)
    for documents in order:
        if missing is not None and done + len(waiting) >= missing:
            break  # every missing chunk found: the other files are not read
        waiting += [d for d in documents if d.embedding is None or not len(d.embedding)]
        # The first batch is one request of the embedder: its rate is known in seconds, and
        # a long embedding says so early (kbcli.cli.render.progress_lines.long_embed).
        while len(waiting) >= (step := size if done else batch):
            _fill(kb, waiting[:step], report)
            done += step
            del waiting[:step]
            if progress is not None and total:
                progress(min(done, total), total)
    if waiting:
        _fill(kb, waiting, report)
        done += len(waiting)
        if progress is not None and total:
            progress(min(done, total), total)
    report.vectors_missing = missing_vectors(store) or 0


def _fill(kb: Indexable, docs: list[Document], report: SyncReport) -> None:
    """Embed ``docs`` (the cache first) and store them with their vectors in one transaction,
    counted in ``report``."""
    texts = list(dict.fromkeys(d.text for d in docs))
    # float32 once, as every store keeps them (a list would be converted again)
    embedded = kb.ingestor.embed(texts, remember=False)
    vectors = {t: array("f", v) for t, v in zip(texts, embedded)}
    crash_point("after-embed")
    info = embedder_info(kb.embedder)
    store = ledger_store(kb)
    with deferred():  # a termination signal waits for the commit and its count
        with store.transaction():
            if supports(store, VectorWriter):
                store.set_vectors({d.id: vectors[d.text] for d in docs}, embedder=info)
            else:
                store.add(docs, as_vectors([vectors[d.text] for d in docs]), embedder=info)
        report.vectors_added += len(docs)
