"""The settings recorded with each file: what besides its bytes decides its chunks (loader,
normaliser, chunker, OCR) and the ``--meta`` it was indexed with. A changed setting re-reads
the file on the next sync."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbcli.ingest.writes import Indexable
from kbcli.protocols import DocumentReader
from kbcli.text import analysis
from kbcli.text.analysis import TITLE_KEY
from kbcli.types import Document, FileRecord


def file_settings(settings: str, kb: Indexable, path: Path) -> str:
    """``settings`` plus, for a file the loader may recognise by OCR (a PDF, an image), the
    OCR settings in effect (so installing the extra or changing ``ocr`` re-reads those)."""
    signature = getattr(kb.ingestor.loader, "ocr_signature", None)
    ocr = signature(path) if callable(signature) else None
    if not ocr:
        return settings
    return json.dumps({**json.loads(settings), "ocr": ocr}, sort_keys=True)


def chunk_settings(kb: Indexable) -> str:
    """What, besides the file's bytes, decides its chunks: loader, normaliser and chunker."""
    ingestor = kb.ingestor
    chunker = ingestor.chunker
    parts = {
        "loader": type(ingestor.loader).__name__,
        "normalizer": type(ingestor.normalizer).__name__,
        "chunker": type(chunker).__name__,
        "chunk_size": getattr(chunker, "chunk_size", None),
        "chunk_overlap": getattr(chunker, "chunk_overlap", getattr(chunker, "overlap", None)),
        "version": 3,  # 2: chunks record line / line_end; 3: a bare heading opens the next block
    }
    return json.dumps(parts, sort_keys=True)


def settings_with_meta(settings: str, meta: dict[str, Any] | None) -> str:
    """A file record's ``settings``: the chunk settings plus the ``--meta`` it was indexed
    with (``meta`` key; absent when none was given)."""
    if not meta:
        return settings
    try:
        data = json.loads(settings)
    except ValueError:
        return settings
    data["meta"] = dict(sorted(meta.items()))
    return json.dumps(data, sort_keys=True)


def split_settings(recorded: str) -> tuple[str, dict[str, Any]]:
    """``(chunk settings, meta)`` of a recorded ``settings`` string (see
    :func:`settings_with_meta`); an unreadable string is all chunk settings and no meta."""
    try:
        data = json.loads(recorded)
    except ValueError:
        return recorded, {}
    if not isinstance(data, dict):
        return recorded, {}
    meta = data.pop("meta", None)
    return json.dumps(data, sort_keys=True), meta if isinstance(meta, dict) else {}


def relabel(
    store: DocumentReader,
    record: FileRecord,
    old: dict[str, Any],
    new: dict[str, Any],
    settings: str,
) -> tuple[FileRecord, list[Document], None, list[list[float] | None]]:
    """The file's chunks with ``old`` meta keys swapped for ``new`` ones, same ids, texts and
    vectors (no embedder call), and its record with the new meta."""
    docs = list(store.iter_documents(source=record.path, with_embeddings=True))
    # The title as build_documents gives it: --meta title wins, else the first heading or name.
    in_order = sorted(docs, key=lambda d: d.metadata.get("chunk_index", 0))
    title = new.get(TITLE_KEY) or analysis.document_title(
        (d.metadata.get("heading") for d in in_order), record.path
    )
    relabelled = []
    for doc in docs:
        kept = {
            k: v
            for k, v in doc.metadata.items()
            if (k not in old or k in _OWN_KEYS) and k != TITLE_KEY
        }
        metadata = {**new, **kept}  # as build_documents: the chunk's own keys win
        if title:
            metadata[TITLE_KEY] = title
        relabelled.append(Document(doc.id, doc.text, metadata, doc.created_at, doc.embedding))
    vectors = [d.embedding for d in relabelled]  # a missing one comes from the cache
    fresh = FileRecord(
        record.path,
        record.size,
        record.mtime_ns,
        record.sha256,
        settings_with_meta(settings, new),
        [d.id for d in relabelled],
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return fresh, relabelled, None, vectors


# Metadata a file's chunks get from ingest itself, never from --meta.
_OWN_KEYS = frozenset(
    {"source", "chunk_index", "page", "heading", "char_start", "char_end", "line", "line_end"}
) | {"ocr"}
