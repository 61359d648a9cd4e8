"""kb stats: figures as a table or JSON."""

from __future__ import annotations

import os

from cli_helpers import SAMPLE, run, run_json, seed


def test_json_figures():
    seed(SAMPLE)
    figures, _ = run_json("stats", "--json")
    assert figures["chunks"] == 4
    assert figures["sources"] == 3
    assert figures["embedder"] == {"provider": "simple", "model": "char-hash-64", "dimension": 64}
    assert figures["vocabulary"] > 10
    assert figures["size_bytes"] > 0
    assert figures["path"] == os.environ["KB_DB"]


def test_table_lists_every_figure():
    seed(SAMPLE)
    result = run("stats")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for label in ("Chunks", "Sources", "Size on disk", "Embedder", "Analyzer", "Vocabulary"):
        assert label in out
    assert "simple / char-hash-64 (64 dimensions)" in out
    assert "KB" in out
    assert os.environ["KB_DB"] in out
    assert "Last ingest   never" in out


def test_empty_database_says_none_yet(tmp_path):
    db = tmp_path / "empty.db"
    from kbcli import SQLiteStore

    SQLiteStore(db).close()
    result = run("--db", str(db), "stats")
    assert result.exit_code == 0, result.stderr
    assert "none yet" in result.stdout
    figures, _ = run_json("--db", str(db), "stats", "--json")
    assert figures["chunks"] == 0 and figures["embedder"] is None


def test_size_on_disk_counts_every_file_kb_writes(tmp_path):
    # the database, its -wal and -shm, the ingest lock, the keyword pack and the vector cache
    # (the last two were left out: issue 41), here in a folder of their own
    folder = tmp_path / "index"
    db = folder / "kb.db"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(30):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nlantern harbour tide number {i}\n")
    assert run("--db", str(db), "ingest", str(docs)).exit_code == 0
    assert run("--db", str(db), "search", "harbour tide", "--mode", "hybrid").exit_code == 0
    names = {p.name for p in folder.iterdir()}
    assert {"kb.db", "kb.db.keyword-pack", "kb.db.vectors-cache"} <= names, names
    derived = sum((folder / f"kb.db.{n}").stat().st_size for n in ("keyword-pack", "vectors-cache"))
    figures, _ = run_json("--db", str(db), "stats", "--json")
    assert figures["size_bytes"] >= (folder / "kb.db").stat().st_size + derived
    from kbcli import SQLiteStore

    store = SQLiteStore(db, create=False)  # open: its -wal and -shm are there too
    try:
        on_disk = sum(p.stat().st_size for p in folder.iterdir())
        assert store.stats()["size_bytes"] == on_disk
    finally:
        store.close()
