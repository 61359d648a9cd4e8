"""Each new vector is converted to float32 once on ingest and packed once, for the chunk's row
(issue 26, "pack each vector once"; since issue 41 the embedding cache holds no second copy of
a stored vector: the index's own are its first entries).

The SQLite store's ``pack_vector`` is wrapped (it still runs) to see what it is handed: an
``array("f")`` is copied as it is, anything else is converted."""

from __future__ import annotations

from array import array
from pathlib import Path

from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.sync import sync
from kbcli.stores import common
from kbcli.stores.sqlite import ledger, vectors


def watch_packing(monkeypatch) -> list[bool]:
    """For every vector the SQLite store packs: whether it came as a float32 array."""
    seen: list[bool] = []

    def pack(vec):
        seen.append(isinstance(vec, array) and vec.typecode == "f")
        return common.pack_vector(vec)

    monkeypatch.setattr(vectors, "pack_vector", pack)
    monkeypatch.setattr(ledger, "pack_vector", pack)
    return seen


class ModelLike(SimpleEmbedder):
    """The simple embedder declared costly, as a model is: its vectors are cached."""

    cheap = False


def three_notes(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"n{n}.md").write_text(f"# Note {n}\n\nabout topic {n} and more\n")
    return docs


def test_kb_ingest_converts_each_vector_once(tmp_path, monkeypatch):
    docs = three_notes(tmp_path)
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=ModelLike())
    seen = watch_packing(monkeypatch)
    report = sync(kb, [docs])
    assert report.vectors_added == kb.store.count() == 3
    # one row per vector, packed from the float32 array (no copy in the embedding cache)
    assert len(seen) == 3 and all(seen)


def test_a_cheap_embedders_vectors_are_packed_once_and_never_cached(tmp_path, monkeypatch):
    docs = three_notes(tmp_path)
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    seen = watch_packing(monkeypatch)
    report = sync(kb, [docs])
    # written with their files: nothing left to fill in after the writes, no cache entry
    assert report.vectors_added == 0 and kb.store.stats()["vectors"] == kb.store.count() == 3
    assert len(seen) == 3 and all(seen)


def test_ingest_file_converts_each_vector_once(tmp_path, monkeypatch):
    f = tmp_path / "a.md"
    f.write_text("# A\n\nlanterns and harbours\n")
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=ModelLike())
    seen = watch_packing(monkeypatch)
    kb.ingest_file(f)
    assert len(seen) == 1 and all(seen)


def test_a_float32_array_is_packed_as_it_is():
    values = [0.1, 0.2, 0.3]
    assert common.pack_vector(array("f", values)) == common.pack_vector(values)
    assert common.unpack_vector(common.pack_vector(array("f", values))) == list(array("f", values))
