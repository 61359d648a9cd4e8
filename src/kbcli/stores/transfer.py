"""Copying an index between stores without re-embedding (``kb copy``), and checking the copy.

Everything goes through the storage protocols, so any two stores work: the documents with
their vectors (:meth:`DocumentCatalog.iter_documents` with ``with_embeddings``), in order and
with their creation times, the recorded embedder, the file ledger (so the next ``kb ingest``
on the target skips unchanged files) and the embedding cache for the copied texts. The keyword
index is rebuilt by the target from the texts (analysis, no embedding calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from kbcli.embedders.base import EmbedderInfo
from kbcli.embedders.resolve import CHOICE_KEY
from kbcli.errors import StoreError
from kbcli.protocols import VectorStoreProtocol
from kbcli.search.calibration import meta_key, probes_key
from kbcli.stores.capabilities import (
    DocumentCatalog,
    DocumentWriter,
    FileLedger,
    KeywordIndex,
    supports,
)
from kbcli.types import Document, SearchResult

BATCH = 1000
META_KEYS = ("last_ingest",)


def _meta_keys(info: EmbedderInfo | None) -> list[str]:
    """The index metadata a copy carries: :data:`META_KEYS`, the embedder an ingest chose and
    the relevance floors calibrated for the index's embedder (a copy without them would
    return the junk hits the floors hold back) and the probes' vectors they came from."""
    own = [meta_key(info), probes_key(info)] if info is not None else []
    return [*META_KEYS, CHOICE_KEY, *own]


@dataclass
class CopyReport:
    """What :func:`copy_index` copied and what the check found (``problems`` empty: same)."""

    documents: int = 0
    vectors: int = 0
    files: int = 0
    searches: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when counts and every sampled search agree."""
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "documents": self.documents,
            "vectors": self.vectors,
            "files": self.files,
            "searches_checked": self.searches,
            "ok": self.ok,
            "problems": list(self.problems),
        }


class CopiedStore(DocumentCatalog, VectorStoreProtocol, Protocol):
    """What ``kb copy`` reads and writes: a document catalog, searched by vector to check."""


def copy_index(
    source: VectorStoreProtocol,
    target: VectorStoreProtocol,
    *,
    batch_size: int = BATCH,
    samples: int = 8,
) -> CopyReport:
    """Copy every document, vector, file record and the embedder of ``source`` into the empty
    ``target`` in one transaction, then :func:`check_copy`. Raises :class:`StoreError` when the
    target already holds documents or either side is not a document catalog."""
    if not supports(source, DocumentCatalog):
        raise StoreError("The source store is not a document catalog: kb copy needs one")
    if not supports(target, DocumentCatalog):
        raise StoreError("The target store is not a document catalog: kb copy needs one")
    if target.count() or (supports(target, FileLedger) and target.file_records()):
        raise StoreError("The target store is not empty: copy into a new database or path")
    info = source.embedder_info
    report = CopyReport()
    with target.transaction():
        batch: list[Document] = []
        for doc in source.iter_documents(with_embeddings=True):
            batch.append(doc)
            if len(batch) >= batch_size:
                _write(target, batch, info, report)
                batch = []
        if batch:
            _write(target, batch, info, report)
        if supports(source, FileLedger) and supports(target, FileLedger):
            for record in source.file_records().values():
                target.touch_file(record)
                report.files += 1
        for key in _meta_keys(info):
            value = source.get_meta(key)
            if value is not None:
                target.set_meta(key, value)
    report.problems = check_copy(source, target, samples=samples, report=report)
    return report


def _write(
    target: DocumentWriter, docs: list[Document], info: EmbedderInfo | None, report: CopyReport
) -> None:
    vectors = [d.embedding for d in docs]
    with_vectors = sum(v is not None for v in vectors)
    # doc.embedding carries each vector; the embedder is recorded with the first ones
    # (the target's embedding cache finds them as its own: nothing to cache besides)
    target.add(docs, None, embedder=info if with_vectors else None)
    report.documents += len(docs)
    report.vectors += with_vectors


def check_copy(
    source: CopiedStore,
    target: CopiedStore,
    *,
    samples: int = 8,
    report: CopyReport | None = None,
) -> list[str]:
    """Differences between two stores: counts, sources, file records, and ``samples`` keyword,
    dense and filtered dense searches (documents spread over the index as queries)."""
    problems: list[str] = []
    if source.count() != target.count():
        problems.append(f"chunks: {source.count()} in the source, {target.count()} in the target")
    if source.sources() != target.sources():
        problems.append("the sources and their chunk counts differ")
    if supports(source, FileLedger) and supports(target, FileLedger):
        if source.file_records() != target.file_records():
            problems.append("the file records differ")
    total = source.count()
    step = max(1, total // max(1, samples))
    probes = [d for i, d in enumerate(source.iter_documents(with_embeddings=True)) if i % step == 0]
    checked = 0
    for doc in probes[:samples]:
        query = " ".join(doc.text.split()[:6])
        if query and supports(source, KeywordIndex) and supports(target, KeywordIndex):
            checked += 1
            if _ids(source.keyword_search(query, k=5)) != _ids(target.keyword_search(query, k=5)):
                problems.append(f"keyword search {query!r} gives other results")
        if doc.embedding:
            searches: list[dict[str, Any] | None] = [None]
            if doc.metadata.get("source") is not None:
                searches.append({"source": doc.metadata["source"]})
            for flt in searches:
                checked += 1
                want = source.search(list(doc.embedding), k=5, filter=flt)
                got = target.search(list(doc.embedding), k=5, filter=flt)
                if not _same_hits(want, got):
                    what = "filtered dense" if flt else "dense"
                    problems.append(f"{what} search near chunk {doc.id} gives other results")
    if report is not None:
        report.searches = checked
    return problems


def _ids(hits: list[SearchResult]) -> list[str]:
    return [h.document.id for h in hits]


def _same_hits(want: list[SearchResult], got: list[SearchResult]) -> bool:
    """Same ids in the same order; where scores tie (within float32 noise), any order."""
    if len(want) != len(got):
        return False
    if _ids(want) == _ids(got):
        return True
    return {h.document.id for h in want} == {h.document.id for h in got} and all(
        abs(a.score - b.score) < 1e-5 for a, b in zip(want, got)
    )
