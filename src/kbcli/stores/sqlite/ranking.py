"""The numpy executor of the SQLite keyword index: BM25 over the packed postings
(:mod:`.packed`), filtered and scoped.

A filter is checked in SQL on the few candidates it may change (in rank order while that
settles the top k, :meth:`PackedRanking._checked_in_order`), else once per filter and
generation over the whole index (a bitmap, kept for the view). numpy and the packed modules
load on first use: a process that ranks from the pack on disk (:mod:`.packread`) never
imports them.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

from kbcli.stores.parts import Filter
from kbcli.stores.sqlite import catalog
from kbcli.text.bm25 import BM25Params, CorpusStats, QueryTerm

if TYPE_CHECKING:
    import numpy as np

    from kbcli.stores.sqlite.packview import Scope, View, Visible

#: the snapshot a view is of: (pack tag, generation, keyword log sequence)
State = tuple[str, int, int]

FILTER_CACHE = 16  # allowed-slot bitmaps kept per generation
IN_ORDER_FIRST = 25  # unfiltered candidates per k a new filter is checked on first (x4 each round)


def _above(score: float) -> float:
    """``score`` plus the float rounding of a sum of BM25 parts: a bound beyond it holds."""
    return score + 1e-9 * (abs(score) + 1.0)


class _Within:
    """A packed view whose postings are only those of the slots in ``keep`` (a mask), every
    other part (lengths, sources, norms) the view's: scored with ``keep`` as the filter it
    ranks like the view, from those postings alone (the sparse executor, for few)."""

    def __init__(self, view: View, keep: np.ndarray) -> None:
        self._view = view
        self._keep = keep

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        slot, tf = self._view.postings(term)
        kept = self._keep[slot]
        return slot[kept], tf[kept]

    def __getattr__(self, name: str) -> Any:  # any attribute of View
        return getattr(self._view, name)


class PackedRanking:
    """The ranking half of :class:`~.keyword.KeywordTables`: search over its packed view
    (:meth:`view`), with the filters' bitmaps kept per view in ``_filters``."""

    _filters: dict[str, Any]
    allowed_rowids: catalog.AllowedRowids

    def view(
        self, conn: sqlite3.Connection, state: State | None = None, *, write: bool = False
    ) -> View:
        """The packed view of ``conn``'s snapshot (:meth:`.keyword.KeywordTables.view`)."""
        raise NotImplementedError

    def _packed_search(
        self,
        conn: sqlite3.Connection,
        terms: list[QueryTerm],
        stats: CorpusStats,
        filter: Filter,
        k: int,
        params: BM25Params,
        state: tuple[str, int, int] | None = None,
    ) -> list[tuple[int, float, float, float]]:
        """:func:`kbcli.text.bm25.rank` with numpy over the packed postings."""
        view = self.view(conn, state)
        if not filter:
            return self._score(view, terms, stats, k, params, None)
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite.packed import FILTER_PROBE

        # a new filter is checked on every candidate at once only when they are fewer than
        # the first round in rank order would check
        at_once = min(FILTER_PROBE, IN_ORDER_FIRST * k)
        allowed = self._allowed(conn, view, filter, terms, in_order=at_once)
        if allowed is None:  # a new filter, many candidates: checked in rank order
            rows = self._checked_in_order(conn, view, terms, stats, filter, k, params)
            if rows is not None:
                return rows
            allowed = self._candidates(conn, view, filter, terms)
            if allowed is None:
                allowed = self._bitmap(conn, view, filter)
        return self._score(view, terms, stats, k, params, allowed)

    def _checked_in_order(
        self,
        conn: sqlite3.Connection,
        view: View,
        terms: list[QueryTerm],
        stats: CorpusStats,
        filter: dict[str, Any],
        k: int,
        params: BM25Params,
    ) -> list[tuple[int, float, float, float]] | None:
        """The filtered ranking, with ``filter`` checked in SQL only on the best unfiltered
        candidates (and, with source context, on every candidate of their sources, whose
        visible postings make the source part), more each round, until the k-th passing
        score beats every unchecked candidate's unfiltered score, an upper bound of its
        filtered one (the source part only grows with visible postings; idf is never
        negative). The rows are then those of the filter-then-rank order exactly: each checked
        source's part is its filtered one, and no unchecked chunk can reach the k-th. None
        when the checks would exceed :meth:`_probe` (a selective filter: the caller checks
        every candidate or reads the whole bitmap)."""
        import numpy as np

        if k <= 0:
            return []
        budget = self._probe(view)
        lists = [view.postings(int(t.term))[0] for t in terms]
        checked = np.zeros(view.slots, bool)
        passing = np.zeros(view.slots, bool)
        in_source = np.zeros(view.srclen.shape[0], bool)
        spent = 0
        want = IN_ORDER_FIRST * k
        best = self._score(view, terms, stats, want, params, None)
        last = False  # every candidate that may still reach the k-th is in best
        while True:
            slots = view.slot_of(np.fromiter((r[0] for r in best), np.int64, len(best)))
            if params.source_weight:
                in_source[view.src[slots]] = True
                slots = np.concatenate([s[in_source[view.src[s]]] for s in lists] + [slots])
            slots = np.unique(slots[~checked[slots]])
            spent += slots.shape[0]
            if spent > budget:
                return None
            docs = view.doc[slots]
            ok = catalog.passing(conn, docs.tolist(), filter)
            checked[slots] = True
            passing[slots[np.isin(docs, np.fromiter(ok, np.int64, len(ok)))]] = True
            # the passing chunks' postings alone: scored over few entries, not every slot
            within = _Within(view, passing)
            rows = self._score(within, terms, stats, k, params, view.visible(passing))
            if last or len(best) < want:  # every candidate that scores at all was checked
                return rows
            bound = best[-1][1]  # no unchecked candidate scores above it, filtered or not
            if len(rows) == k and rows[-1][1] > _above(bound):
                return rows
            if len(rows) < k:  # too few pass yet: more of the best
                want *= 4
                best = self._score(view, terms, stats, want, params, None)
                continue
            # A checked chunk's score stays (its sources are checked whole), so the k-th can
            # only rise: checking every candidate whose bound reaches today's k-th finishes.
            floor = rows[-1][1] - (_above(rows[-1][1]) - rows[-1][1])
            # (a top of 62,500, the budget at 1M chunks, costs ~0.1 s: a smaller one first)
            for size in dict.fromkeys((min(4 * want, budget), budget)):
                top = self._score(view, terms, stats, size, params, None)
                if len(top) < size or top[-1][1] < floor:
                    break
            else:
                return None  # more candidates may rank than the budget checks
            best, last = [r for r in top if r[1] >= floor], True

    @staticmethod
    def _score(
        view: Any,  # a View, or a _Within standing in for one (duck-typed, as packed reads it)
        terms: list[QueryTerm],
        stats: CorpusStats,
        k: int,
        params: BM25Params,
        allowed: Visible | np.ndarray | None,
        scope: Scope | None = None,
    ) -> list[tuple[int, float, float, float]]:
        """:func:`packed.score` of ``terms`` weighted with ``stats``."""
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite import packed

        weighted = [
            packed.Weighted(int(t.term), t.chunk_weight(stats), t.source_weight(stats))
            for t in terms
        ]
        return packed.score(
            view,
            weighted,
            k,
            avgdl=stats.avgdl,
            avgsl=stats.avgsl,
            k1=params.k1,
            b=params.b,
            source_weight=params.source_weight,
            allowed=allowed,
            scope=scope,
        )

    def _scope(self, conn: sqlite3.Connection, view: View, scope: dict[str, Any]) -> Scope:
        """The :class:`packed.Scope` of ``scope`` for ``view`` (kept with the filters'
        bitmaps while the generation holds)."""
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite.packed import Scope

        key = "scope:" + json.dumps(scope, sort_keys=True, default=str)
        if key not in self._filters:
            if len(self._filters) > FILTER_CACHE:
                self._filters.pop(next(k for k in self._filters if k != "seen"))
            self._filters[key] = Scope(view, self._full_mask(conn, view, scope))
        found: Scope = self._filters[key]
        return found

    def _full_mask(
        self, conn: sqlite3.Connection, view: View, filter: dict[str, Any]
    ) -> np.ndarray:
        """The live slots passing ``filter``, over the whole index (the allowed rowids)."""
        import numpy as np

        ids = self.allowed_rowids.get(conn, filter)
        allowed = np.zeros(view.slots, bool)
        if ids:
            allowed[view.slot_of(np.frombuffer(ids, np.int64))] = True
        return allowed if view.alive is None else allowed & view.alive

    @staticmethod
    def _probe(view: View) -> int:
        """How many chunks a new filter is checked on in SQL before the whole index's bitmap
        is read instead (a full scan reads every chunk's row)."""
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite.packed import FILTER_PROBE

        return int(max(FILTER_PROBE, view.slots // 16))

    def _allowed(
        self,
        conn: sqlite3.Connection,
        view: View,
        filter: dict[str, Any],
        terms: list[QueryTerm],
        in_order: int | None = None,
    ) -> Visible | None:
        """Which slots pass ``filter`` (a :class:`packed.Visible`): checked in SQL for the
        candidates only when there are few and the filter is new, else for the whole index once
        per (filter, generation). With ``in_order``, a new filter of more postings than that
        gives None: the caller checks it in rank order (:meth:`_checked_in_order`), which
        reads far fewer rows, and calls :meth:`_candidates` if that gives up."""
        key = json.dumps(filter, sort_keys=True, default=str)
        if key in self._filters:
            kept: Visible = self._filters[key]
            return kept
        seen = self._filters.setdefault("seen", set())
        if key not in seen:
            seen.add(key)  # the second query with this filter builds its bitmap
            if in_order is not None and self._postings(view, terms) > in_order:
                return None
            found = self._candidates(conn, view, filter, terms)
            if found is not None:
                return found
        return self._bitmap(conn, view, filter)

    @staticmethod
    def _postings(view: View, terms: list[QueryTerm]) -> int:
        return sum(view.postings(int(t.term))[0].shape[0] for t in terms)

    def _candidates(
        self, conn: sqlite3.Connection, view: View, filter: dict[str, Any], terms: list[QueryTerm]
    ) -> Visible | None:
        """``filter`` checked in SQL on every candidate of ``terms`` (a :class:`packed.Visible`
        of the passing ones), or None when there are more than :meth:`_probe`."""
        import numpy as np

        lists = [view.postings(int(t.term))[0] for t in terms]
        if sum(s.shape[0] for s in lists) > self._probe(view):
            return None
        cand = np.unique(np.concatenate(lists))
        docs = view.doc[cand]
        ok = catalog.passing(conn, docs.tolist(), filter)
        allowed = np.zeros(view.slots, bool)
        allowed[cand[np.isin(docs, np.fromiter(ok, np.int64, len(ok)))]] = True
        return view.visible(allowed)

    def _bitmap(self, conn: sqlite3.Connection, view: View, filter: dict[str, Any]) -> Visible:
        """The :class:`packed.Visible` of ``filter`` over the whole index, kept for the view."""
        key = json.dumps(filter, sort_keys=True, default=str)
        if key not in self._filters:
            if len(self._filters) > FILTER_CACHE:
                self._filters.pop(next(k for k in self._filters if k != "seen"))
            self._filters[key] = view.visible(self._full_mask(conn, view, filter))
        bitmap: Visible = self._filters[key]
        return bitmap
