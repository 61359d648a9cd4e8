"""Small keyword searches without numpy: the pack on disk read through ``mmap``.

A whole ``kb search --mode keyword`` does not import numpy (about 55 ms here, more than such a
search costs). When the query's postings are few, they are read from the pack on disk through
``mmap`` and ``memoryview.cast``, with the log's delta applied as :mod:`.packed` does (the
pack's slots of changed chunks are tombstones, their current postings come from their forward
indexes, touched sources' lengths from the table), and ranked by :func:`kbcli.text.bm25.rank`
itself, the reference executor. A large delta, many postings or a pack of another layout are
left to the numpy executor of :mod:`.packed`.
"""

from __future__ import annotations

import mmap
import os
import sqlite3
import sys
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbcli.stores.sqlite import catalog
from kbcli.stores.sqlite.catalog import BATCH, unpack_terms
from kbcli.stores.sqlite.packlog import current_seq, log_floor, read_header
from kbcli.text.bm25 import BM25Params, CorpusStats, QueryTerm, rank

# Up to this many postings the ranking in Python (~1 us a posting) costs less than importing
# numpy; beyond it the numpy executor runs. So does a delta of more chunks than SMALL_MAX_DELTA.
SMALL_MAX_POSTINGS = 20_000
SMALL_MAX_DELTA = 2_000
_FORMATS = {"<i8": "q", "<i4": "i"}  # the pack's dtypes as memoryview formats
_NEEDED = ("doc", "dl", "src", "srclen", "offsets", "slot", "tf")


@dataclass(frozen=True)
class SmallPack:
    """A pack's arrays as memoryviews of one read-only mapping."""

    tag: str
    seq: int
    arrays: dict[str, memoryview]


def open_pack(path: Path, tag: str) -> SmallPack | None:
    """The pack at ``path`` if it is whole, of ``tag`` and readable here; else None."""
    header = read_header(path)
    if header is None or header.get("tag") != tag or sys.byteorder != "little":
        return None
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size != int(header["size"]):
                return None
            whole = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        arrays = {}
        for name in _NEEDED:
            dtype, offset, count = header["arrays"][name]
            code = _FORMATS.get(dtype)
            if code is None:
                return None
            width = 8 if code == "q" else 4
            # code is one of the array formats above ("q", "i", "I", "f"): a valid cast
            arrays[name] = whole[offset : offset + count * width].cast(code)  # type: ignore[call-overload]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return SmallPack(tag, int(header["seq"]), arrays)


@dataclass
class Delta:
    """What changed since the pack: its dead slots, the changed chunks' current postings by
    term, and the touched sources' lengths."""

    dead: set[int]
    postings: dict[int, list[tuple[int, int, int, int]]]
    source_length: dict[int, int]


def delta(conn: sqlite3.Connection, pack: SmallPack) -> Delta | None:
    """The delta of ``conn``'s snapshot since ``pack``; None when this pack cannot serve it
    (outside the log's floor and end) or it holds more than :data:`SMALL_MAX_DELTA` chunks."""
    if pack.seq < log_floor(conn) or pack.seq > current_seq(conn):
        return None
    sql = "SELECT DISTINCT doc FROM keyword_log WHERE seq > ? LIMIT ?"
    changed = sorted(r[0] for r in conn.execute(sql, (pack.seq, SMALL_MAX_DELTA + 1)))
    if len(changed) > SMALL_MAX_DELTA:
        return None
    docs, srcs = pack.arrays["doc"], pack.arrays["src"]
    dead: set[int] = set()
    touched: set[int] = set()
    for d in changed:
        i = bisect_left(docs, d)
        if i < len(docs) and docs[i] == d:
            dead.add(i)
            touched.add(srcs[i])
    postings: dict[int, list[tuple[int, int, int, int]]] = {}
    for start in range(0, len(changed), BATCH):
        part = changed[start : start + BATCH]
        marks = ",".join("?" * len(part))
        sql = f"SELECT doc, length, src, terms FROM chunks WHERE doc IN ({marks})"
        for d, length, src, blob in conn.execute(sql, part):
            touched.add(src)
            for term, tf in unpack_terms(blob).items():
                postings.setdefault(term, []).append((d, src, tf, length))
    lengths: dict[int, int] = {}  # an emptied source has no row, and no chunk to score
    ids = sorted(touched)
    for start in range(0, len(ids), BATCH):
        part = ids[start : start + BATCH]
        marks = ",".join("?" * len(part))
        sql = f"SELECT id, length FROM sources WHERE id IN ({marks})"
        lengths.update(conn.execute(sql, part))
    return Delta(dead, postings, lengths)


def search(
    conn: sqlite3.Connection,
    pack: SmallPack,
    terms: Sequence[QueryTerm],
    stats: CorpusStats,
    filter: dict[str, Any] | None,
    k: int,
    params: BM25Params,
) -> list[tuple[int, float, float, float]] | None:
    """``(doc, score, chunk part, source part)`` of the ``k`` best chunks of ``conn``'s
    snapshot; None when its delta since ``pack`` is too large to apply here."""
    change = delta(conn, pack)
    if change is None:
        return None
    a = pack.arrays
    offsets, slot, tf = a["offsets"], a["slot"], a["tf"]
    doc, dl, src, srclen = a["doc"], a["dl"], a["src"], a["srclen"]
    dead = change.dead
    lists: dict[int, list[tuple[int, int, int, int]]] = {}
    for term in terms:
        t = int(term.term)
        found = []
        if t + 1 < len(offsets):
            lo, hi = offsets[t], offsets[t + 1]
            found = [
                (doc[s], src[s], f, dl[s]) for s, f in zip(slot[lo:hi], tf[lo:hi]) if s not in dead
            ]
        lists[t] = found + change.postings.get(t, [])
    allowed = None
    if filter:
        candidates = {p[0] for postings in lists.values() for p in postings}
        allowed = catalog.passing(conn, sorted(candidates), filter).__contains__
    lengths = change.source_length
    ranked = rank(
        terms,
        lambda t: lists[int(t)],
        lambda s: lengths[s] if s in lengths else srclen[s],
        stats,
        k,
        k1=params.k1,
        b=params.b,
        source_weight=params.source_weight,
        allowed=allowed,
    )
    return [(s.doc, s.score, s.chunk, s.source) for s in ranked]
