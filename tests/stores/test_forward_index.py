"""The narrow forward index (``chunks.terms``, issue 30): 6 bytes a term instead of 16, and an
index written by an older kbcli (int64 pairs) still read and searched exactly, also once
chunks of both encodings sit side by side."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kbcli import SQLiteStore
from kbcli.stores.sqlite import catalog, packfile

OUR_SRC = str(Path(__file__).resolve().parents[2] / "src")
QUERIES = ["harbour lantern", "topic1", "ledger audit quarterly", "word7 word3", "storm"]

SEARCH = """
import json, sys
from kbcli import SQLiteStore
from pathlib import Path
with SQLiteStore(sys.argv[1], create=False) as store:
    print(json.dumps({
        q: [[Path(h.document.metadata["source"]).name, h.document.text, h.score]
            for h in store.keyword_search(q, k=1000)]
        for q in sys.argv[2:]
    }))
"""


def test_narrow_encoding_round_trips_and_is_six_bytes_a_term():
    counts = {1: 3, 70_000: 1, 2**32 - 1: 65_535}
    blob = catalog.pack_terms(counts)
    assert len(blob) == 1 + 6 * len(counts) and blob[0] == catalog.NARROW_TAG
    assert catalog.unpack_terms(blob) == counts
    assert catalog.pack_terms({}) == b"" and catalog.unpack_terms(b"") == {}


@pytest.mark.parametrize("counts", [{5: 65_536}, {2**32: 1, 3: 2}])
def test_a_term_too_big_for_the_narrow_encoding_is_written_wide(counts):
    blob = catalog.pack_terms(counts)
    assert len(blob) == 16 * len(counts)  # the old int64 pairs, still read
    assert catalog.unpack_terms(blob) == counts
    terms, tfs, per_chunk = packfile.term_pairs([blob, catalog.pack_terms({9: 1})])
    assert list(zip(terms.tolist(), tfs.tolist())) == [*counts.items(), (9, 1)]
    assert per_chunk.tolist() == [len(counts), 1]


def test_the_pack_builder_reads_both_encodings_mixed_in_chunk_order():
    rng = np.random.default_rng(7)
    chunks = [
        {int(t): int(rng.integers(1, 9)) for t in rng.integers(1, 5000, rng.integers(0, 20))}
        for _ in range(300)
    ]
    wide = [np.array([*c.items()], "<i8").tobytes() if c else b"" for c in chunks]
    blobs = [w if i % 3 else catalog.pack_terms(c) for i, (c, w) in enumerate(zip(chunks, wide))]
    terms, tfs, per_chunk = packfile.term_pairs(blobs)
    assert list(zip(terms.tolist(), tfs.tolist())) == [p for c in chunks for p in c.items()]
    assert per_chunk.tolist() == [len(c) for c in chunks]
    assert [catalog.unpack_terms(b) for b in blobs] == chunks


def test_an_unknown_encoding_is_refused_not_misread():
    bad = b"\x07" + bytes(6)
    with pytest.raises(ValueError, match="unknown encoding"):
        catalog.unpack_terms(bad)
    with pytest.raises(ValueError, match="unknown encoding"):
        packfile.term_pairs([catalog.pack_terms({1: 1}), bad])


def write_docs(folder: Path, names: range) -> None:
    folder.mkdir(exist_ok=True)
    for i in names:
        words = " ".join(f"word{(i * j) % 11}" for j in range(40))
        (folder / f"n{i}.md").write_text(
            f"# Note {i}\n\nharbour lantern topic{i % 3} {words}\n\n"
            + ("ledger audit quarterly storm " * (i % 4 + 1))
            + "\n",
            encoding="utf-8",
        )


def run_kb(src: Path | str, db: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "-q", "--db", str(db), *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]


def searched(src: Path | str, db: Path) -> dict[str, list[list]]:
    Path(f"{db}.keyword-pack").unlink(missing_ok=True)  # built again from the forward indexes
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", SEARCH, str(db), *QUERIES],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    return json.loads(done.stdout)


def encodings(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        lengths = [n for (n,) in conn.execute("SELECT length(terms) FROM chunks")]
    return {"narrow" if n % 2 else "wide" for n in lengths if n}


def same(a: dict[str, list[list]], b: dict[str, list[list]]) -> None:
    """Every hit (file, text) with the same score; chunk ids differ between two indexes, and
    so may the order of equal scores."""
    assert a.keys() == b.keys()
    for q in a:
        x, y = (sorted(r, key=lambda h: (-round(h[2], 9), h[0], h[1])) for r in (a[q], b[q]))
        assert [h[:2] for h in x] == [h[:2] for h in y], q
        assert np.allclose([h[2] for h in x], [h[2] for h in y], rtol=0, atol=1e-9), q
        assert x, q  # every query finds something: the comparison is not of two nothings


def as_schema_4(db: Path) -> None:
    """``db`` as a schema-4 kbcli left it: every forward index in int64 pairs, version 4, no
    pack (the differences from schema 5; tests/data/schema-v4.db is a real one), and schema
    6's embedding cache undone (its ``WITHOUT ROWID`` table, no index on ``text_hash``)."""
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "DROP INDEX chunks_text_hash; DROP TABLE embedding_cache;"
            "CREATE TABLE embedding_cache (embedder TEXT NOT NULL, text_hash TEXT NOT NULL,"
            " vec BLOB NOT NULL, PRIMARY KEY (embedder, text_hash)) WITHOUT ROWID;"
        )
        rows = conn.execute("SELECT doc, terms FROM chunks").fetchall()
        for doc, blob in rows:
            conn.execute(
                "UPDATE chunks SET terms = ? WHERE doc = ?",
                (catalog._pack_wide(catalog.unpack_terms(blob)), doc),
            )
        conn.execute("PRAGMA user_version = 4")
    Path(f"{db}.keyword-pack").unlink(missing_ok=True)


@pytest.mark.slow
def test_an_index_of_schema_4_searches_identically_and_takes_new_chunks(tmp_path):
    docs = tmp_path / "docs"
    write_docs(docs, range(0, 24))
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    run_kb(OUR_SRC, old, "ingest", str(docs))
    before = searched(OUR_SRC, old)
    as_schema_4(old)
    assert encodings(old) == {"wide"}  # a schema-4 index: int64 pairs only
    same(searched(OUR_SRC, old), before)  # read by this code: the same hits and scores

    run_kb(OUR_SRC, fresh, "ingest", str(docs))
    assert encodings(fresh) == {"narrow"}
    same(searched(OUR_SRC, fresh), before)

    # New, changed and removed files on the old index: both encodings side by side, and
    # still exactly what an index built from scratch by this code finds.
    write_docs(docs, range(24, 40))
    (docs / "n5.md").write_text("# Note 5\n\nstorm harbour rewritten\n", encoding="utf-8")
    (docs / "n6.md").unlink()
    for db in (old, fresh):
        run_kb(OUR_SRC, db, "ingest", str(docs))
    assert encodings(old) == {"narrow", "wide"}
    same(searched(OUR_SRC, old), searched(OUR_SRC, fresh))
    with SQLiteStore(old, create=False) as store:
        assert store.integrity_check() == []
