"""The embedding cache costs at most the vectors it serves (issue 41: schema 5 kept 58.5 MB for
12,480 vectors of 1,536 bytes, three times the vectors, beside the vectors themselves).

The index's own vectors are the cache; the table keeps only what left the index, bounded. Real
SQLite files, sizes from SQLite's own page accounting (``dbstat``) where the library has it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from kbcli.embedders.base import BaseEmbedder
from kbcli.ingest.sync import sync
from kbcli.pipeline import KnowledgeBase
from kbcli.search.calibration import probes_for

DIM = 384  # MiniLM's: a 1,536-byte vector


class Model(BaseEmbedder):
    """A deterministic 384-dimension model (not cheap: its vectors are worth caching)."""

    provider, model, dimension, batch_size = "fake", "model-384", DIM, 64

    def __init__(self) -> None:
        self.embedded = 0

    def _embed_batch(self, texts):
        self.embedded += len(texts)
        out = []
        for text in texts:
            seed = hashlib.sha256(text.encode()).digest()
            out.append([b / 255.0 for b in (seed * (DIM // len(seed) + 1))[:DIM]])
        return out


def write_pages(folder: Path, count: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(count):
        body = " ".join(f"Server {i} rotates key {j} every {j + 2} days." for j in range(12))
        steps = " ".join(f"Restore server {i} from copy {j} first." for j in range(10))
        (folder / f"page{i:03}.md").write_text(f"# Page {i}\n\n{body}\n\n## Restore\n\n{steps}\n")


def table_bytes(db: Path, *names: str) -> int | None:
    """Bytes of the pages of ``names`` (tables and indexes), or None without ``dbstat``."""
    conn = sqlite3.connect(db)
    try:
        marks = ",".join("?" * len(names))
        row = conn.execute(f"SELECT sum(pgsize) FROM dbstat WHERE name IN ({marks})", names)
        return int(row.fetchone()[0] or 0)
    except sqlite3.OperationalError:  # a SQLite built without the dbstat table
        return None
    finally:
        conn.close()


def cache_rows(db: Path) -> tuple[int, int]:
    """Rows of the embedding cache table and the bytes of their vectors."""
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT count(*), coalesce(sum(length(vec)), 0) FROM embedding_cache"
        ).fetchone()


def test_the_cache_is_never_bigger_than_the_vectors(tmp_path):
    docs, db = tmp_path / "docs", tmp_path / "kb.db"
    write_pages(docs, 120)
    model = Model()
    kb = KnowledgeBase.open(db, embedder=model)
    try:
        report = sync(kb, [docs])
        vectors = kb.store.stats()["vectors"]
        probes = len(probes_for(None))  # the relevance floor's, embedded once
        assert vectors == report.chunks_added > 120 and model.embedded == vectors + probes
        kb.store.checkpoint()
        assert cache_rows(db) == (0, 0)  # schema 5: every vector a second time
        cached = table_bytes(db, "embedding_cache", "embedding_cache_key")
        stored = table_bytes(db, "vectors")
        if cached is not None and stored is not None:
            assert cached <= 2 * 4096 < stored  # empty: a root page each

        # half the pages deleted: their vectors are kept, no more than the index holds
        for path in sorted(docs.iterdir())[:60]:
            path.unlink()
        sync(kb, [docs], allow_mass_delete=True)
        kept, kept_bytes = cache_rows(db)
        live = kb.store.stats()["vectors"]
        assert kept == vectors - live and kept_bytes == kept * DIM * 4
        kb.store.checkpoint()
        cached = table_bytes(db, "embedding_cache", "embedding_cache_key")
        stored = table_bytes(db, "vectors")
        if cached is not None and stored is not None:
            assert cached <= stored * 1.05, (cached, stored)

        # restored (a branch switched back): nothing embedded, nothing kept twice
        write_pages(docs, 120)
        sync(kb, [docs])
        assert model.embedded == vectors + probes and kb.store.stats()["vectors"] == vectors
        assert cache_rows(db) == (0, 0)
    finally:
        kb.close()


@pytest.mark.slow
def test_what_is_kept_stays_within_the_bound(tmp_path):
    from kbcli.stores.common import KEEP_AT_LEAST

    docs, db = tmp_path / "docs", tmp_path / "kb.db"
    docs.mkdir()
    model = Model()
    kb = KnowledgeBase.open(db, embedder=model)

    def text(round_: int, i: int) -> str:
        return f"Round {round_} says page {i} holds the tide tables."

    try:
        # each round rewrites every page: the vectors of the round before are kept
        rounds, pages = 9, 150
        for round_ in range(rounds):
            for i in range(pages):
                (docs / f"p{i}.md").write_text(text(round_, i) + "\n")
            sync(kb, [docs])
            kept, _ = cache_rows(db)
            assert kept == min(KEEP_AT_LEAST, round_ * pages)  # 8 x 150 > 1,024: trimmed
        assert kb.store.stats()["chunks"] == pages < KEEP_AT_LEAST
        info = Model().info
        newest = kb.store.cached_embeddings(info, [text(rounds - 2, i) for i in range(pages)])
        first = kb.store.cached_embeddings(info, [text(0, i) for i in range(pages)])
        second = kb.store.cached_embeddings(info, [text(1, i) for i in range(pages)])
        assert len(newest) == pages  # the round just before: all kept
        dropped = (rounds - 1) * pages - KEEP_AT_LEAST  # the oldest went first
        assert len(first) == 0 and len(second) == 2 * pages - dropped
    finally:
        kb.close()
