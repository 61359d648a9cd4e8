"""FileLedger: file records, atomic per-file replacement and the writer lock.

Needs a ``store`` fixture (an empty store that is also a DocumentCatalog and, for the
embedding-cache part of ``replace_file``, an EmbeddingCache); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

import threading
import time

import pytest

from kbcli.errors import DatabaseLockedError, KBError
from kbcli.ingest.writes import as_vectors
from kbcli.protocols import FileLedger, FreshnessReads, supports
from kbcli.testing._common import INFO, Boom, FreshnessStore, LedgerStore, ids
from kbcli.types import Document, FileRecord

WAIT = 0.05  # seconds: lock waits stay tiny


def record(path: str, version: int = 1, chunk_ids: list[str] | None = None) -> FileRecord:
    """A file record for ``path`` whose fields all depend on ``version``."""
    return FileRecord(
        path=path,
        size=100 * version,
        mtime_ns=1_700_000_000_000_000_000 + version,
        sha256=f"{version:064x}",
        settings='{"chunk_size": 500}',
        chunk_ids=list(chunk_ids or []),
        indexed_at=f"2026-01-0{version}T00:00:00+00:00",
    )


def chunks(path: str, *names: str) -> list[Document]:
    """Documents of file ``path`` named ``<path>#<name>``."""
    return [
        Document(f"{path}#{n}", f"{n} text of {path}", {"source": path, "chunk_index": i})
        for i, n in enumerate(names)
    ]


def vectors(count: int, first: float = 0.25) -> list[list[float]]:
    return [[first, 0.5, float(i)] for i in range(count)]


class FileLedgerContract:
    """What ``kb ingest`` relies on: records, atomic swaps, touch, the writer lock."""

    def test_is_a_file_ledger(self, store: LedgerStore) -> None:
        assert supports(store, FileLedger)

    def test_no_records_at_first(self, store: LedgerStore) -> None:
        assert store.file_records() == {}

    def test_replace_file_stores_documents_and_record(self, store: LedgerStore) -> None:
        rec = record("/d/a.md", 1, ["/d/a.md#x", "/d/a.md#y"])
        assert store.replace_file(rec, chunks("/d/a.md", "x", "y"), vectors(2)) == 0
        assert store.file_records() == {"/d/a.md": rec}
        assert ids(store.iter_documents(source="/d/a.md")) == ["/d/a.md#x", "/d/a.md#y"]
        got = store.get(["/d/a.md#y"], with_embeddings=True)
        assert got[0].embedding == vectors(2)[1]

    def test_replace_file_swaps_and_returns_how_many_it_removed(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x", "y"), vectors(2))
        store.replace_file(record("/d/b.md", 1), chunks("/d/b.md", "z"), vectors(1))
        rec = record("/d/a.md", 2, ["/d/a.md#p"])
        assert store.replace_file(rec, chunks("/d/a.md", "p"), vectors(1, 0.5)) == 2
        assert ids(store.iter_documents(source="/d/a.md")) == ["/d/a.md#p"]
        assert ids(store.iter_documents(source="/d/b.md")) == ["/d/b.md#z"]
        assert store.file_records()["/d/a.md"] == rec
        assert store.file_records()["/d/b.md"] == record("/d/b.md", 1)

    def test_replace_file_with_no_documents(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x", "y"), vectors(2))
        assert store.replace_file(record("/d/a.md", 2), [], None) == 2
        assert store.count() == 0
        assert store.file_records()["/d/a.md"] == record("/d/a.md", 2)

    def test_replace_file_without_vectors(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x"), None)
        assert [d.embedding for d in store.get(["/d/a.md#x"], with_embeddings=True)] == [None]

    def test_replace_file_is_atomic(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x", "y"), vectors(2))
        with pytest.raises((ValueError, KBError)):
            # one vector for two documents
            store.replace_file(record("/d/a.md", 2), chunks("/d/a.md", "p", "q"), vectors(1))
        assert ids(store.iter_documents(source="/d/a.md")) == ["/d/a.md#x", "/d/a.md#y"]
        assert store.file_records() == {"/d/a.md": record("/d/a.md", 1)}

    def test_replace_file_calls_commit_together_in_a_transaction(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x"), vectors(1))
        with pytest.raises(Boom):
            with store.transaction():
                store.replace_file(record("/d/a.md", 2), chunks("/d/a.md", "p"), vectors(1))
                store.replace_file(record("/d/b.md", 1), chunks("/d/b.md", "z"), vectors(1))
                raise Boom
        assert store.file_records() == {"/d/a.md": record("/d/a.md", 1)}
        assert ids(store.list_all()) == ["/d/a.md#x"]
        with store.transaction():
            store.replace_file(record("/d/a.md", 2), chunks("/d/a.md", "p"), vectors(1))
            store.replace_file(record("/d/b.md", 1), chunks("/d/b.md", "z"), vectors(1))
        assert set(store.file_records()) == {"/d/a.md", "/d/b.md"}
        assert ids(store.list_all()) == ["/d/a.md#p", "/d/b.md#z"]

    def test_replace_file_with_embedder_caches_the_vectors(self, store: LedgerStore) -> None:
        docs = chunks("/d/a.md", "x", "y")
        store.replace_file(record("/d/a.md", 1), docs, vectors(2), embedder=INFO)
        cached = store.cached_embeddings(INFO, [d.text for d in docs] + ["never seen"])
        assert cached == {docs[0].text: vectors(2)[0], docs[1].text: vectors(2)[1]}

    def test_replace_files_is_replace_file_of_each_in_order(self, store: LedgerStore) -> None:
        # kb ingest writes a group of files at once: the same as one by one, a path met twice
        # in a group included (the later version wins)
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x", "y"), vectors(2))
        b_docs = chunks("/d/b.md", "z", "w")
        batch = [
            (record("/d/a.md", 2), chunks("/d/a.md", "p"), vectors(1), None),
            (record("/d/b.md", 1), b_docs, vectors(2), INFO),
            (record("/d/a.md", 3), chunks("/d/a.md", "q", "r"), vectors(2, 0.5), None),
            (record("/d/c.md", 1), [], None, None),
        ]
        assert store.replace_files(batch) == [2, 0, 1, 0]
        assert store.file_records() == {
            "/d/a.md": record("/d/a.md", 3),
            "/d/b.md": record("/d/b.md", 1),
            "/d/c.md": record("/d/c.md", 1),
        }
        assert sorted(ids(store.list_all())) == ["/d/a.md#q", "/d/a.md#r", "/d/b.md#w", "/d/b.md#z"]
        got = store.get(["/d/a.md#r", "/d/b.md#w"], with_embeddings=True)
        assert [d.embedding for d in got] == [vectors(2, 0.5)[1], vectors(2)[1]]
        cached = store.cached_embeddings(INFO, [d.text for d in b_docs])
        assert cached == {b_docs[0].text: vectors(2)[0], b_docs[1].text: vectors(2)[1]}

    def test_replace_files_is_all_or_nothing(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x"), vectors(1))
        with pytest.raises((ValueError, KBError)):
            store.replace_files(
                [
                    (record("/d/b.md", 1), chunks("/d/b.md", "z"), vectors(1), None),
                    (record("/d/a.md", 2), chunks("/d/a.md", "p", "q"), vectors(1), None),
                ]
            )
        assert store.file_records() == {"/d/a.md": record("/d/a.md", 1)}
        assert ids(store.list_all()) == ["/d/a.md#x"]

    def test_touch_file_updates_only_the_record(self, store: LedgerStore) -> None:
        docs = chunks("/d/a.md", "x", "y")
        store.replace_file(record("/d/a.md", 1), docs, vectors(2))
        before = store.get([d.id for d in docs], with_embeddings=True)
        touched = record("/d/a.md", 3)
        store.touch_file(touched)
        assert store.file_records() == {"/d/a.md": touched}
        after = store.get([d.id for d in docs], with_embeddings=True)
        assert [(d.id, d.text, d.metadata, d.embedding) for d in after] == [
            (d.id, d.text, d.metadata, d.embedding) for d in before
        ]

    def test_delete_source_drops_the_file_record(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x"), vectors(1))
        store.replace_file(record("/d/b.md", 1), chunks("/d/b.md", "z"), vectors(1))
        assert store.delete_source("/d/a.md") == 1
        assert set(store.file_records()) == {"/d/b.md"}

    def test_checkpoint_is_harmless(self, store: LedgerStore) -> None:
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x"), vectors(1))
        store.checkpoint()
        assert ids(store.list_all()) == ["/d/a.md#x"]

    # --- the writer lock ---------------------------------------------------------------------

    @staticmethod
    def _try_lock(store: FileLedger, wait: float) -> tuple[BaseException | None, float]:
        """Try the lock from another thread; returns (its error or None, seconds taken)."""
        errors: list[BaseException | None] = []
        took: list[float] = []

        def run() -> None:
            start = time.monotonic()
            try:
                with store.writer_lock(wait):
                    errors.append(None)
            except BaseException as exc:  # reported to the test thread
                errors.append(exc)
            took.append(time.monotonic() - start)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "writer_lock never returned"
        return errors[0], took[0]

    def test_writer_lock_is_free_when_nobody_holds_it(self, store: LedgerStore) -> None:
        with store.writer_lock(WAIT):
            pass
        error, _ = self._try_lock(store, WAIT)
        assert error is None

    def test_a_second_holder_waits_then_fails(self, store: LedgerStore) -> None:
        with store.writer_lock(WAIT):
            error, took = self._try_lock(store, WAIT)
        assert isinstance(error, DatabaseLockedError)
        assert took >= WAIT * 0.9
        error, _ = self._try_lock(store, WAIT)  # released: free again
        assert error is None

    def test_a_second_holder_gets_the_lock_when_it_is_released_in_time(
        self, store: LedgerStore
    ) -> None:
        held = threading.Event()
        release = threading.Event()
        errors: list[BaseException] = []

        def hold() -> None:
            try:
                with store.writer_lock(WAIT):
                    held.set()
                    release.wait(5)
            except BaseException as exc:  # reported to the test thread
                errors.append(exc)
                held.set()

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(5) and not errors
        timer = threading.Timer(WAIT, release.set)
        timer.start()
        try:
            start = time.monotonic()
            with store.writer_lock(5.0):
                took = time.monotonic() - start
        finally:
            release.set()
            timer.cancel()
            holder.join(5)
        assert WAIT * 0.5 <= took < 5.0  # it waited for the holder, then got the lock


class FreshnessReadsContract:
    """What a search's freshness check reads (:class:`~kbcli.protocols.FreshnessReads`): a
    few files' records, whether an ingest holds the lock (never taking it), chunks without a
    vector, and the ``changed_at`` meta every change to chunks or vectors commits with."""

    def test_is_freshness_reads(self, store: FreshnessStore) -> None:
        assert supports(store, FreshnessReads)

    def test_file_records_of_reads_only_the_paths_asked(self, store: FreshnessStore) -> None:
        for path in ("/d/a.md", "/d/b.md", "/d/c.md"):
            store.replace_file(record(path, 2), chunks(path, "x"), vectors(1))
        got = store.file_records_of(["/d/c.md", "/d/a.md", "/d/none.md", "/d/a.md"])
        assert got == {"/d/a.md": record("/d/a.md", 2), "/d/c.md": record("/d/c.md", 2)}
        assert store.file_records_of([]) == {}

    def test_ingest_running_while_the_writer_lock_is_held(self, store: FreshnessStore) -> None:
        assert store.ingest_running() is False
        with store.writer_lock(WAIT):
            assert store.ingest_running() is True
        assert store.ingest_running() is False

    def test_asking_never_takes_the_lock(self, store: FreshnessStore) -> None:
        for _ in range(3):
            store.ingest_running()
        with store.writer_lock(0.0):  # free at once: asking left nothing held
            pass

    def test_vectors_missing_counts_chunks_without_a_vector(self, store: FreshnessStore) -> None:
        assert store.vectors_missing() == 0
        unknown = as_vectors([None, None])  # chunks written before their vectors, as ingest does
        store.replace_file(record("/d/a.md", 1), chunks("/d/a.md", "x", "y"), unknown)
        assert store.vectors_missing() == 2
        store.set_vectors({"/d/a.md#x": [0.5, 0.5, 0.0]}, embedder=INFO)
        assert store.vectors_missing() == 1

    def test_changed_at_commits_with_each_change(self, store: FreshnessStore) -> None:
        assert store.get_meta("changed_at") is None
        store.add(chunks("/d/a.md", "x"), vectors(1), embedder=INFO)
        first = store.get_meta("changed_at")
        assert first is not None and first.endswith("+00:00")
        store.set_meta("changed_at", "2000-01-01T00:00:00+00:00")
        store.delete_source("/d/a.md")
        assert (store.get_meta("changed_at") or "") > "2000-01-01T00:00:00+00:00"

    def test_a_failed_write_leaves_changed_at_as_it_was(self, store: FreshnessStore) -> None:
        store.set_meta("changed_at", "2000-01-01T00:00:00+00:00")
        with pytest.raises(Boom):
            with store.transaction():
                store.add(chunks("/d/a.md", "x"), vectors(1), embedder=INFO)
                raise Boom
        assert store.get_meta("changed_at") == "2000-01-01T00:00:00+00:00"
