"""How fresh a search's hits and the index are: per-hit states and the index's watermark.

A hit's passage was read from its file when that file was indexed; the file may have changed
or gone since. :func:`check_hits` says, for the hits a search returns and only those, which
of :data:`~kbcli.types.FRESHNESS_STATES` each is in, with one ledger read for their distinct
files, one ``stat`` per distinct file (a hash only where the size matches and the mtime does
not: the content may be the same) and one read of which chunks have a vector:

- ``not_a_file``: the chunk's source has no ledger record (``kb add`` text, an agent's note);
- ``missing``: the file cannot be stat'ed or read;
- ``current``: size and mtime match the ledger (or the hash does);
- ``changed``: the file differs from what was indexed;
- ``vectors_pending``: current, but its vector is not stored yet (keyword search finds it,
  semantic search not yet).

:func:`index_watermark` says when the index last committed a change, whether an ingest is
writing now and how many chunks wait for a vector. :func:`apply_stale` is what ``--stale
hide|flag|fail`` does with the states.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from datetime import timezone
from typing import TypeVar

from kbcli.config.schema import Config
from kbcli.errors import IndexBehindError, InvalidOptionError, LoaderError
from kbcli.ingest.files import MB, read_content
from kbcli.protocols import (
    DocumentReader,
    FileLedger,
    FreshnessReads,
    IndexMetadata,
    supports,
)
from kbcli.stores.composite import CHANGED_AT
from kbcli.system.paths import source_path
from kbcli.types import (
    FRESHNESS_STATES,
    STALE_POLICIES,
    STALE_STATES,
    FileRecord,
    Freshness,
    SearchResult,
    Watermark,
    note_author,
)

__all__ = [
    "FRESHNESS_STATES",
    "STALE_POLICIES",
    "Freshness",
    "Watermark",
    "apply_stale",
    "check_hits",
    "settle",
    "index_watermark",
]

#: ``--stale hide`` recalls deeper while hidden hits leave fewer than k: k, 4k, 16k hits, never
#: more than HIDE_DEEPEST (each round a search again, each hit checked once)
HIDE_FACTOR = 4
HIDE_DEEPEST = 1000
#: the largest file hashed to tell a touched file from an edited one (limits.max_file_mb)
DEFAULT_HASH_LIMIT = int(200 * MB)


#: what a citation or reply says beside a source whose passage may not match its file
STATE_WORDS = {
    "changed": "changed since indexed",
    "missing": "file missing",
    "vectors_pending": "vector pending",
}


def state_words(fresh: Freshness | None) -> str | None:
    """What is said beside a source whose passage may not be what its file says now
    (``changed since indexed``, ``file missing``, ``vector pending``), else None."""
    return None if fresh is None else STATE_WORDS.get(fresh.state)


def stale_policy(value: str | None) -> str:
    """``value`` checked as a ``--stale`` policy (None: ``flag``)."""
    policy = "flag" if value is None else str(value).strip().lower()
    if policy not in STALE_POLICIES:
        raise InvalidOptionError(
            f"Unknown --stale policy {value!r}: choose one of {', '.join(STALE_POLICIES)}"
        )
    return policy


def hash_limit(config: Config | None) -> int:
    """The most bytes :func:`check_hits` hashes of one file: ``limits.max_file_mb`` (None:
    the default)."""
    mb = None if config is None else config.limits.max_file_mb
    return int(float(mb) * MB) if isinstance(mb, (int, float)) else DEFAULT_HASH_LIMIT


def _file_state(record: FileRecord, limit: int) -> str:
    """``current``, ``changed`` or ``missing`` for the file of ``record``, as it is now."""
    path = source_path(record.path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return "missing"
    if not stat.S_ISREG(st.st_mode):  # a folder or a FIFO where the file was: not readable
        return "missing"
    if st.st_size != record.size:
        return "changed"
    if st.st_mtime_ns == record.mtime_ns:
        return "current"
    try:  # touched, or edited to the same size: only the content can tell
        digest = read_content(path, limit, keep=False).sha256
    except (OSError, LoaderError):
        return "missing"
    return "current" if digest == record.sha256 else "changed"


def _records(store: object, sources: list[str]) -> dict[str, FileRecord] | None:
    """The ledger records of ``sources`` (None: the store keeps no ledger)."""
    if not sources:
        return {}
    if supports(store, FreshnessReads):
        return store.file_records_of(sources)
    if supports(store, FileLedger):  # a store of the user's: its whole ledger, filtered
        every = store.file_records()
        return {s: every[s] for s in sources if s in every}
    return None


def _with_vectors(store: object, ids: list[str]) -> set[str] | None:
    """Which of ``ids`` have a stored vector (None: the store cannot say)."""
    if not ids:
        return set()
    if not supports(store, DocumentReader):
        return None
    docs = store.get(ids, with_embeddings=True)
    return {d.id for d in docs if d.embedding is not None and len(d.embedding)}


def check_hits(
    store: object, results: Sequence[SearchResult], *, limit: int = DEFAULT_HASH_LIMIT
) -> None:
    """Set ``freshness`` on each of ``results`` (the hits a search returns), reading only
    what they need (module docstring); ``limit``: the most bytes hashed of one file. A store
    that keeps no ledger leaves them None (nothing is known)."""
    if not results:
        return
    sources: dict[str, None] = {}
    for result in results:
        meta = result.document.metadata
        source = meta.get("source")
        if isinstance(source, str) and note_author(meta) is None:
            sources[source] = None
    records = _records(store, list(sources))
    if records is None:
        return
    states = {path: _file_state(record, limit) for path, record in records.items()}
    current = [
        r.document.id
        for r in results
        if states.get(str(r.document.metadata.get("source"))) == "current"
    ]
    vectored = _with_vectors(store, current)
    for result in results:
        doc = result.document
        record = records.get(str(doc.metadata.get("source")))
        if record is None or note_author(doc.metadata) is not None:
            created = doc.created_at
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            result.freshness = Freshness("not_a_file", created.isoformat(timespec="seconds"))
            continue
        state = states[record.path]
        if state == "current" and vectored is not None and doc.id not in vectored:
            state = "vectors_pending"
        result.freshness = Freshness(state, record.indexed_at or None)


def is_stale(result: SearchResult) -> bool:
    """True when the hit's file changed or is gone since it was indexed."""
    fresh = result.freshness
    return fresh is not None and fresh.state in STALE_STATES


def stale_message(stale: Sequence[SearchResult]) -> str:
    """The one line ``--stale fail`` raises: which hits are stale and what to run."""
    names = list(dict.fromkeys(_label(r) for r in stale))
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"The index is behind: {shown} changed or went missing since it was indexed; run "
        "kb ingest on their folder (or --stale flag to see them marked, --stale hide to leave "
        "them out)"
    )


def _label(result: SearchResult) -> str:
    fresh = result.freshness
    state = fresh.state if fresh is not None else "?"
    return f"{result.document.metadata.get('source', result.document.id)} ({state})"


def apply_stale(results: list[SearchResult], policy: str) -> list[SearchResult]:
    """``results`` under ``policy``: ``flag`` keeps them, ``hide`` drops the stale ones,
    ``fail`` raises :class:`~kbcli.errors.IndexBehindError` (exit 6) naming them."""
    if policy == "flag":
        return results
    stale = [r for r in results if is_stale(r)]
    if not stale:
        return results
    if policy == "fail":
        raise IndexBehindError(stale_message(stale))
    return [r for r in results if not is_stale(r)]


def index_watermark(kb: object) -> Watermark:
    """How current ``kb``'s index is (a knowledge base, a view of one, or a store): when it
    last committed a change, whether an ingest is writing now, how many chunks wait for a
    vector. A store that cannot say leaves ``changed_at`` None, ``syncing`` False and
    ``vectors_pending`` 0."""
    store = store_of(kb)
    changed_at = store.get_meta(CHANGED_AT) if supports(store, IndexMetadata) else None
    if supports(store, FreshnessReads):
        return Watermark(changed_at, store.ingest_running(), store.vectors_missing())
    return Watermark(changed_at, False, 0)


def store_of(kb: object) -> object:
    """The store behind ``kb``: a view's knowledge base's, a knowledge base's, or ``kb``
    itself (a store). Any of the three is taken, so ``kb`` is read by duck typing."""
    inner = getattr(kb, "kb", None)  # a KnowledgeView
    if inner is not None:
        kb = inner
    store = getattr(kb, "store", None)
    return kb if store is None else store


Item = TypeVar("Item")


def settle(
    store: object,
    k: int,
    policy: str,
    ranked: Callable[[int], Sequence[Item]],
    result_of: Callable[[Item], SearchResult],
    *,
    limit: int = DEFAULT_HASH_LIMIT,
) -> list[Item]:
    """The first ``k`` items of ``ranked(depth)`` (a search returning its best ``depth``
    items: hits, or files) with their freshness checked, under ``policy``.

    ``flag``: as ranked. ``fail``: :class:`~kbcli.errors.IndexBehindError` when one of them is
    stale. ``hide``: the stale ones left out and the list filled up from deeper in the ranking
    (searched again at :data:`HIDE_FACTOR` times the depth, at most :data:`HIDE_DEEPEST`); an
    item already checked is not checked again."""
    depth = k
    known: dict[str, Freshness | None] = {}
    while True:
        items = list(ranked(depth))
        results = [result_of(item) for item in items[: depth if policy == "hide" else k]]
        unchecked = [r for r in results if r.document.id not in known]
        check_hits(store, unchecked, limit=limit)
        known.update((r.document.id, r.freshness) for r in unchecked)
        for result in results:
            result.freshness = known[result.document.id]
        if policy != "hide":
            apply_stale(results, policy)
            return items[:k]
        kept = [item for item in items if not is_stale(result_of(item))]
        if len(kept) >= k or len(items) < depth or depth >= HIDE_DEEPEST:
            return kept[:k]
        depth = min(depth * HIDE_FACTOR, max(HIDE_DEEPEST, k))
