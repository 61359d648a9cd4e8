"""knowledge_add writes a note keyword-first and fills its vector after (NoteVectors): in
process, on a real SQLite index, with an embedder that fails, then recovers."""

from __future__ import annotations

import threading

from counting_embedder import CountingEmbedder
from kbcli import KnowledgeBase
from kbcli.agent.tools.read import knowledge_tools
from kbcli.agent.tools.write import NoteWriter


class FlakyEmbedder(CountingEmbedder):
    """Fails while ``down`` is set; blocks while ``hold`` is clear."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.hold = threading.Event()
        self.hold.set()

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.hold.wait(30)
        if self.down:
            raise RuntimeError("embedder down")
        return super()._embed_batch(texts)


def has_vector(kb: KnowledgeBase, note_id: str) -> bool:
    [doc] = kb.store.get([note_id], with_embeddings=True)
    return doc.embedding is not None and len(doc.embedding) > 0


def tools(kb: KnowledgeBase, wait: float) -> dict:
    writer = NoteWriter("agent", vector_wait=wait)
    return {t.name: t for t in knowledge_tools(kb, allow_write=True, writer=writer)}


def test_a_failing_embedder_leaves_the_note_keyword_searchable_then_retries(tmp_path):
    embedder = FlakyEmbedder()
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=embedder)
    try:
        kb.add("first text so the index knows its embedder")
        named = tools(kb, wait=0.5)
        embedder.down = True
        reply = named["knowledge_add"].call({"text": "quokka migration notes"})
        assert not reply.is_error and "its vector is pending" in reply.text, reply.text
        note_id = reply.text.split()[2]
        hits = kb.search("quokka", mode="keyword", k=3)
        assert [h.document.id for h in hits] == [note_id]
        assert not has_vector(kb, note_id)

        embedder.down = False  # the next note takes the failed one along
        second = named["knowledge_add"].call({"text": "wombat release notes"})
        assert "by keyword and by meaning" in second.text, second.text
        assert has_vector(kb, note_id) and has_vector(kb, second.text.split()[2])
    finally:
        embedder.hold.set()
        kb.close()


def test_a_slow_embedder_does_not_hold_the_reply_back(tmp_path):
    embedder = FlakyEmbedder()
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=embedder)
    try:
        kb.add("first text so the index knows its embedder")
        named = tools(kb, wait=0.2)
        embedder.hold.clear()
        reply = named["knowledge_add"].call({"text": "platypus budget"})
        assert "its vector is pending" in reply.text
        note_id = reply.text.split()[2]
        assert [h.document.id for h in kb.search("platypus", mode="keyword", k=3)] == [note_id]
        embedder.hold.set()
        for _ in range(300):
            if has_vector(kb, note_id):
                break
            threading.Event().wait(0.05)
        assert has_vector(kb, note_id)
    finally:
        embedder.hold.set()
        kb.close()


def test_a_note_left_without_its_vector_is_filled_by_the_next_ingest(tmp_path):
    """The server stopped before the note's vector was stored: the next ``kb ingest`` (a sync
    of any folder) fills it, so the index is not left behind for ever."""
    from kbcli.ingest.sync import sync

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nplain file text about gardens\n")
    embedder = FlakyEmbedder()
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=embedder)
    try:
        sync(kb, [docs])
        named = tools(kb, wait=0.2)
        embedder.down = True
        reply = named["knowledge_add"].call({"text": "quokka migration notes"})
        assert "its vector is pending" in reply.text, reply.text
        note_id = reply.text.split()[2]
    finally:
        kb.close()  # the server goes; the note's vector was never stored
    embedder.down = False
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=embedder)
    try:
        assert not has_vector(kb, note_id)
        report = sync(kb, [docs])  # nothing changed on disk
        assert has_vector(kb, note_id)
        assert report.vectors_missing == 0
    finally:
        kb.close()
