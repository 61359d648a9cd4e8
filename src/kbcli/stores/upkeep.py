"""Upkeep: every write a store makes that its caller did not ask for, in one place.

A store's own writes (``add``, ``replace_file``, deletes ...) change the catalog and, in the
same transaction, everything exact derived from it. Besides those, a store keeps *derived*
structures that only make searches fast, and these are written by :class:`Upkeep`:

- **The keyword pack** (SQLite: ``<db>.keyword-pack``, :mod:`.sqlite.packed`). A writer writes
  it when it is done: at the end of a ``kb ingest`` that changed the index
  (:meth:`Upkeep.prepare_search`) and when a store that committed closes, so the search after an
  ingest or ``kb add`` never pays for it. **A search writes it** only when it found none it
  could use (missing, of an older layout or keyword epoch, or its change log grown past
  ``packed.MERGE_FRACTION`` of the index: left so by a writer killed before it closed, by a
  script that never closed its store, or by ``kb doctor --repair``): the search ranks from the
  pack it built in memory and then :meth:`after_search` writes it, so the next process maps it.
  Safe beside writers and other readers: the file is derived (the tables stay the truth), is
  written temp -> fsync -> rename outside any transaction or lock (a crash leaves the old pack
  or none), is tagged with the index id, keyword epoch and the log position it holds, and a
  pack newer than a reader's snapshot or older than the log floor is never used.
- **The re-tokenised keyword index** of an older analyzer or field set. Every write re-tokenises
  it inside its own transaction; ``kb doctor --repair`` does; and **a search does** when it
  meets one (:meth:`upgrade_keyword_index`): one write transaction under the writer lock, taken
  only when free at once (``wait=0``), so a search never waits for or races an ingest; when
  the lock is held or the index is read-only the search fails with the message naming the
  command that upgrades it.
- **The derived vector index** (the matrix cache, a FAISS file, a Chroma collection): brought
  up to date by the dense search that first needs it, and for FAISS and Chroma also when a
  store that ingested files closes (:meth:`close`), each written atomically beside the catalog
  and tagged with the vectors' generation (see the vector parts).

Nothing here changes what a search returns: each structure is exact against the snapshot it
serves, or not used.
"""

from __future__ import annotations

from typing import Generic

from kbcli.errors import StoreError
from kbcli.stores.parts import Conn, Engine, Keywords, RowT, Vectors


class Upkeep(Generic[Conn, RowT]):
    """The derived writes of one store (see the module docstring). ``keyword_pack``: the
    keyword part keeps a derived file; ``vectors_after_ingest``: refresh the derived vector
    index when a store that ingested files closes; ``scratch``: a temporary store (nothing is
    kept for a next process)."""

    def __init__(
        self,
        engine: Engine[Conn],
        keywords: Keywords[Conn, RowT],
        vectors: Vectors[Conn],
        *,
        keyword_pack: bool = False,
        vectors_after_ingest: bool = False,
        scratch: bool = False,
    ):
        self._engine = engine
        self._keywords = keywords
        self._vectors = vectors
        self.keyword_pack = keyword_pack
        self.vectors_after_ingest = vectors_after_ingest
        self.scratch = scratch
        self.ingested = False  # files were written (replace_file) since the last close

    def _failures(self, *kinds: type[BaseException]) -> tuple[type[BaseException], ...]:
        return (*kinds, *self._engine.errors)

    def after_search(self) -> None:
        """Write the keyword pack the last search had to build in memory (see above)."""
        if self._keywords.due:
            with self._engine.read() as conn:
                self._keywords.refresh(conn)

    def prepare_search(self) -> None:
        """Write now what the next search would write first (the keyword pack, when none is
        current or its change log grew too long)."""
        if self.keyword_pack:
            with self._engine.read() as conn:
                self._keywords.refresh(conn)

    def refresh_vector_index(self) -> None:
        """Bring the derived vector index up to date now instead of at the next dense search."""
        with self._engine.read() as conn:
            self._vectors.refresh(conn)

    def upgrade_keyword_index(self, wait: float = 0.0) -> bool:
        """Re-tokenise a keyword index of another analyzer or field set in one transaction, when
        the writer lock is free within ``wait`` seconds; True when the index now matches."""
        try:
            with self._engine.writer_lock(wait), self._engine.transaction() as conn:
                self._keywords.check_signature(conn, writing=True)
        except self._failures(StoreError, OSError):
            return False  # locked, or a read-only database: the caller says what to run
        return True

    def close(self) -> None:
        """Before the engine closes: after an ingest, the derived vector index (FAISS, Chroma)
        is brought up to date, and after any write the keyword pack, so the next process finds
        both current. Either may fail (a damaged Chroma folder, a read-only folder): the writes
        committed, and the next search builds what is missing."""
        if self.scratch:
            return
        if self.ingested and self.vectors_after_ingest:
            self.ingested = False
            try:
                self.refresh_vector_index()
            except StoreError:
                pass
        if self._engine.commits:
            try:
                self.prepare_search()
            except self._failures(OSError):
                pass  # the pack is derived: the next search writes it
