"""Per-hit freshness over PostgreSQL (the session's real server): the ledger records of the
hits' files and which hits have a vector are read from the server, an ingest's advisory lock
is seen without being taken, and every change commits ``changed_at``."""

from __future__ import annotations

import threading

from kbcli import KnowledgeBase, SimpleEmbedder
from kbcli.ingest.sync import sync
from kbcli.search.freshness import index_watermark
from kbcli.types import Document


def test_states_and_watermark_on_postgres(tmp_path, pg_dsn, pg_table):
    from kbcli.stores.postgres import PostgresStore

    notes = tmp_path / "notes"
    notes.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (notes / f"{name}.md").write_text(f"# {name}\n\nThe {name} reactor log.\n")
    store = PostgresStore(pg_dsn, pg_table, busy_timeout=10.0)
    kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
    try:
        sync(kb, [notes])
        (notes / "alpha.md").write_text("# alpha\n\nThe alpha reactor was rebuilt, twice.\n")
        (notes / "beta.md").unlink()
        docs = list(store.iter_documents(source=str(notes / "gamma.md")))
        store.add([Document(d.id, d.text, d.metadata) for d in docs])  # vectors pending
        states = {
            r.document.metadata["source"].rsplit("/", 1)[-1]: r.freshness.state
            for r in kb.search("reactor", k=10, mode="keyword")
        }
        assert states == {
            "alpha.md": "changed",
            "beta.md": "missing",
            "gamma.md": "vectors_pending",
        }
        mark = index_watermark(kb)
        assert mark.changed_at is not None and mark.vectors_pending == len(docs)
        held, release = threading.Event(), threading.Event()

        def ingest() -> None:
            with store.writer_lock(5.0):
                held.set()
                release.wait(10)

        thread = threading.Thread(target=ingest)
        thread.start()
        try:
            assert held.wait(10) and index_watermark(kb).syncing is True
        finally:
            release.set()
            thread.join()
        assert index_watermark(kb).syncing is False
    finally:
        kb.close()
