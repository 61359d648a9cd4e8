"""FaissVectorIndex: the :class:`~kbcli.stores.capabilities.VectorIndex` contract on FAISS (extra
``kbcli[faiss]``), each distinct vector held once, and its search settings.

Used by :class:`~kbcli.stores.faiss.file.FaissFile` (the index kept beside a catalog) and so by
:class:`~kbcli.stores.faiss.store.FaissStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from kbcli.errors import IndexMismatchError, InvalidOptionError, require
from kbcli.text.vector_math import distinct_rows, row_fingerprints

if TYPE_CHECKING:  # numpy is imported with faiss, when the index is built
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from kbcli.text.vector_math import Fingerprints, Mask, Rows

    Matrix = NDArray[np.float32]
    Bitmap = NDArray[np.uint8]  # np.packbits of a Mask

# FAISS's objects (indexes, selectors, search parameters) are typed Any: its SWIG classes get
# their Python signatures replaced when faiss is imported, so its own types do not describe them.

METRICS = ("ip", "cosine", "l2")
TIE_SLACK = 8  # extra candidates fetched so ties at the k-th place are broken by id
DEFAULT_EF_SEARCH = 128  # HNSW candidates per query unless store.ef_search (docs/benchmarks.md)
# Without store.ef_search, larger graphs get more candidates: (up to this many distinct vectors,
# ef). Measured on real MiniLM embeddings, identical vectors held once (benchmarks/bench_ann.py,
# docs/benchmarks.md): 128 gave recall@10 0.979 at 266k vectors; at 1M, 128 gave 0.968, 512
# gave 0.989 in 1.4 ms and 1024 0.992 in 2.4 ms.
EF_SEARCH_BY_SIZE = ((400_000, DEFAULT_EF_SEARCH),)
LARGE_EF_SEARCH = 512  # past the last size
# An index that cannot remove (HNSW, IVF here) keeps the vectors no id holds any more, unseen by
# search, until they are this share of it; then it is rebuilt from the vectors still held.
DEAD_SHARE = 0.2
# A filtered HNSW search whose allowed vectors lie in few runs of the index (a folder: its files
# were added together) and are at most a quarter of it is an exact scan of those runs instead:
# the graph walk found 0.63 of the top 10 for a folder of 10 % of a 1M real set (0.98 for a
# random 10 %), the scan finds all of them (docs/benchmarks.md, "Approximate vector search").
SCAN_RUNS = 1024
SCAN_SHARE = 0.25


def _faiss() -> ModuleType:
    faiss: ModuleType = require(
        "faiss", extra="faiss", feature="The faiss store", package="faiss-cpu"
    )
    return faiss


def default_ef_search(vectors: int) -> int:
    """HNSW candidates per query for a graph of ``vectors`` when ``store.ef_search`` is unset:
    :data:`DEFAULT_EF_SEARCH` for most indexes, more for large ones (:data:`EF_SEARCH_BY_SIZE`),
    whose recall at a fixed setting falls as they grow."""
    for size, ef in EF_SEARCH_BY_SIZE:
        if vectors <= size:
            return ef
    return LARGE_EF_SEARCH


def check_ef_search(value: int | None) -> int | None:
    """``ef_search`` as given (None: :func:`default_ef_search`), refused unless a positive int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"store.ef_search must be a positive integer, not {value!r}")
    return value


def resolve_metric(metric: str | None, normalize: bool) -> str:
    """``"ip"`` (inner product: cosine on normalised vectors) or ``"l2"``; None means ip."""
    name = (metric or "ip").strip().lower()
    if name not in METRICS:
        raise InvalidOptionError(f"Unknown faiss metric {metric!r}: choose from ip, cosine, l2")
    return "ip" if name == "cosine" else name


class FaissVectorIndex:
    """A :class:`~kbcli.stores.capabilities.VectorIndex` on FAISS: ``IndexIDMap2`` over
    ``index_factory``.

    ``normalize`` makes rows and queries unit length, so the inner product is the cosine; with
    the ``l2`` metric on normalised vectors scores are turned back into cosines
    (``1 - d²/2``), without normalisation they are ``-d²``. Factories that need training (IVF)
    are trained on the first vectors once there are enough; until then an exact flat index
    holds them. ``exact`` is True for a flat index.

    Bit-identical vectors (one chunk text in many files: licence texts, boilerplate headers) are
    held once: the FAISS index holds one entry per distinct vector, a *group* numbered by this
    class, and a hit on a group stands for each of its ids, ties broken by id. An HNSW graph
    links many identical points poorly: on 1M real chunks, 18 % of them repeats, recall@10 was
    0.931 at ef_search 1024 with every copy indexed and 0.967 at 128 with each held once
    (docs/benchmarks.md). Vectors added later join a group when FAISS gives the group's vector
    back bit for bit (flat, HNSW and IVF-flat storage do; a quantiser such as PQ does not, so
    there they stay apart until the next rebuild: still correct, only not shared).
    """

    def __init__(
        self,
        dim: int | None = None,
        index_factory: str = "Flat",
        normalize: bool = True,
        metric: str | None = None,
        ef_search: int | None = None,
    ):
        self._faiss = _faiss()
        import numpy as np

        self._np = np
        self.dim = dim
        self.index_factory = index_factory.strip() or "Flat"
        self.normalize = normalize
        self.metric = resolve_metric(metric, normalize)
        self._flat_standin = False
        self.ef_search = check_ef_search(ef_search)
        self._clear()

    def _clear(self) -> None:
        np = self._np
        self._index: Any = None
        self._rowids: Rows = np.zeros(0, np.int64)  # every id held, sorted
        self._group: Rows = np.zeros(0, np.int64)  # the group (FAISS id) of each, aligned
        # by group number (vector_math.row_fingerprints)
        self._fingerprint: Fingerprints = np.zeros(0, np.uint64)
        self._dead: Rows = np.zeros(0, np.int64)  # groups FAISS holds that no id holds, sorted
        self._members: tuple[Rows, Rows] | None = None  # (groups, ids) sorted by group, lazily
        # bitmap of the groups some id holds, lazily (while any are dead)
        self._live: Bitmap | None = None
        # HNSW's stored vectors by group, a view (False: none), lazily
        self._rows: Matrix | Literal[False] | None = None

    @property
    def exact(self) -> bool:
        """True for a flat (brute-force) index."""
        return self.index_factory.lower() == "flat" or self._flat_standin

    @property
    def faiss_index(self) -> Any:
        """The underlying ``faiss.IndexIDMap2`` over groups (None while empty)."""
        return self._index

    @property
    def distinct(self) -> int:
        """How many distinct vectors (groups) the ids hold; ``len`` counts the ids."""
        return 0 if self._index is None else int(self._index.ntotal) - len(self._dead)

    def _metric_type(self) -> int:
        f = self._faiss
        return int(f.METRIC_INNER_PRODUCT if self.metric == "ip" else f.METRIC_L2)

    def _new(self, matrix: Matrix) -> Any:
        f = self._faiss
        inner = f.index_factory(self.dim, self.index_factory, self._metric_type())
        self._flat_standin = False
        if not inner.is_trained:
            try:
                if len(matrix) < 4 * max(1, _nlist(inner)):
                    raise RuntimeError("too few vectors to train")
                inner.train(matrix)
            except RuntimeError:
                inner = f.index_factory(self.dim, "Flat", self._metric_type())
                self._flat_standin = True
        ivf = f.try_extract_index_ivf(inner)
        if ivf is not None:
            # An IVF list keeps the positions it was given, but IndexIDMap2 renumbers positions
            # after remove_ids: later hits would name the wrong ids. An array direct map
            # refuses remove_ids (so it is rebuilt, as HNSW is) and gives vectors back.
            ivf.set_direct_map_type(f.DirectMap.Array)
        index = f.IndexIDMap2(inner)  # faiss keeps a reference to inner
        return index

    def _matrix(self, vectors: ArrayLike) -> Matrix:
        """``vectors`` as a float32 matrix of ``dim`` columns (sets ``dim`` when unset)."""
        np = self._np
        matrix: Matrix = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if matrix.ndim != 2:
            matrix = matrix.reshape(len(matrix), -1)
        if self.dim is None:
            self.dim = int(matrix.shape[1])
        if matrix.shape[1] != self.dim:
            raise IndexMismatchError(
                f"Vectors have {matrix.shape[1]} dimensions but the faiss index has {self.dim}"
            )
        return matrix

    def _unit(self, matrix: Matrix, owned: bool = False) -> Matrix:
        """``matrix`` as FAISS holds it (normalised when ``normalize``; in place if ``owned``)."""
        if self.normalize and len(matrix):
            matrix = matrix if owned else matrix.copy()
            self._faiss.normalize_L2(matrix)
        return matrix

    def build(self, ids: ArrayLike, vectors: ArrayLike, *, reuse: bool = False) -> None:
        """Replace the whole index with ``vectors`` under ``ids`` (trains when needed; the
        last of a repeated id wins). ``reuse``: ``vectors`` (a writable float32 array the
        caller no longer needs) may be overwritten, saving a copy of the distinct vectors."""
        np = self._np
        id_arr: Rows = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._clear()
        if not len(id_arr):
            return
        raw = self._matrix(vectors)
        if len(id_arr) > 1 and not bool((id_arr[1:] > id_arr[:-1]).all()):
            id_arr, last = _last_of_each(id_arr)
            raw = raw[last]
        fingerprints = row_fingerprints(raw)
        groups, firsts = distinct_rows(raw, fingerprints)
        if reuse and raw.flags.writeable:
            # firsts ascend and firsts[i] >= i: moving them down in blocks never overwrites a
            # row still to be moved
            for start in range(0, len(firsts), 65536):
                part = firsts[start : start + 65536]
                raw[start : start + len(part)] = raw[part]
            held = self._unit(raw[: len(firsts)], owned=True)
        else:
            held = self._unit(raw[firsts], owned=True)
        index = self._new(held)
        index.add_with_ids(held, np.arange(len(firsts), dtype=np.int64))
        self._index = index
        self._rowids, self._group, self._fingerprint = id_arr, groups, fingerprints[firsts]

    def ids(self) -> Rows:
        """The ids in the index (int64 array, sorted)."""
        ids: Rows = self._rowids.copy()
        return ids

    def upsert(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        """Insert or replace the vectors of ``ids`` (the last of a repeated id wins)."""
        np = self._np
        if not len(ids):
            return
        id_arr, last = _last_of_each(np.asarray(ids, dtype=np.int64).reshape(-1))
        raw = self._matrix(vectors)[last]
        self.remove(id_arr)
        fingerprints = row_fingerprints(raw)
        local, firsts = distinct_rows(raw, fingerprints)
        held = self._unit(raw[firsts], owned=True)
        joined = self._held_groups(fingerprints[firsts], held)
        new = np.flatnonzero(joined < 0)
        joined[new] = len(self._fingerprint) + np.arange(len(new))
        if len(new):
            if self._index is None:
                self._index = self._new(held[new])
            self._index.add_with_ids(held[new], joined[new])
            self._fingerprint = np.concatenate([self._fingerprint, fingerprints[firsts[new]]])
        self._dead = np.setdiff1d(self._dead, joined, assume_unique=True)
        rowids = np.concatenate([self._rowids, id_arr])
        order = np.argsort(rowids, kind="stable")
        self._rowids = rowids[order]
        self._group = np.concatenate([self._group, joined[local]])[order]
        self._members = self._live = self._rows = None

    def _group_mask(self, groups: Rows) -> Mask:
        """A boolean array over group numbers, True at ``groups``."""
        mask = self._np.zeros(len(self._fingerprint), bool)
        mask[groups] = True
        return mask

    def _held_groups(self, fingerprints: Fingerprints, unit_rows: Matrix) -> Rows:
        """For each row, the group FAISS holds exactly it in (as FAISS gives it back), or -1."""
        np = self._np
        out: Rows = np.full(len(unit_rows), -1, dtype=np.int64)
        if self._index is None:
            return out
        held = self._group_mask(self._group)
        held[self._dead] = True  # a vector that comes back takes its old entry again
        slots = np.flatnonzero(held)
        order = np.argsort(self._fingerprint[slots], kind="stable")
        known = self._fingerprint[slots][order]
        low = np.searchsorted(known, fingerprints, "left")
        high = np.searchsorted(known, fingerprints, "right")
        for n in np.flatnonzero(high > low):
            for group in slots[order[low[n] : high[n]]]:
                try:
                    stored = self._index.reconstruct(int(group))
                except RuntimeError:  # an index that cannot give vectors back
                    return out
                if stored.view(np.uint32).tobytes() == unit_rows[n].view(np.uint32).tobytes():
                    out[n] = group
                    break
        return out

    def remove(self, ids: Sequence[int] | Rows) -> None:
        """Remove the vectors of ``ids`` (unknown ids are ignored). A group left without ids
        leaves FAISS with ``remove_ids``; an index type that cannot remove (HNSW, IVF) keeps it,
        unseen by search, until such groups pass :data:`DEAD_SHARE` of the index, and is then
        rebuilt from the vectors still held."""
        np = self._np
        if self._index is None or not len(ids):
            return
        gone = _in_sorted(self._rowids, np.unique(np.asarray(ids, dtype=np.int64)))
        if not gone.any():
            return
        dropped = np.unique(self._group[gone])
        self._rowids, self._group = self._rowids[~gone], self._group[~gone]
        self._members = self._live = self._rows = None
        if not len(self._rowids):
            self._clear()
            return
        emptied = dropped[~np.isin(dropped, self._group)]
        if not len(emptied):
            return
        try:
            self._index.remove_ids(emptied)
        except RuntimeError:
            self._dead = np.union1d(self._dead, emptied)
            if len(self._dead) > DEAD_SHARE * self._index.ntotal:
                keep = np.unique(self._group)
                kept = self._index.reconstruct_batch(keep)
                # renumbered 0.. in the same order, so FAISS positions stay the group numbers
                number = np.full(len(self._fingerprint), -1, dtype=np.int64)
                number[keep] = np.arange(len(keep))
                self._group, self._fingerprint = number[self._group], self._fingerprint[keep]
                self._index = self._new(kept)
                self._index.add_with_ids(kept, np.arange(len(keep), dtype=np.int64))
                self._dead = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return int(len(self._rowids))

    @property
    def effective_ef_search(self) -> int:
        """The HNSW candidates a search uses: ``ef_search``, else :func:`default_ef_search` of
        the distinct vectors held."""
        return self.ef_search or default_ef_search(self.distinct)

    def _params(self, selector: Any, k: int) -> Any:  # FAISS objects
        f = self._faiss
        inner = f.downcast_index(self._index.index)
        if isinstance(inner, f.IndexHNSW):
            ef = self.effective_ef_search
            if selector is None:
                return f.SearchParametersHNSW(efSearch=max(ef, k))
            return f.SearchParametersHNSW(sel=selector, efSearch=max(ef, 2 * k))
        if selector is None:
            return None
        if isinstance(inner, f.IndexIVF):
            # every list: the selector then sees every allowed vector (no short answer)
            return f.SearchParametersIVF(sel=selector, nprobe=inner.nlist)
        return f.SearchParameters(sel=selector)

    def search(
        self, query: Sequence[float], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """``(id, score)`` of the ``k`` nearest vectors among ``allowed``, best first, ties by
        id. ``allowed`` becomes a FAISS id selector over the groups holding an allowed id (a
        pre-filter); an approximate index that still answers short falls back to an exact
        scan of the allowed vectors."""
        np = self._np
        if self._index is None or k <= 0:
            return []
        q = self._unit(self._matrix(np.asarray(query, dtype=np.float32).reshape(1, -1)))
        wanted = bitmap = None
        params = self._params(None, k)
        pool = self.distinct
        if allowed is not None:
            try:  # a list, an array("q") (AllowedRowids) or numpy ids: no loop over them
                wanted = np.asarray(allowed, dtype=np.int64).reshape(-1)
            except TypeError:  # any other collection of ints
                wanted = np.fromiter(allowed, np.int64)
            if len(wanted) > 1 and not bool((wanted[1:] > wanted[:-1]).all()):
                wanted = np.unique(wanted)  # (np.unique sorts even sorted input: 12 ms at 100k)
            at = np.minimum(np.searchsorted(self._rowids, wanted), len(self._rowids) - 1)
            held = self._rowids[at] == wanted
            wanted = wanted[held]
            if not len(wanted):
                return []
            mask = self._group_mask(self._group[at[held]])
            groups = np.flatnonzero(mask)
            pool = len(groups)
            if self._few_runs(groups):
                hits = self._scan(q, groups, k, wanted)
                hits.sort(key=lambda h: (-h[1], h[0]))
                return hits[:k]
            bitmap = np.packbits(mask, bitorder="little")
        elif len(self._dead):
            if self._live is None:
                self._live = np.packbits(self._group_mask(self._group), bitorder="little")
            bitmap = self._live
        if bitmap is not None:  # kept alive here while FAISS reads it
            selector = self._faiss.IDSelectorBitmap(len(bitmap), self._faiss.swig_ptr(bitmap))
            params = self._params(selector, k)
        fetch = min(pool, k + TIE_SLACK)
        with _one_thread(self._faiss):
            distances, found = self._index.search(q, fetch, params=params)
        hits = self._expand(found[0], distances[0], k, wanted)
        if len(hits) < min(k, len(self) if wanted is None else len(wanted)) and not self.exact:
            groups = np.unique(self._group) if wanted is None else groups
            hits = self._scan(q, groups, k, wanted)
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:k]

    def _expand(
        self, groups: Rows, distances: NDArray[np.float32], k: int, wanted: Rows | None
    ) -> list[tuple[int, float]]:
        """Each found group's ids (at most ``k``, lowest first, within ``wanted``) with its
        score."""
        np = self._np
        if self._members is None:
            order = np.argsort(self._group, kind="stable")
            self._members = (self._group[order], self._rowids[order])
        by_group, ids = self._members
        hits: list[tuple[int, float]] = []
        for group, distance in zip(groups, distances):
            if group < 0:
                continue
            start, end = np.searchsorted(by_group, [group, group + 1])
            members = ids[start:end]
            if wanted is not None:
                members = members[_in_sorted(members, wanted)]
            score = self._score(float(distance))
            hits.extend((int(i), score) for i in members[:k])
        return hits

    def _flat_rows(self) -> Matrix | None:
        """HNSW's stored vectors as a read-only view, row = group number (no copy), or None
        (another index type, or positions that are not the group numbers). The view points
        into FAISS's memory: it is dropped on every change, before FAISS may move it."""
        np, f = self._np, self._faiss
        if self._rows is None:
            self._rows = False
            inner = f.downcast_index(self._index.index)
            storage = f.downcast_index(inner.storage) if isinstance(inner, f.IndexHNSW) else None
            if isinstance(storage, f.IndexFlat) and storage.ntotal:
                ids = f.vector_to_array(self._index.id_map)
                if np.array_equal(ids, np.arange(len(ids))):
                    flat = f.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d)
                    self._rows = flat.reshape(storage.ntotal, storage.d)
        return None if self._rows is False else self._rows

    def _few_runs(self, groups: Rows) -> bool:
        """Whether an exact scan of ``groups`` (sorted) beats the graph: few contiguous runs,
        at most :data:`SCAN_SHARE` of the index, and vectors readable in place."""
        np = self._np
        if self.exact or len(groups) > SCAN_SHARE * self.distinct:
            return False
        runs = 1 + int(np.count_nonzero(np.diff(groups) != 1))
        return runs <= SCAN_RUNS and self._flat_rows() is not None

    def _scan(
        self, q: Matrix, groups: Rows, k: int, wanted: Rows | None
    ) -> list[tuple[int, float]]:
        """Exact search over ``groups`` (sorted): run by run on HNSW's stored vectors when
        they can be read in place, else on vectors FAISS gives back."""
        np = self._np
        rows = self._flat_rows()
        if rows is not None:
            cuts = np.flatnonzero(np.diff(groups) != 1) + 1
            starts = np.concatenate([[0], cuts])
            ends = np.concatenate([cuts, [len(groups)]])
            if self.metric == "ip":
                parts = [rows[groups[a] : groups[b - 1] + 1] @ q[0] for a, b in zip(starts, ends)]
            else:
                parts = [((rows[groups[a] : groups[b - 1] + 1] - q[0]) ** 2).sum(axis=1)
                         for a, b in zip(starts, ends)]  # fmt: skip
            raw = np.concatenate(parts)
        else:
            try:
                held = self._index.reconstruct_batch(groups)
            except RuntimeError:  # an index that cannot give vectors back: widest search
                distances, found = self._index.search(q, self.distinct)
                keep = np.isin(found[0], groups)
                return self._expand(found[0][keep], distances[0][keep], k, wanted)
            raw = held @ q[0] if self.metric == "ip" else ((held - q[0]) ** 2).sum(axis=1)
        order = -raw if self.metric == "ip" else raw
        best = np.arange(len(order))
        if len(order) > k + TIE_SLACK:
            best = np.argpartition(order, k + TIE_SLACK - 1)[: k + TIE_SLACK]
        best = best[np.argsort(order[best], kind="stable")]
        return self._expand(groups[best], raw[best], k, wanted)

    def _score(self, distance: float) -> float:
        if self.metric == "ip":
            return distance
        return 1.0 - distance / 2.0 if self.normalize else -distance

    def disagreements(self, ids: ArrayLike, vectors: ArrayLike) -> int:
        """How many of ``ids`` (with their ``vectors``, as stored) this index does not hold, or
        holds in a group of another vector (compared by
        :func:`~kbcli.text.vector_math.row_fingerprints`)."""
        np = self._np
        id_arr: Rows = np.asarray(ids, dtype=np.int64)
        if not len(id_arr):
            return len(self)
        at = np.minimum(np.searchsorted(self._rowids, id_arr), max(len(self._rowids) - 1, 0))
        held = self._rowids[at] == id_arr if len(self._rowids) else np.zeros(len(id_arr), bool)
        same = np.zeros(len(id_arr), bool)
        same[held] = (
            row_fingerprints(self._matrix(vectors)[held])
            == self._fingerprint[self._group[at[held]]]
        )
        return int(np.count_nonzero(~same)) + len(self) - int(np.count_nonzero(held))

    def serialize(self) -> list[Any]:
        """The index as parts to write one after another (none while empty): bytes of the ids,
        their groups and the groups' fingerprints, then a callable that streams the index
        serialised by FAISS to the ``write`` it is given (never held whole in memory)."""
        np = self._np
        if self._index is None:
            return []
        sizes = np.asarray([len(self._rowids), len(self._fingerprint)], dtype="<i8")
        return [
            sizes.tobytes(),
            self._rowids.astype("<i8").tobytes(),
            self._group.astype("<i8").tobytes(),
            self._fingerprint.astype("<u8").tobytes(),
            lambda write: self._faiss.write_index(
                self._index, self._faiss.PyCallbackIOWriter(write)
            ),
        ]

    def load(self, read: Callable[[int], bytes], dim: int | None, flat_standin: bool) -> None:
        """Replace the index with one written by :meth:`serialize`; ``read(n)`` gives the
        next ``n`` bytes of it (the FAISS part is streamed, never held twice in memory)."""
        np = self._np
        self._clear()
        self.dim = dim
        self._flat_standin = flat_standin
        head = read(16)
        if not head:
            return
        rows, slots = (int(x) for x in np.frombuffer(head, dtype="<i8"))

        def array(count: int, dtype: str) -> NDArray[Any]:  # of the dtype named at run time
            data = read(8 * count)
            if len(data) != 8 * count:
                raise ValueError("cut short")
            values: NDArray[Any] = np.frombuffer(data, dtype=dtype).astype(dtype[1:])
            return values

        rowids, group, fingerprint = array(rows, "<i8"), array(rows, "<i8"), array(slots, "<u8")
        index = self._faiss.read_index(self._faiss.PyCallbackIOReader(read))
        if not isinstance(index, self._faiss.IndexIDMap2):
            raise ValueError("not an IndexIDMap2")
        live = np.unique(group)
        held = np.sort(self._faiss.vector_to_array(index.id_map))
        if (
            rows == 0
            or (len(rowids) > 1 and not bool((rowids[1:] > rowids[:-1]).all()))
            or live[0] < 0
            or held[-1] >= slots
            or len(np.unique(held)) != len(held)
            or not _in_sorted(live, held).all()
        ):
            raise ValueError("the groups disagree with the index")
        self._index, self._rowids, self._group = index, rowids, group
        self._fingerprint, self._dead = fingerprint, np.setdiff1d(held, live, assume_unique=True)


def _in_sorted(values: Rows, sorted_unique: Rows) -> Mask:
    """Which of ``values`` are in ``sorted_unique`` (a boolean mask; a binary search each)."""
    import numpy as np

    if not len(sorted_unique):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_unique, values), len(sorted_unique) - 1)
    found: Mask = sorted_unique[at] == values
    return found


def _last_of_each(ids: Rows) -> tuple[Rows, Rows]:
    """The distinct ``ids`` sorted, and where each one last occurs in ``ids``."""
    import numpy as np

    unique, from_end = np.unique(ids[::-1], return_index=True)
    return unique, len(ids) - 1 - from_end


@contextmanager
def _one_thread(faiss: ModuleType) -> Iterator[None]:
    """Run one query on one OpenMP thread: splitting a single query's scan over threads
    gains little and, on a busy machine, costs several times more (measured: 100k x 384
    Flat, 2 loaded cores: 79 ms with 2 threads, 17 ms with 1). Builds keep every thread."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _nlist(inner: Any) -> int:  # a FAISS index
    """How many lists an IVF index has (1 for other indexes that need training)."""
    import faiss

    ivf = faiss.try_extract_index_ivf(inner)
    return int(ivf.nlist) if ivf is not None else 1
