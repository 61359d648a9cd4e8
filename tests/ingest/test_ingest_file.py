"""One ingest path: ``KnowledgeBase.ingest_file`` indexes a file exactly as ``kb ingest`` does
(issue 26). Before, the library path mapped lines on the loaded text (CRLF files, blank-line
runs got other ``line`` values), wrote no file record, and the next ``kb ingest`` indexed every
such file again.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hostile import make_docx, make_pdf
from kbcli import KnowledgeBase, LoaderError
from kbcli.ingest.sync import sync
from kbcli.stores import InMemoryStore

SRC = str(Path(__file__).resolve().parents[2] / "src")


def write_files(folder: Path) -> list[Path]:
    folder.mkdir()
    crlf = folder / "windows.txt"
    crlf.write_bytes(
        b"Reset the router.\r\n\r\n\r\n\r\nThen hold the button\r\nfor ten seconds.\r\n" * 30
    )
    md = folder / "guide.md"
    md.write_text(
        "# Setup\n\nInstall the tool.\n\n\n\n\n## Linux\n\nUse apt to install it.\n"
        + "\n\nMore words about the Linux setup here.\n" * 40,
        encoding="utf-8",
    )
    pdf = folder / "manual.pdf"
    pdf.write_bytes(make_pdf(["First page: the warranty terms.", "Second page: returns."]))
    docx = make_docx(
        folder / "travel.docx",
        [("h1", "Travel policy"), ("p", "Book flights."), ("h2", "Hotels"), ("p", "Two nights.")],
    )
    return [crlf, md, pdf, docx]


def contents(db: Path) -> tuple[list, list]:
    """Chunks (source, text, metadata) and file records (their chunk ids as a count, no
    times): chunk ids are new for every write."""
    conn = sqlite3.connect(db)
    try:
        chunks = sorted(conn.execute("SELECT source, text, metadata FROM chunks"))
        files = sorted(
            conn.execute("SELECT path, size, mtime_ns, sha256, settings, chunk_ids FROM files")
        )
    finally:
        conn.close()
    return (
        [(s, t, json.loads(m)) for s, t, m in chunks],
        [(*row[:5], len(json.loads(row[5]))) for row in files],
    )


def test_ingest_file_writes_what_kb_ingest_writes_and_the_next_ingest_finds_it_unchanged(
    tmp_path,
):
    files = write_files(tmp_path / "docs")
    cli_db, lib_db = tmp_path / "cli.db", tmp_path / "lib.db"
    with KnowledgeBase.open(cli_db) as kb:
        report = sync(kb, [tmp_path / "docs"])
    assert report.added == 4 and not report.failed
    with KnowledgeBase.open(lib_db) as kb:
        ids = [kb.ingest_file(path) for path in files]
    assert all(ids)
    assert contents(lib_db) == contents(cli_db)
    lines = {m.get("line") for s, _, m in contents(lib_db)[0] if s.endswith("windows.txt")}
    assert max(lines) > 30  # lines as the file on disk has them (CRLF, blank-line runs)
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "kbcli",
            "--db",
            str(lib_db),
            "ingest",
            str(tmp_path / "docs"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=True,
    )
    report = json.loads(again.stdout)
    assert report["unchanged"] == 4 and report["added"] == report["updated"] == 0


def test_ingest_file_returns_the_chunk_ids_replaces_earlier_ones_and_keeps_metadata(tmp_path):
    (path,) = write_files(tmp_path / "docs")[1:2]
    with KnowledgeBase.open(tmp_path / "kb.db") as kb:
        first = kb.ingest_file(path, {"team": "ops"})
        stored = kb.store.get(first)
        assert [d.id for d in stored] == first
        assert {d.metadata["team"] for d in stored} == {"ops"}
        assert all(d.embedding for d in kb.store.get(first, with_embeddings=True))
        path.write_text("# Setup\n\nCompletely new content.\n", encoding="utf-8")
        second = kb.ingest_file(path)
        assert kb.store.count() == len(second) and set(second).isdisjoint(first)
        assert "team" not in kb.store.get(second)[0].metadata
        assert [r.chunk_ids for r in kb.store.file_records().values()] == [second]


def test_ingest_file_on_the_default_memory_store_keeps_a_record_too(tmp_path):
    (path,) = write_files(tmp_path / "docs")[:1]
    kb = KnowledgeBase()
    assert isinstance(kb.store, InMemoryStore)
    ids = kb.ingest_file(path)
    record = kb.store.file_records()[str(path.resolve())]
    assert record.chunk_ids == ids and len(record.sha256) == 64


def test_a_file_that_cannot_be_read_raises_and_leaves_the_index_as_it_was(tmp_path):
    files = write_files(tmp_path / "docs")
    db = tmp_path / "kb.db"
    with KnowledgeBase.open(db) as kb:
        kb.ingest_file(files[1])
        before = contents(db)
        bad = tmp_path / "docs" / "broken.pdf"
        bad.write_bytes(b"%PDF-1.4 not really")
        with pytest.raises(LoaderError, match="broken.pdf"):
            kb.ingest_file(bad)
        with pytest.raises(LoaderError, match="missing.md"):
            kb.ingest_file(tmp_path / "docs" / "missing.md")
    assert contents(db) == before


def test_a_plain_store_without_a_ledger_still_takes_files(tmp_path):
    """The reference store protocol (add / search / delete / list_all) keeps working."""
    from kbcli.embedders import SimpleEmbedder

    class PlainStore:
        def __init__(self):
            self.docs = {}

        def add(self, docs, embeddings=None, **_):
            for doc, vec in zip(docs, embeddings or [d.embedding for d in docs]):
                doc.embedding = vec
                self.docs[doc.id] = doc
            return [d.id for d in docs]

        def search(self, query_vec, k=5, filter=None):
            return []

        def delete(self, ids):
            return any(self.docs.pop(i, None) for i in ids)

        def list_all(self):
            return list(self.docs.values())

    store = PlainStore()
    kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
    (path,) = write_files(tmp_path / "docs")[1:2]
    ids = kb.ingest_file(path)
    assert ids and set(ids) == set(store.docs)
