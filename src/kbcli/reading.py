"""``kb get``: a file's indexed text with line numbers, or one chunk by id.

Line numbers are those the chunks record at ingest (``line``/``line_end``, computed from their
``char_start`` offsets in the file's text as loaded, and for text files mapped onto the
file's own lines by :mod:`kbcli.ingest.lines`), so ``kb search`` output (``path:line``),
``kb get path:line`` and ``$EDITOR +LINE path`` agree. When the file on disk still has the
bytes that were indexed (its SHA-256 matches the file ledger) its text is read again and shown
line by line (a text file as an editor numbers it, other formats as ingest loaded them);
otherwise (changed, moved, or a store without a ledger) the indexed chunks are shown, each at
the line it starts on.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidOptionError, KBError, NotFoundError
from .ingest import DefaultDocumentLoader
from .ingest.lines import file_lines, is_text_file
from .protocols import FileLedger

DEFAULT_COUNT = 20  # lines shown from PATH:LINE when no COUNT is given
_TARGET = re.compile(r"^(?P<path>.*?)(?::(?P<line>\d+)(?::(?P<count>\d+))?)?$", re.DOTALL)


@dataclass
class Shown:
    """What ``kb get`` prints: numbered lines of a file (``origin`` ``file``), of its chunks
    (``chunks``: one entry per chunk, numbered by its first line) or of one chunk (``chunk``)."""

    source: str | None
    origin: str
    lines: list[tuple[int, str]]
    total: int
    id: str | None = None
    metadata: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``kb get --json`` object."""
        return {
            "source": self.source,
            "origin": self.origin,
            "id": self.id,
            "metadata": self.metadata,
            "start_line": self.lines[0][0] if self.lines else None,
            "end_line": self.lines[-1][0] if self.lines else None,
            "total_lines": self.total,
            "lines": [{"line": n, "text": t} for n, t in self.lines],
        }


def parse_target(target: str) -> tuple[str, int | None, int | None]:
    """``"docs/a.md:40:10"`` -> ``("docs/a.md", 40, 10)``; ``"docs/a.md"`` -> no range."""
    match = _TARGET.match(target)
    assert match is not None  # the pattern matches every string
    line = int(match["line"]) if match["line"] else None
    count = int(match["count"]) if match["count"] else None
    if line == 0 or count == 0:
        raise InvalidOptionError(f"Lines count from 1 in {target!r}: use PATH:LINE[:COUNT]")
    return match["path"], line, count


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _find_source(kb: Any, path: str) -> tuple[str, list[Any]] | None:
    candidates = [path]
    try:
        resolved = str(Path(path).expanduser().resolve())
    except (OSError, RuntimeError, ValueError):
        resolved = path
    if resolved != path:
        candidates.append(resolved)
    for source in candidates:
        docs = list(kb.store.iter_documents(source=source))
        if docs:
            return source, docs
    return None


def _order(doc: Any) -> tuple[int, int]:
    meta = doc.metadata
    start, index = meta.get("char_start"), meta.get("chunk_index")
    return (start if isinstance(start, int) else -1, index if isinstance(index, int) else -1)


def _file_lines(kb: Any, source: str) -> list[str] | None:
    """The file's lines as ingest loaded them, when it still has the indexed bytes."""
    store = kb.store
    if not isinstance(store, FileLedger):
        return None
    record = store.file_records().get(source)
    path = Path(source)
    try:
        if record is None or not path.is_file() or _sha256(path) != record.sha256:
            return None
        loader = kb.ingestor.loader
        if isinstance(loader, DefaultDocumentLoader) and is_text_file(path):
            return file_lines(path, loader.encoding)  # numbered as an editor numbers them
        return loader.load(path).split("\n")
    except (OSError, KBError):  # unreadable now: fall back to the indexed chunks
        return None


def read_target(kb: Any, target: str) -> Shown:
    """What ``kb get TARGET`` shows (see the module docstring); raises NotFoundError."""
    if target and "/" not in target and ":" not in target:
        docs = kb.store.get([target])
        if docs:
            doc = docs[0]
            meta = doc.metadata
            line = meta.get("line") if isinstance(meta.get("line"), int) else 1
            source = meta.get("source")
            return Shown(
                str(source) if source is not None else None,
                "chunk",
                [(line, doc.text)],
                1,
                id=doc.id,
                metadata=meta,
            )
    found = _find_source(kb, target)
    line = count = None
    if found is None:
        path, line, count = parse_target(target)
        found = _find_source(kb, path) if path else None
    if found is None:
        raise NotFoundError(
            f"No indexed file or chunk id {target!r}: see 'kb list' for sources and ids"
        )
    source, docs = found
    first = line or 1
    last = None
    if line is not None:
        last = first + (count or DEFAULT_COUNT) - 1
    # Recognised text (OCR) is shown as indexed: loading the file again would recognise it again.
    recognised = any(doc.metadata.get("ocr") is True for doc in docs)
    lines = None if recognised else _file_lines(kb, source)
    if lines is not None:
        total = len(lines)
        if first > total:
            raise InvalidOptionError(f"Line {first} is past the end of {source} ({total} lines)")
        end = total if last is None else min(last, total)
        numbered = [(n, lines[n - 1]) for n in range(first, end + 1)]
        return Shown(source, "file", numbered, total)
    entries = []
    for doc in sorted(docs, key=_order):
        meta = doc.metadata
        start = meta.get("line")
        start = start if isinstance(start, int) else _order(doc)[1] + 1
        stop = meta.get("line_end")
        stop = stop if isinstance(stop, int) else start
        if stop >= first and (last is None or start <= last):
            entries.append((start, doc.text))
    notes = [
        f"{source}: showing the text OCR recognised when it was indexed, chunk by chunk"
        if recognised
        else f"{source} changed or is gone since it was indexed: showing its indexed chunks "
        "(run kb ingest to refresh)"
    ]
    if not entries:
        raise InvalidOptionError(f"No indexed chunk of {source} covers line {first}")
    return Shown(source, "chunks", entries, len(docs), notes=notes)
