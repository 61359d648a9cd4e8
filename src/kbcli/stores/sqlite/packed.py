"""Packed postings: the keyword index's read-optimised copy, scored with numpy.

The forward indexes and ``terms``/``sources`` tables stay the transactional truth; this module only
reads them. A pack file beside the database (``<db>.keyword-pack``) holds, as of one position
``seq`` of ``keyword_log``: every chunk as a slot (doc id, length, source), every term's
postings as slot and tf arrays (ordered by tf, then slot: runs of one tf, see :data:`TF_RUNS`),
and the source lengths. Every write appends the chunks it adds or removes to ``keyword_log`` in
its own transaction, so a search sees the *delta* since the pack exactly: the pack's slots of
those chunks are tombstones, their current postings come from the chunks' forward index, and
the statistics (df, sdf, N, lengths) always come from the tables. Every committed write is
visible at once. When the delta outgrows :data:`MERGE_FRACTION` of the corpus, the searching
process writes a new pack from its snapshot (temp -> fsync -> rename, outside any write lock):
a crash leaves the old pack or none, and both are valid. The file is tagged with the index id
and the keyword epoch (a re-analysis starts a new one); writers prune log rows a pack on disk
already holds and record that floor, so a pack older than the floor is rebuilt, never trusted.

Scores are :func:`kbcli.bm25.rank`'s arithmetic in float64 (checked by the parity test). The
file's layout has a version (``packlog.FORMAT`` and ``TF_RUNS``, in the header): a
pack of another layout is stale, replaced by the next search like a missing one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...bm25 import CorpusStats
from ...crashpoints import crash_point
from .packlog import (
    FORMAT,
    HEADER_SIZE,
    MAGIC,
    TF_RUNS,
    current_seq,
    log_floor,
    read_header,
)
from .vectors import fsync_dir

FETCH = 20_000  # chunk rows per step when packing
MERGE_MIN = 2_000  # delta chunks tolerated before a new pack, at least ...
MERGE_FRACTION = 0.05  # ... or this fraction of the corpus
SPARSE_RATIO = 8  # postings below slots / this: scored over the hit chunks only, not all slots
SCRATCH_TERMS = 4  # terms whose source sums share one pass of the sparse scorer
SCOPE_TERMS = 65_536  # terms whose frequencies in a scope are kept for its generation
FILTER_PROBE = 2_000  # postings (or 1/16 of the slots) up to which a new filter is checked
# for the candidates only
ARRAYS = ("doc", "dl", "src", "offsets", "slot", "tf", "srclen")


# --- building and mapping a pack --------------------------------------------------------------


def _pairs(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward indexes -> (term ids, tfs, pairs per chunk)."""
    counts = np.fromiter((len(b) // 16 for b in blobs), np.int64, len(blobs))
    flat = np.frombuffer(b"".join(blobs), "<i8").reshape(-1, 2)
    return flat[:, 0], flat[:, 1], counts


def build_arrays(conn: sqlite3.Connection) -> dict[str, np.ndarray]:
    """Every chunk's postings as of ``conn``'s snapshot, read from the forward indexes."""
    docs, dls, srcs, terms, tfs, slots = [], [], [], [], [], []
    rows = conn.execute("SELECT doc, length, src, terms FROM chunks ORDER BY doc")
    done = 0
    while batch := rows.fetchmany(FETCH):
        docs.append(np.fromiter((r[0] for r in batch), np.int64, len(batch)))
        dls.append(np.fromiter((r[1] for r in batch), np.int64, len(batch)))
        srcs.append(np.fromiter((r[2] for r in batch), np.int64, len(batch)))
        term, tf, counts = _pairs([r[3] for r in batch])
        terms.append(term.astype(np.int32))
        tfs.append(tf.astype(np.int32))
        slots.append(np.repeat(np.arange(done, done + len(batch), dtype=np.int32), counts))
        done += len(batch)
    cat = lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dt)  # noqa: E731
    doc, dl, src = cat(docs, np.int64), cat(dls, np.int64), cat(srcs, np.int64)
    term, tf, slot = cat(terms, np.int32), cat(tfs, np.int32), cat(slots, np.int32)
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
                fh.write(memoryview(a).cast("B"))
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


@dataclass
class Pack:
    """A mapped pack: its tag, its log position and its arrays."""

    tag: str
    seq: int
    arrays: dict[str, np.ndarray]


# --- the searchable view: pack + delta ----------------------------------------------------------


@dataclass
class View:
    """The index as of one snapshot: the pack's slots plus the delta's, tombstones, source
    lengths; caches that live as long as the snapshot's generation."""

    pack: Pack
    doc: np.ndarray
    dl: np.ndarray
    src: np.ndarray
    srclen: np.ndarray
    alive: np.ndarray | None  # None: every slot is alive
    delta_term: np.ndarray  # sorted term ids of the delta's postings
    delta_slot: np.ndarray
    delta_tf: np.ndarray
    _norms: dict[tuple[float, float, float], tuple[np.ndarray, list[np.ndarray]]] = field(
        default_factory=dict
    )
    _source_norm: dict[tuple[float, float, float], np.ndarray] = field(default_factory=dict)
    _slot_of: np.ndarray | None = None
    _visible: Visible | None = None
    _spare: list[Scratch] = field(default_factory=list)

    @property
    def slots(self) -> int:
        """Number of slots (pack chunks plus delta chunks)."""
        return int(self.doc.shape[0])

    def norms(self, avgdl: float, k1: float, b: float) -> tuple[np.ndarray, list[np.ndarray]]:
        """Per slot: ``norm = k1 * (1 - b + b * dl / avgdl)``, and for each tf below
        :data:`TF_RUNS` the score ``tf * (k1 + 1) / (tf + norm)`` before the term's weight."""
        key = (avgdl, k1, b)
        if key not in self._norms:
            scale = b / avgdl if avgdl > 0 else 0.0
            norm = k1 * ((1.0 - b) + scale * self.dl.astype(np.float64))
            tables = [(tf * (k1 + 1.0)) / (tf + norm) for tf in range(1, TF_RUNS)]
            self._norms = {key: (norm, tables)}
        return self._norms[key]

    def source_norm(self, avgsl: float, k1: float, b: float) -> np.ndarray:
        """``k1 * (1 - b + b * length / avgsl)`` per source (1 for a source of length 0 when b
        is 1: it holds no postings, so it scores 0 either way)."""
        key = (avgsl, k1, b)
        if key not in self._source_norm:
            self._source_norm = {key: source_norm(self.srclen, avgsl, k1, b)}
        return self._source_norm[key]

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(slots, tfs) of ``term``: the pack's (by tf, then slot), then the delta's."""
        a = self.pack.arrays
        offsets = a["offsets"]
        if term + 1 < offsets.shape[0]:
            lo, hi = offsets[term : term + 2].tolist()
            slot, tf = a["slot"][lo:hi], a["tf"][lo:hi]
        else:
            slot, tf = a["slot"][:0], a["tf"][:0]
        if self.delta_term.shape[0]:
            lo, hi = np.searchsorted(self.delta_term, [term, term + 1])
            if hi > lo:
                slot = np.concatenate([slot, self.delta_slot[lo:hi]])
                tf = np.concatenate([tf, self.delta_tf[lo:hi]])
        return slot, tf

    def runs(self, term: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """``term``'s postings: the pack's slots of tf 1, 2, .. :data:`TF_RUNS` - 1 (one
        array each), then the other slots and their tfs (higher tfs, the delta's postings)."""
        a = self.pack.arrays
        offsets = a["offsets"]
        if term + 1 < offsets.shape[0]:
            lo, hi = int(offsets[term]), int(offsets[term + 1])
            slot, tf = a["slot"][lo:hi], a["tf"][lo:hi]
        else:
            slot, tf = a["slot"][:0], a["tf"][:0]
        cuts = np.searchsorted(tf, np.arange(1, TF_RUNS + 1)).tolist()
        equal = [slot[cuts[i] : cuts[i + 1]] for i in range(TF_RUNS - 1)]
        slot, tf = slot[cuts[-1] :], tf[cuts[-1] :]
        if self.delta_term.shape[0]:
            lo, hi = np.searchsorted(self.delta_term, [term, term + 1])
            if hi > lo:
                slot = np.concatenate([slot, self.delta_slot[lo:hi]])
                tf = np.concatenate([tf, self.delta_tf[lo:hi]])
        return equal, slot, tf

    def visible(self, allowed: np.ndarray | None = None) -> Visible:
        """The slots a search may rank: live ones, and of those the ``allowed`` (per slot)."""
        if allowed is None:
            if self._visible is None:
                self._visible = Visible(self.alive, self.src, self.srclen.shape[0])
            return self._visible
        mask = allowed if self.alive is None else self.alive & allowed
        return Visible(mask, self.src, self.srclen.shape[0])

    def scratch(self) -> Scratch:
        """Zeroed work arrays for one search (taken from the spare ones, or new): a thread
        takes its own, so concurrent searches of one view never share them."""
        try:
            return self._spare.pop()
        except IndexError:
            return Scratch(self.slots, self.srclen.shape[0])

    def release(self, scratch: Scratch) -> None:
        """Give back a :meth:`scratch` zeroed again (one that is not is dropped instead)."""
        self._spare.append(scratch)

    def slot_of(self, docs: np.ndarray) -> np.ndarray:
        """The live slot of each doc id (all must exist)."""
        if self._slot_of is None:
            live = np.arange(self.slots) if self.alive is None else np.flatnonzero(self.alive)
            table = np.full(int(self.doc.max()) + 2 if self.slots else 1, -1, np.int64)
            table[self.doc[live]] = live
            self._slot_of = table
        return self._slot_of[docs]


def source_norm(srclen: np.ndarray, avgsl: float, k1: float, b: float) -> np.ndarray:
    """:meth:`View.source_norm` for the source lengths ``srclen``."""
    scale = b / avgsl if avgsl > 0 else 0.0
    norm = k1 * ((1.0 - b) + scale * srclen.astype(np.float64))
    norm[norm == 0] = 1.0
    return norm


class Scope:
    """An access scope over a view (:mod:`kbcli.bm25`, "Scopes"): its live slots (``mask``),
    the statistics of those chunks alone and each source's length over them. Made once per
    (scope, generation) from the allowed-slot bitmap: a few passes of numpy over the slots,
    no read of the database."""

    def __init__(self, view: View, mask: np.ndarray):
        self.mask = mask
        src, dl = view.src[mask], view.dl[mask]
        size = view.srclen.shape[0]
        chunks = np.bincount(src, minlength=size)
        self.srclen = np.bincount(src, weights=dl, minlength=size).astype(np.int64)
        self.stats = CorpusStats(int(src.shape[0]), int(dl.sum()), int(np.count_nonzero(chunks)))
        # each slot's source in the scope, or the sink ``size`` for a slot outside it
        self._bucket = np.where(mask, view.src, size).astype(np.intp)
        self._bucket_sink = size
        self._norm: tuple[tuple[float, float, float], np.ndarray] | None = None
        self._visible = view.visible(mask)
        self._view = view
        self._terms: dict[int, tuple[int, int]] = {}

    @property
    def visible(self) -> Visible:
        """The scope's slots as a :class:`Visible` (kept: its buckets are made once)."""
        return self._visible

    def frequencies(self, term: int) -> tuple[int, int]:
        """``(df, sdf)`` of ``term`` inside the scope: counted over its postings when first
        asked, then kept (as ``terms`` keeps the index-wide ones) while the scope lives, that
        is for the generation of its view (:data:`SCOPE_TERMS` at most)."""
        found = self._terms.get(term)
        if found is None:
            if len(self._terms) >= SCOPE_TERMS:
                self._terms.clear()
            found = self._terms[term] = self._count(self._view.postings(term)[0])
        return found

    def _count(self, slots: np.ndarray) -> tuple[int, int]:
        buckets = self._bucket.take(slots)
        # each call its own marks: concurrent searches share the scope (kb mcp's threads)
        seen = np.zeros(self._bucket_sink + 1, bool)
        seen[buckets] = True
        seen[-1] = False  # the sink
        sdf = int(np.count_nonzero(seen))
        if not sdf:
            return 0, 0
        return int(np.count_nonzero(buckets != self._bucket_sink)), sdf

    def source_norm(self, avgsl: float, k1: float, b: float) -> np.ndarray:
        """:meth:`View.source_norm` over the scope's source lengths."""
        key = (avgsl, k1, b)
        if self._norm is None or self._norm[0] != key:
            self._norm = (key, source_norm(self.srclen, avgsl, k1, b))
        return self._norm[1]


class Scratch:
    """Zeroed accumulators of the sparse scorer: one value per slot, one per (term, source)
    for :data:`SCRATCH_TERMS` terms. Zero pages cost no memory until a search touches them."""

    def __init__(self, slots: int, sources: int):
        self.chunk = np.zeros(slots)
        self.sources = np.zeros(SCRATCH_TERMS * sources)


class Visible:
    """Which slots a search ranks: ``mask`` (None: all) and the bucket each slot counts in per
    source: its source, or for a hidden slot a shadow of it past the ``sources`` real ones, so
    a hidden chunk never counts in its source's score (a filter is a pre-filter). Shadows,
    not one sink: counting most postings into one bucket serialises the increments."""

    def __init__(self, mask: np.ndarray | None, src: np.ndarray, sources: int):
        self.mask = mask
        self._all_src = src
        self.sources = sources
        self.buckets = sources if mask is None else 2 * sources

    @cached_property
    def src(self) -> np.ndarray:
        """Each slot's bucket (made when first needed: the sparse executor never needs it)."""
        if self.mask is None:
            return self._all_src
        return np.where(self.mask, self._all_src, self._all_src + self.sources)


def make_view(conn: sqlite3.Connection, pack: Pack) -> View | None:
    """Pack + the log's delta as of ``conn``'s snapshot; None when the delta is too large
    (a new pack is due) or the pack is from another snapshot than this one can use."""
    if pack.seq < log_floor(conn) or pack.seq > current_seq(conn):
        return None
    a = pack.arrays
    sql = "SELECT DISTINCT doc FROM keyword_log WHERE seq > ?"
    changed = [r[0] for r in conn.execute(sql, (pack.seq,))]
    n = conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]
    if len(changed) > max(MERGE_MIN, MERGE_FRACTION * n):
        return None
    empty_i = np.zeros(0, np.int64)
    if not changed:
        return View(pack, a["doc"], a["dl"], a["src"], a["srclen"], None, empty_i, empty_i, empty_i)
    changed_arr = np.array(sorted(changed), np.int64)
    pos = np.searchsorted(a["doc"], changed_arr)
    pos = pos[pos < a["doc"].shape[0]]
    dead = pos[a["doc"][pos] == changed_arr[: len(pos)]] if len(pos) else pos
    # changed_arr[:len(pos)] lines up because positions beyond the end were only at its tail
    rows = []
    for start in range(0, len(changed), 500):
        part = changed[start : start + 500]
        marks = ",".join("?" * len(part))
        rows.extend(
            conn.execute(
                f"SELECT doc, length, src, terms FROM chunks WHERE doc IN ({marks}) ORDER BY doc",
                part,
            )
        )
    m = a["doc"].shape[0]
    new_doc = np.array([r[0] for r in rows], np.int64)
    new_dl = np.array([r[1] for r in rows], np.int32)
    new_src = np.array([r[2] for r in rows], np.int64)
    alive = np.ones(m + len(rows), bool)
    alive[dead] = False
    if rows:
        term, tf, counts = _pairs([r[3] for r in rows])
        slot = np.repeat(np.arange(m, m + len(rows), dtype=np.int64), counts)
        order = np.argsort(term, kind="stable")
        delta = term[order].astype(np.int64), slot[order], tf[order].astype(np.int64)
    else:
        delta = empty_i, empty_i, empty_i
    touched = sorted(set(a["src"][dead].tolist()) | set(new_src.tolist()))
    size = max([a["srclen"].shape[0]] + [s + 1 for s in touched])
    srclen = np.zeros(size, np.int64)
    srclen[: a["srclen"].shape[0]] = a["srclen"]
    srclen[touched] = 0
    for start in range(0, len(touched), 500):
        part = touched[start : start + 500]
        marks = ",".join("?" * len(part))
        for s, length in conn.execute(
            f"SELECT id, length FROM sources WHERE id IN ({marks})", part
        ):
            srclen[s] = length
    return View(
        pack,
        np.concatenate([a["doc"], new_doc]),
        np.concatenate([a["dl"], new_dl]),
        np.concatenate([a["src"], new_src]),
        srclen,
        alive,
        *delta,
    )


# --- scoring -----------------------------------------------------------------------------------


class Weighted(NamedTuple):
    """A query term as the executor needs it: id and its chunk and source weights (a tuple:
    made for every term of every query, a frozen dataclass costs a microsecond each)."""

    term: int
    chunk_weight: float
    source_weight: float


def score(
    view: View,
    terms: list[Weighted],
    k: int,
    *,
    avgdl: float,
    avgsl: float,
    k1: float,
    b: float,
    source_weight: float,
    allowed: Visible | np.ndarray | None,
    scope: Scope | None = None,
) -> list[tuple[int, float, float, float]]:
    """:func:`kbcli.bm25.rank` over the view: ``(doc, score, chunk part, source part)``, best
    first, ties by lower doc id. ``allowed`` is the pre-filter: a :class:`Visible` of the
    view, or a mask per slot (within ``scope``, whose source lengths count then)."""
    if k <= 0:
        return []
    vis = allowed if isinstance(allowed, Visible) else view.visible(allowed)
    if scope is None:
        source_norm = view.source_norm(avgsl, k1, b)
    else:
        source_norm = scope.source_norm(avgsl, k1, b)
    lists = [(t, *view.postings(t.term)) for t in terms]
    if sum(s.shape[0] for _, s, _ in lists) * SPARSE_RATIO < view.slots:
        norm = view.norms(avgdl, k1, b)[0]
        return _score_sparse(view, lists, k, norm, vis.mask, k1, source_weight, source_norm)
    runs = [(t, *view.runs(t.term)) for t in terms]
    return _score_dense(view, runs, k, avgdl, k1, b, source_weight, source_norm, vis)


def _score_dense(
    view: View,
    runs: list[tuple[Weighted, list[np.ndarray], np.ndarray, np.ndarray]],
    k: int,
    avgdl: float,
    k1: float,
    b: float,
    source_weight: float,
    source_norm: np.ndarray,
    vis: Visible,
) -> list[tuple[int, float, float, float]]:
    """:func:`score` for long postings, over dense per-slot and per-source arrays.

    Most postings have tf 1 and score ``weight * table[slot]`` (:meth:`View.norms`): those
    of every term are summed as weights per slot, one scatter each, and multiplied by the
    table once; the other runs of one tf gather their table, the rest take the formula. A
    term's source part counts its postings per source (:class:`Visible`). Ranking: the
    k-th best total among one term's postings above tf 1 is a lower bound of the final k-th,
    and a slot whose chunk part plus the best source part stays below it is never ranked."""
    norm, tables = view.norms(avgdl, k1, b)
    n_src = view.srclen.shape[0]
    chunk = np.zeros(view.slots)  # the tf-1 weights, then the chunk part
    src_score = np.zeros(n_src)
    width = vis.buckets
    later_slots: list[np.ndarray] = []
    later_parts: list[np.ndarray] = []
    probe = None
    for t, equal, slot, tf in sorted(runs, key=lambda r: -r[0].chunk_weight):
        np.add.at(chunk, equal[0], t.chunk_weight)
        own = [e for e in equal[1:] if e.shape[0]]
        later_parts += [t.chunk_weight * table.take(e) for e, table in zip(equal[1:], tables[1:])]
        later_slots += equal[1:]
        if slot.shape[0]:
            f = tf.astype(np.float64)
            later_parts.append((t.chunk_weight * (k1 + 1.0)) * f / (f + norm.take(slot)))
            later_slots.append(slot)
            own.append(slot)
        if probe is None and own:
            # distinct slots (one term's), among the likely best: the postings above tf 1
            candidates = np.concatenate(own)
            if vis.mask is not None:
                candidates = candidates[vis.mask[candidates]]
            probe = candidates if candidates.shape[0] >= k else None
        if source_weight:
            per = np.bincount(vis.src.take(equal[0]), minlength=width)[:n_src]
            for tf_value, e in enumerate(equal[1:], 2):
                if e.shape[0]:
                    per += tf_value * np.bincount(vis.src.take(e), minlength=width)[:n_src]
            v = per.astype(np.float64)
            if slot.shape[0]:
                v += np.bincount(vis.src.take(slot), weights=tf, minlength=width)[:n_src]
            src_score += (t.source_weight * (k1 + 1.0)) * v / (v + source_norm)
    chunk *= tables[0]
    if later_slots:
        np.add.at(chunk, np.concatenate(later_slots), np.concatenate(later_parts))
    if probe is not None:
        floor = np.partition(chunk[probe] + source_weight * src_score[vis.src[probe]], -k)[-k]
        best_source = source_weight * float(src_score.max()) if n_src else 0.0
        lower = floor - best_source
        lower -= 1e-9 * (abs(floor) + 1.0)  # float rounding of the sums: never drop a tie
        hit = np.flatnonzero(chunk >= lower) if lower > 0 else np.flatnonzero(chunk > 0)
    else:
        hit = np.flatnonzero(chunk > 0)
    hit = hit[chunk[hit] > 0]
    if vis.mask is not None:
        hit = hit[vis.mask[hit]]
    if hit.shape[0] == 0:
        return []
    source_part = src_score[vis.src[hit]] if source_weight else np.zeros(hit.shape[0])
    return _top(view, hit, chunk[hit], source_part, k, source_weight)


def _top(
    view: View,
    slots: np.ndarray,
    chunk_part: np.ndarray,
    source_part: np.ndarray,
    k: int,
    source_weight: float,
) -> list[tuple[int, float, float, float]]:
    """The ``k`` best of ``slots`` by total score, ties by lower doc id."""
    total = chunk_part + source_weight * source_part
    if total.shape[0] > k:
        kth = np.partition(total, -k)[-k]
        keep = np.flatnonzero(total >= kth)
    else:
        keep = np.arange(total.shape[0])
    docs = view.doc[slots[keep]]
    best = keep[np.lexsort((docs, -total[keep]))][:k]
    return [
        (int(view.doc[slots[j]]), float(total[j]), float(chunk_part[j]), float(source_part[j]))
        for j in best
    ]


def _score_sparse(
    view: View,
    lists: list[tuple[Weighted, np.ndarray, np.ndarray]],
    k: int,
    norm: np.ndarray,
    visible: np.ndarray | None,
    k1: float,
    source_weight: float,
    source_norm: np.ndarray,
) -> list[tuple[int, float, float, float]]:
    """:func:`score` for short postings: the sums go through zeroed scratch arrays of the view
    (scatter, gather, zero again), so a query costs a fixed few dozen numpy calls whatever its
    number of terms up to :data:`SCRATCH_TERMS`; no sort but the final one of the best few.

    Each entry is one posting (a slot may occur once per term): the chunk part is summed per
    slot; a term's source part counts its visible postings' tfs per source, and a slot takes the
    sum over terms of its source's parts."""
    # intp: numpy's fancy indexing converts any other index type on every use
    slot = np.concatenate([s for _, s, _ in lists], dtype=np.intp)
    if slot.shape[0] == 0:
        return []
    scratch = view.scratch()
    lengths = [s.shape[0] for _, s, _ in lists]
    tf = np.concatenate([f for _, _, f in lists]).astype(np.float64)
    weights = np.array([t.chunk_weight * (k1 + 1.0) for t, _, _ in lists])
    parts = weights.repeat(lengths) * tf / (tf + norm.take(slot))
    chunk = scratch.chunk
    np.add.at(chunk, slot, parts)
    chunk_part = chunk.take(slot)
    chunk[slot] = 0.0
    shown = None if visible is None else visible.take(slot)
    if source_weight:
        counted = tf if shown is None else tf * shown
        source_part = _sparse_sources(view, scratch, lists, lengths, slot, counted, k1,
                                      source_norm)  # fmt: skip
    else:
        source_part = np.zeros(slot.shape[0])
    view.release(scratch)
    total = chunk_part + source_weight * source_part
    # Only shown entries are ranked (not the others at -inf: np.partition slows down
    # severalfold on many equal values).
    entries = None if shown is None else np.flatnonzero(shown)
    ranked = total if entries is None else total.take(entries)
    # A slot occurs at most once per term: the best len(lists) * k entries hold k slots.
    keep = min(ranked.shape[0], len(lists) * k)
    if keep < ranked.shape[0]:
        best = np.flatnonzero(ranked >= np.partition(ranked, -keep)[-keep])
    else:
        best = np.arange(ranked.shape[0])
    if entries is not None:
        best = entries.take(best)
    docs = view.doc.take(slot.take(best))
    ranked = total.take(best)
    order = np.lexsort((docs, -ranked))
    best = best.take(order)
    rows = zip(docs.take(order).tolist(), ranked.take(order).tolist(),
               chunk_part.take(best).tolist(), source_part.take(best).tolist())  # fmt: skip
    out: list[tuple[int, float, float, float]] = []
    for row in rows:  # a slot's entries are equal, so they are neighbours here
        if len(out) >= k:
            break
        if not out or out[-1][0] != row[0]:
            out.append(row)
    return out


def _sparse_sources(
    view: View,
    scratch: Scratch,
    lists: list[tuple[Weighted, np.ndarray, np.ndarray]],
    lengths: list[int],
    slot: np.ndarray,
    counted: np.ndarray,
    k1: float,
    source_norm: np.ndarray,
) -> np.ndarray:
    """Each entry's source part for :func:`_score_sparse`: for up to :data:`SCRATCH_TERMS`
    terms at a time, the (term, source) sums of the ``counted`` tfs (0 for a hidden chunk) in
    ``scratch.sources`` (row per term), replaced by their score, then summed over the rows for
    each entry's source."""
    src = view.src.take(slot)
    n_src = source_norm.shape[0]
    table = scratch.sources
    out = np.zeros(slot.shape[0])
    start = 0
    for first in range(0, len(lists), SCRATCH_TERMS):
        group = lists[first : first + SCRATCH_TERMS]
        width = lengths[first : first + SCRATCH_TERMS]
        end = start + sum(width)
        rows = len(group)
        s = src[start:end]
        key = s + np.arange(0, rows * n_src, n_src).repeat(width)
        np.add.at(table, key, counted[start:end])
        v = table.take(key)
        weights = np.array([t.source_weight * (k1 + 1.0) for t, _, _ in group])
        # every entry of one (term, source) writes the same score: duplicates are harmless
        table[key] = weights.repeat(width) * v / (v + source_norm.take(s))
        out += table[: rows * n_src].reshape(rows, n_src).take(src, axis=1).sum(axis=0)
        table[key] = 0.0
        start = end
    return out


def triples(view: View) -> tuple[np.ndarray, ...]:
    """Every live posting of ``view`` as sorted (doc, term, tf) columns, then (doc, dl) and
    the live sources' lengths: what :func:`kbcli.stores.sqlite.integrity.problems` compares."""
    a = view.pack.arrays
    counts = np.diff(a["offsets"])
    term = np.concatenate([np.repeat(np.arange(counts.shape[0]), counts), view.delta_term])
    slot = np.concatenate([a["slot"].astype(np.int64), view.delta_slot])
    tf = np.concatenate([a["tf"].astype(np.int64), view.delta_tf])
    live = np.ones(view.slots, bool) if view.alive is None else view.alive
    keep = live[slot]
    return _sorted(
        view.doc[slot[keep]],
        term[keep],
        tf[keep],
        view.doc[live],
        view.dl[live],
        view.src[live],
        view.srclen,
    )


def triples_of(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """:func:`triples` of freshly built arrays."""
    counts = np.diff(arrays["offsets"])
    term = np.repeat(np.arange(counts.shape[0]), counts)
    slot = arrays["slot"].astype(np.int64)
    doc = arrays["doc"]
    return _sorted(
        doc[slot], term, arrays["tf"], doc, arrays["dl"], arrays["src"], arrays["srclen"]
    )


def _sorted(doc, term, tf, docs, dl, src, srclen) -> tuple[np.ndarray, ...]:
    order = np.lexsort((term, doc))
    by_doc = np.argsort(docs, kind="stable")
    live_src = np.unique(src)
    return (
        doc[order].astype(np.int64),
        term[order].astype(np.int64),
        tf[order].astype(np.int64),
        docs[by_doc].astype(np.int64),
        dl[by_doc].astype(np.int64),
        src[by_doc].astype(np.int64),
        live_src,
        srclen[live_src[live_src < srclen.shape[0]]].astype(np.int64),
    )
