"""The keyword pack file (``<db>.keyword-pack``, see :mod:`.packed`): its arrays built from the
forward indexes, written (temp -> fsync -> rename) and mapped back."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbcli.stores.sqlite.catalog import NARROW_TAG
from kbcli.stores.sqlite.packlog import FORMAT, HEADER_SIZE, MAGIC, TF_RUNS, read_header
from kbcli.stores.sqlite.vectors import fsync_dir
from kbcli.system.crashpoints import crash_point

FETCH = 20_000  # chunk rows per step when packing
ARRAYS = ("doc", "dl", "src", "offsets", "slot", "tf", "srclen")


# --- building and mapping a pack --------------------------------------------------------------


Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]  # term ids, tfs, pairs per chunk


def term_pairs(blobs: list[bytes]) -> Pairs:
    """Forward indexes (:func:`.catalog.pack_terms`, either encoding) -> (term ids, tfs,
    pairs per chunk), in chunk order."""
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    narrow = (lengths & 1).astype(bool)
    if narrow.all():
        return _narrow_pairs(blobs, lengths)
    if not narrow.any():
        return _wide_pairs(blobs, lengths)
    # An index an older kbcli wrote, with chunks added since: each encoding at once, then
    # the pairs put back in chunk order (stable: a chunk's own pairs keep theirs).
    t1, f1, c1 = _narrow_pairs([b for b, n in zip(blobs, narrow) if n], lengths[narrow])
    t2, f2, c2 = _wide_pairs([b for b, n in zip(blobs, narrow) if not n], lengths[~narrow])
    counts = np.empty(len(blobs), np.int64)
    counts[narrow], counts[~narrow] = c1, c2
    owner = np.concatenate(
        [np.repeat(np.flatnonzero(narrow), c1), np.repeat(np.flatnonzero(~narrow), c2)]
    )
    order = np.argsort(owner, kind="stable")
    terms = np.concatenate([t1.astype(np.int64), t2])[order]
    return terms, np.concatenate([f1.astype(np.int64), f2])[order], counts


def _wide_pairs(blobs: list[bytes], lengths: np.ndarray) -> Pairs:
    flat = np.frombuffer(b"".join(blobs), "<i8").reshape(-1, 2)
    return flat[:, 0], flat[:, 1], lengths // 16


def _narrow_pairs(blobs: list[bytes], lengths: np.ndarray) -> Pairs:
    # Each blob is [tag][ids: 4n bytes][tfs: 2n bytes]: label every byte of the joined blobs
    # 0, 1 or 2 and take the id bytes and the tf bytes out in one pass each.
    counts = (lengths - 1) // 6
    raw = np.frombuffer(b"".join(blobs), np.uint8)
    spans = np.column_stack([np.ones_like(counts), 4 * counts, 2 * counts]).ravel()
    labels = np.repeat(np.tile(np.arange(3, dtype=np.uint8), len(blobs)), spans)
    if not (raw[labels == 0] == NARROW_TAG).all():
        raise ValueError("a forward index of unknown encoding in the chunks table")
    return raw[labels == 1].view("<u4"), raw[labels == 2].view("<u2"), counts


def build_arrays(conn: sqlite3.Connection) -> dict[str, np.ndarray]:
    """Every chunk's postings as of ``conn``'s snapshot, read from the forward indexes."""
    docs, dls, srcs, terms, tfs, slots = [], [], [], [], [], []
    rows = conn.execute("SELECT doc, length, src, terms FROM chunks ORDER BY doc")
    done = 0
    while batch := rows.fetchmany(FETCH):
        docs.append(np.fromiter((r[0] for r in batch), np.int64, len(batch)))
        dls.append(np.fromiter((r[1] for r in batch), np.int64, len(batch)))
        srcs.append(np.fromiter((r[2] for r in batch), np.int64, len(batch)))
        term, tf, counts = term_pairs([r[3] for r in batch])
        terms.append(term.astype(np.int32))
        tfs.append(tf.astype(np.int32))
        slots.append(np.repeat(np.arange(done, done + len(batch), dtype=np.int32), counts))
        done += len(batch)
    doc, dl, src = _cat(docs, np.int64), _cat(dls, np.int64), _cat(srcs, np.int64)
    term, tf, slot = _cat(terms, np.int32), _cat(tfs, np.int32), _cat(slots, np.int32)
    max_term = conn.execute("SELECT coalesce(max(id), 0) FROM terms").fetchone()[0]
    n_terms = int(max(max_term, int(term.max()) if len(term) else 0)) + 1
    lengths = np.bincount(term, minlength=n_terms)
    # Within a term, postings by tf (TF_RUNS and above as one), then slot (see TF_RUNS): the
    # sort is stable and chunks were read by doc. In place where it can be: every array here
    # is the size of every posting, keep few alive at once.
    if n_terms * (TF_RUNS + 1) >= 2**31:
        term = term.astype(np.int64)
    term *= TF_RUNS + 1
    term += np.minimum(tf, TF_RUNS)
    order = np.argsort(term, kind="stable")
    del term
    slot = slot[order]
    tf = tf[order]
    del order
    offsets = np.zeros(n_terms + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    sources = conn.execute("SELECT id, length FROM sources").fetchall()
    max_src = max([s for s, _ in sources] + [int(src.max()) if len(src) else 0])
    srclen = np.zeros(max_src + 1, np.int64)
    if sources:
        ids = np.fromiter((s for s, _ in sources), np.int64, len(sources))
        srclen[ids] = np.fromiter((n for _, n in sources), np.int64, len(sources))
    return {
        "doc": doc,
        "dl": dl.astype(np.int32),
        "src": src,
        "offsets": offsets,
        "slot": slot,
        "tf": tf,
        "srclen": srclen,
    }


def write_pack(path: Path, arrays: dict[str, np.ndarray], tag: str, seq: int) -> bool:
    """Write a pack atomically (temp -> fsync -> rename); False when it cannot be written.
    A pack on disk of the same tag and a later position is kept."""
    header: dict[str, Any] = {
        "tag": tag,
        "seq": seq,
        "format": FORMAT,
        "tf_runs": TF_RUNS,
        "arrays": {},
    }
    offset = HEADER_SIZE
    for name in ARRAYS:
        a = arrays[name]
        header["arrays"][name] = [a.dtype.str, offset, int(a.shape[0])]
        offset += (a.nbytes + 7) // 8 * 8
    header["size"] = offset
    head = MAGIC + json.dumps(header).encode()
    if len(head) > HEADER_SIZE:
        return False
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(head.ljust(HEADER_SIZE, b" "))
            for name in ARRAYS:
                a = np.ascontiguousarray(arrays[name])
                fh.write(a.data.cast("B"))
                crash_point("keyword-pack-write")
                fh.write(b"\0" * ((8 - a.nbytes % 8) % 8))
            fh.flush()
            os.fsync(fh.fileno())
        existing = read_header(path)
        if existing and existing.get("tag") == tag and int(existing.get("seq", -1)) > seq:
            tmp.unlink(missing_ok=True)
            return True
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def map_pack(path: Path, tag: str) -> Pack | None:
    """The pack on disk if it is whole and of ``tag``; None otherwise."""
    header = read_header(path)
    if header is None or header.get("tag") != tag:
        return None
    try:
        if path.stat().st_size != int(header["size"]):
            return None
        raw = np.memmap(path, np.uint8, "r")
        arrays = {
            name: np.frombuffer(raw, np.dtype(dt), count, offset)
            for name, (dt, offset, count) in header["arrays"].items()
        }
        if set(arrays) != set(ARRAYS):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Pack(tag, int(header["seq"]), arrays)


def _cat(parts: list[np.ndarray], dtype: type[np.generic]) -> np.ndarray:
    """``parts`` end to end (an empty array of ``dtype`` when there are none)."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


@dataclass
class Pack:
    """A mapped pack: its tag, its log position and its arrays."""

    tag: str
    seq: int
    arrays: dict[str, np.ndarray]
