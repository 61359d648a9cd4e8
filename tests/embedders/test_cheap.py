"""An embedder cheaper to run than its cache (``cheap``, issue 30): the built-in one. Its
vectors are embedded as ``kb ingest`` prepares each file, written with the chunks, never put
in the embedding cache; an embedder that does not declare itself cheap keeps the cache."""

from __future__ import annotations

import sqlite3
from array import array
from pathlib import Path

from counting_embedder import CountingEmbedder
from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.embedders.base import embedder_info, is_cheap
from kbcli.embedders.lazy import LazyEmbedder
from kbcli.ingest.sync import sync


class Counting(CountingEmbedder):
    """The simple embedder counting the passages it embeds, cheap as the built-in one is."""

    cheap = True


ModelLike = CountingEmbedder  # the same vectors, declared costly as a model is


class ProtocolOnly:
    """An embedder following the protocol only (no BaseEmbedder), saying it is cheap."""

    provider, model, cheap = "mine", "m1", True

    def embed_documents(self, texts):
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text):
        return [1.0, float(len(text))]


def write_notes(folder: Path, n: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(n):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nharbour lantern number {i}\n")


def cache_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]


def test_the_property_is_declared_and_read_from_the_embedder():
    assert is_cheap(SimpleEmbedder()) and not embedder_info(SimpleEmbedder()).cache
    assert not is_cheap(ModelLike()) and embedder_info(ModelLike()).cache
    assert is_cheap(ProtocolOnly()) and not embedder_info(ProtocolOnly()).cache

    class Vague(ProtocolOnly):
        cheap = "yes"  # not a declaration: only True is

    assert not is_cheap(Vague()) and embedder_info(Vague()).cache
    # not part of the identity an index records and checks
    assert embedder_info(SimpleEmbedder()) == embedder_info(ModelLike())


def test_the_lazy_embedder_says_what_the_resolved_one_declares():
    lazy = LazyEmbedder()
    lazy._embedder = SimpleEmbedder()  # as resolution would leave it, without a config file
    assert lazy.capabilities.cheap and not lazy.info.cache
    lazy._embedder = ModelLike()
    assert not lazy.capabilities.cheap and lazy.info.cache


def test_a_cheap_embedder_writes_vectors_with_the_files_and_caches_none(tmp_path):
    docs, db = tmp_path / "docs", tmp_path / "kb.db"
    write_notes(docs, 5)
    embedder = Counting()
    kb = KnowledgeBase.open(db, embedder=embedder)
    report = sync(kb, [docs])
    assert report.chunks_added == kb.store.count() == kb.store.stats()["vectors"] == 5
    assert report.vectors_added == 0 and report.vectors_missing == 0  # nothing to fill in
    assert cache_rows(db) == 0 and embedder.embedded == 5
    stored = {d.text: list(d.embedding) for d in kb.store.iter_documents(with_embeddings=True)}
    fresh = ModelLike().embed_documents(list(stored))  # stored as float32, as every vector
    assert stored == {t: list(array("f", v)) for t, v in zip(stored, fresh)}
    # a changed file is embedded again (no cache to ask), the others are not read at all
    (docs / "n2.md").write_text("# Note 2\n\nrewritten storm\n")
    sync(kb, [docs])
    assert embedder.embedded == 6 and cache_rows(db) == 0
    assert kb.search("storm", k=1, mode="semantic")[0].document.text.endswith("rewritten storm")


def test_an_embedder_not_declared_cheap_keeps_the_cache_and_the_fill(tmp_path):
    docs, db = tmp_path / "docs", tmp_path / "kb.db"
    write_notes(docs, 5)
    embedder = ModelLike()
    kb = KnowledgeBase.open(db, embedder=embedder)
    report = sync(kb, [docs])
    assert report.vectors_added == kb.store.count() == 5  # filled in after the writes
    assert cache_rows(db) == 0  # the index's own vectors are the cache: none copied
    # the same text moved to a new file: from the cache, nothing embedded again
    (docs / "n1.md").rename(docs / "moved.md")
    sync(kb, [docs])
    assert embedder.embedded == 5 and kb.store.stats()["vectors"] == 5
    assert cache_rows(db) == 0  # its text is still in the index: nothing kept
    # a file deleted keeps its vectors; restored, it embeds nothing
    gone = (docs / "n3.md").read_text()
    (docs / "n3.md").unlink()
    sync(kb, [docs])
    assert cache_rows(db) == 1
    (docs / "n3.md").write_text(gone)
    sync(kb, [docs])
    assert embedder.embedded == 5 and cache_rows(db) == 0


def test_a_cheap_embedder_fills_chunks_an_earlier_run_left_without_vectors(tmp_path):
    docs, db = tmp_path / "docs", tmp_path / "kb.db"
    write_notes(docs, 3)
    kb = KnowledgeBase.open(db, embedder=Counting())
    sync(kb, [docs])
    with sqlite3.connect(db) as conn:  # as an interrupted fill of an older kbcli leaves it
        conn.execute("DELETE FROM vectors WHERE doc IN (SELECT doc FROM vectors LIMIT 2)")
    kb = KnowledgeBase.open(db, embedder=Counting())
    report = sync(kb, [docs])
    assert report.vectors_added == 2 and kb.store.stats()["vectors"] == 3
    assert cache_rows(db) == 0
