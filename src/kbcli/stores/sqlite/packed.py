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

Scores are :func:`kbcli.text.bm25.rank`'s arithmetic in float64 (checked by the parity test). The
file's layout has a version (``packlog.FORMAT`` and ``TF_RUNS``, in the header): a
pack of another layout is stale, replaced by the next search like a missing one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# The pack file and its view, re-exported: callers use ``packed.<name>`` for all three.
from kbcli.stores.sqlite.packfile import ARRAYS, FETCH, Pack, build_arrays, map_pack, write_pack
from kbcli.stores.sqlite.packview import (
    FILTER_PROBE,
    MERGE_FRACTION,
    MERGE_MIN,
    SCOPE_TERMS,
    SCRATCH_TERMS,
    Scope,
    Scratch,
    View,
    Visible,
    make_view,
    source_norm,
    triples,
    triples_of,
)

__all__ = [
    "ARRAYS",
    "FETCH",
    "FILTER_PROBE",
    "MERGE_FRACTION",
    "MERGE_MIN",
    "SCOPE_TERMS",
    "SCRATCH_TERMS",
    "SPARSE_RATIO",
    "Pack",
    "Scope",
    "Scratch",
    "View",
    "Visible",
    "Weighted",
    "build_arrays",
    "make_view",
    "map_pack",
    "score",
    "source_norm",
    "triples",
    "triples_of",
    "write_pack",
]

SPARSE_RATIO = 8  # postings below slots / this: scored over the hit chunks only, not all slots


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
    """:func:`kbcli.text.bm25.rank` over the view: ``(doc, score, chunk part, source part)``, best
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
