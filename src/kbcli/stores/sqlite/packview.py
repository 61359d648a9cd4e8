"""The searchable view of the keyword pack (see :mod:`.packed`): the pack's slots plus the
log's delta as of one snapshot, an access scope over it, and the scorer's scratch space."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from kbcli.stores.sqlite.packfile import Pack, term_pairs
from kbcli.stores.sqlite.packlog import TF_RUNS, current_seq, log_floor
from kbcli.text.bm25 import CorpusStats

MERGE_MIN = 2_000  # delta chunks tolerated before a new pack, at least ...
MERGE_FRACTION = 0.05  # ... or this fraction of the corpus
SCRATCH_TERMS = 4  # terms whose source sums share one pass of the sparse scorer
SCOPE_TERMS = 65_536  # terms whose frequencies in a scope are kept for its generation
FILTER_PROBE = 2_000  # postings (or 1/16 of the slots) up to which a new filter is checked
# for the candidates only; above it, in rank order (keyword._checked_in_order)


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
        slots: np.ndarray = self._slot_of[docs]
        return slots


def source_norm(srclen: np.ndarray, avgsl: float, k1: float, b: float) -> np.ndarray:
    """:meth:`View.source_norm` for the source lengths ``srclen``."""
    scale = b / avgsl if avgsl > 0 else 0.0
    norm = k1 * ((1.0 - b) + scale * srclen.astype(np.float64))
    norm[norm == 0] = 1.0
    return norm


class Scope:
    """An access scope over a view (:mod:`kbcli.text.bm25`, "Scopes"): its live slots (``mask``),
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
    rows: list[tuple[int, int, int, bytes]] = []
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
    alive = np.ones(m + len(rows), np.bool_)
    alive[dead] = False
    if rows:
        term, tf, counts = term_pairs([r[3] for r in rows])
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


def _sorted(
    doc: np.ndarray,
    term: np.ndarray,
    tf: np.ndarray,
    docs: np.ndarray,
    dl: np.ndarray,
    src: np.ndarray,
    srclen: np.ndarray,
) -> tuple[np.ndarray, ...]:
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
