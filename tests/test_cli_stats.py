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
