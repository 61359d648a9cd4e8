"""The settings recorded with each file: what besides its bytes decides its chunks (loader,
normaliser, chunker, OCR) and the ``--meta`` it was indexed with. A changed setting re-reads
the file on the next sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def file_settings(settings: str, kb: Any, path: Path) -> str:
    """``settings`` plus, for a file the loader may recognise by OCR (a PDF, an image), the
    OCR settings in effect (so installing the extra or changing ``ocr`` re-reads those)."""
    signature = getattr(kb.ingestor.loader, "ocr_signature", None)
    ocr = signature(path) if callable(signature) else None
    if not ocr:
        return settings
    return json.dumps({**json.loads(settings), "ocr": ocr}, sort_keys=True)


def chunk_settings(kb: Any) -> str:
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
