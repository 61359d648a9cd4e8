"""Field-aware keyword ranking: titles (first heading, else the file name), the heading path
without the title, the body; a page named after the query first in keyword and default modes
(library and the installed ``kb``); an index built with the fields of an older kbcli
re-tokenised automatically (readers when the writer lock is free, writers always, ``kb doctor
--repair``), with the same scores as a fresh index and no embedder call.

An "old" index is built by this code with the old field set patched in (the signature and
terms of kbcli before titles, and no ``title`` metadata at ingest): the database then holds
exactly what the older version wrote, as far as the keyword index is concerned.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from console_script import kb
from extras import need
from kbcli import KnowledgeBase, SearchOptions, SimpleEmbedder, SQLiteStore
from kbcli.errors import IndexMismatchError
from kbcli.text import analysis
from kbcli.text.analysis import (
    FIELD_WEIGHTS,
    Analyzer,
    chunk_fields,
    document_title,
    keyword_counts,
)

PAGES = {
    "systemctl.md": "# systemctl\n\nControl the systemd system and service manager: start, stop"
    " and inspect units, read their state and choose what starts at boot.\n",
    "services.md": "# Managing services\n\nTo run nginx as a service: systemctl start nginx,"
    " then systemctl enable nginx so that it starts at boot.\n",
    "upgrade.md": "# Upgrade notes\n\nAfter changing a unit file run systemctl daemon-reload,"
    " then systemctl restart the unit.\n",
    "journalctl.txt": "Query the journal: show the log messages of units, follow new ones and"
    " filter them by time.\n",
}
OLD_FIELDS = "text+heading"  # the field set of kbcli before titles


@pytest.fixture
def pages(tmp_path) -> Path:
    folder = tmp_path / "pages"
    folder.mkdir()
    for name, text in PAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


class CountingEmbedder(SimpleEmbedder):
    """The built-in embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += texts
        return super().embed_documents(texts)


def ingest(store, folder: Path, embedder=None) -> KnowledgeBase:
    base = KnowledgeBase(store=store, embedder=embedder or SimpleEmbedder())
    for path in sorted(folder.iterdir()):
        base.ingest_file(path)
    return base


def names(hits) -> list[str]:
    return [Path(h.document.metadata["source"]).name for h in hits]


# --- the fields ----------------------------------------------------------------------------


def test_document_title_is_the_first_heading_else_the_file_name():
    assert document_title([None, "Install > Linux", "Install > Mac"], "/d/readme.md") == "Install"
    assert document_title(["Usage"], None) == "Usage"
    assert document_title([None, ""], "/home/me/release-notes_2024.v2.txt") == (
        "release notes 2024 v2"
    )
    assert document_title([], "/etc/.bashrc") == "bashrc"
    assert document_title([None], None) is None


def test_fields_keep_the_title_out_of_the_heading_path_and_weight_each_field():
    meta = {"title": "Guide", "heading": "Guide > Setup > Linux"}
    assert chunk_fields("body words", meta) == ("Guide", "Setup > Linux", "body words")
    assert chunk_fields("x", {"title": "Other", "heading": "Guide"}) == ("Other", "Guide", "x")
    a = Analyzer()
    counts = keyword_counts(a, "install guide", meta)
    expected: Counter[str] = Counter()
    for text, weight in (
        ("Guide", FIELD_WEIGHTS.title),
        ("Setup > Linux", FIELD_WEIGHTS.heading),
        ("install guide", FIELD_WEIGHTS.body),
    ):
        for term in a.terms(text):
            expected[term] += weight
    assert counts == expected
    assert counts[a.terms("guide")[0]] == FIELD_WEIGHTS.title + FIELD_WEIGHTS.body
    assert FIELD_WEIGHTS.title > FIELD_WEIGHTS.body  # the title counts more than the body


def test_ingest_records_the_title_of_every_chunk(tmp_path, pages):
    store = SQLiteStore(tmp_path / "kb.db")
    base = ingest(store, pages)
    titles = {Path(d.metadata["source"]).name: d.metadata.get("title") for d in store.list_all()}
    assert titles == {
        "systemctl.md": "systemctl",
        "services.md": "Managing services",
        "upgrade.md": "Upgrade notes",
        "journalctl.txt": "journalctl",  # no heading: the file name
    }
    base.ingest_file(pages / "upgrade.md", {"title": "Given"})  # --meta title=... wins
    assert {d.metadata["title"] for d in store.list_all() if "upgrade" in d.metadata["source"]} == {
        "Given"
    }
    base.ingest_text("loose text without heading or file")
    loose = [d for d in store.list_all() if "source" not in d.metadata]
    assert loose and all("title" not in d.metadata for d in loose)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_the_page_named_after_the_query_ranks_first(tmp_path, pages, mode):
    base = ingest(SQLiteStore(tmp_path / "kb.db"), pages)
    options = SearchOptions(k=3, mode=mode)
    assert names(base.search_with("systemctl", options))[0] == "systemctl.md"
    # a file without a heading is found by its name, which no text contains
    assert names(base.search_with("journalctl", options))[0] == "journalctl.txt"


@pytest.mark.slow
def test_the_kb_script_ranks_the_named_page_first(kb_exe, pages):  # noqa: F811
    done = kb(kb_exe, "ingest", str(pages))
    assert done.returncode == 0, done.stderr
    for mode in ("keyword", "hybrid"):
        out = kb(kb_exe, "search", "systemctl", "--mode", mode, "-k", "3", "--json")
        assert out.returncode == 0, out.stderr
        hits = json.loads(out.stdout)
        assert Path(hits[0]["metadata"]["source"]).name == "systemctl.md"
        assert hits[0]["metadata"]["title"] == "systemctl"
    hits = json.loads(kb(kb_exe, "search", "journalctl", "--json").stdout)
    assert Path(hits[0]["metadata"]["source"]).name == "journalctl.txt"


# --- indexes of an older kbcli -------------------------------------------------------------


def _legacy_terms(self, doc):
    heading = doc.metadata.get("heading")
    return Counter(self.analyzer.terms(f"{doc.text}\n{heading}" if heading else doc.text))


def patch_old_fields(monkeypatch, keyword_module) -> None:
    """Make ``keyword_module``'s index write as kbcli did before titles."""
    tables = keyword_module.KeywordTables
    monkeypatch.setattr(
        tables, "signature", property(lambda self: f"{self.analyzer.signature};fields={OLD_FIELDS}")
    )
    monkeypatch.setattr(tables, "terms_of", _legacy_terms)
    monkeypatch.setattr(analysis, "document_title", lambda *a, **k: None)


@pytest.fixture
def old_db(tmp_path, pages, monkeypatch) -> Path:
    from kbcli.stores.sqlite import keyword

    path = tmp_path / "old.db"
    with monkeypatch.context() as m:
        patch_old_fields(m, keyword)
        store = SQLiteStore(path)
        ingest(store, pages)
        assert store.get_meta("analyzer").endswith(OLD_FIELDS)
        assert all("title" not in d.metadata for d in store.list_all())
        store.close()
    return path


def scores(store, query: str) -> dict[str, float]:
    hits = store.keyword_search(query, k=10)
    return {Path(h.document.metadata["source"]).name: h.score for h in hits}


def check_upgraded(store, fresh) -> None:
    """``store`` (an upgraded old index) scores as ``fresh`` (the same files ingested now)."""
    assert store.get_meta("analyzer") == store.keyword_signature
    assert {d.metadata["source"]: d.metadata.get("title") for d in store.list_all()} == {
        d.metadata["source"].replace("/fresh/", "/pages/"): d.metadata.get("title")
        for d in fresh.list_all()
    }
    for query in ("systemctl", "journalctl", "start at boot", "unit file"):
        assert scores(store, query) == pytest.approx(scores(fresh, query), abs=1e-9)
    assert store.integrity_check() == []


@pytest.fixture
def fresh(tmp_path, pages):
    folder = tmp_path / "fresh"
    folder.mkdir()
    for name, text in PAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    store = SQLiteStore(tmp_path / "fresh.db")
    ingest(store, folder)
    return store


def test_a_reader_re_tokenises_an_old_index_without_embedding(old_db, fresh):
    store = SQLiteStore(old_db)
    before = {d.id: d.embedding for d in store.iter_documents(with_embeddings=True)}
    stats = store.stats()
    embedder = CountingEmbedder()
    base = KnowledgeBase(store=store, embedder=embedder)
    assert names(base.search_with("systemctl", SearchOptions(k=3, mode="keyword")))[0] == (
        "systemctl.md"
    )
    assert embedder.embedded == []
    after = {d.id: d.embedding for d in store.iter_documents(with_embeddings=True)}
    assert after == before  # same chunks, same vectors
    assert (store.stats()["chunks"], store.stats()["sources"]) == (
        stats["chunks"],
        stats["sources"],
    )
    check_upgraded(store, fresh)


def test_a_write_re_tokenises_an_old_index_in_its_transaction(old_db, fresh, tmp_path):
    store = SQLiteStore(old_db)
    embedder = CountingEmbedder()
    base = KnowledgeBase(store=store, embedder=embedder)
    base.ingest_text("a new note about timers")
    assert embedder.embedded == ["a new note about timers"]  # only the new chunk
    assert store.get_meta("analyzer") == store.keyword_signature
    store.remove([d.id for d in store.list_all() if "source" not in d.metadata])
    check_upgraded(store, fresh)


def test_a_locked_reader_says_what_to_run_and_changes_nothing(old_db, fresh):
    writer = SQLiteStore(old_db)
    reader = SQLiteStore(old_db)
    with writer.writer_lock(0):
        with pytest.raises(IndexMismatchError, match="'kb doctor --repair'") as caught:
            reader.keyword_search("systemctl")
        assert "\n" not in str(caught.value)
        assert reader.get_meta("analyzer").endswith(OLD_FIELDS)
    assert names(reader.keyword_search("systemctl", k=1)) == ["systemctl.md"]
    check_upgraded(reader, fresh)


def test_doctor_reports_an_old_index_and_repair_re_tokenises_it(old_db, fresh):
    store = SQLiteStore(old_db)
    found = {f.check: f for f in store.doctor()}
    assert not found["keyword-index"].ok
    assert "built with" in found["keyword-index"].detail
    repaired = {f.check: f for f in store.doctor(repair=True)}
    assert repaired["keyword-index"].ok
    assert all(f.ok for f in store.doctor())
    check_upgraded(store, fresh)


@pytest.mark.slow
def test_kb_script_on_an_old_index(kb_exe, old_db, monkeypatch):  # noqa: F811
    monkeypatch.setenv("KB_DB", str(old_db))
    doctor = kb(kb_exe, "doctor")
    assert doctor.returncode == 1 and "built with" in doctor.stdout + doctor.stderr
    out = kb(kb_exe, "search", "systemctl", "--mode", "keyword", "-k", "1", "--json")
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)[0]["metadata"]["source"]).name == "systemctl.md"
    assert kb(kb_exe, "doctor").returncode == 0


def test_postgres_old_index_is_re_tokenised(pg_dsn, pg_table, pages, monkeypatch, tmp_path):
    from kbcli.stores.postgres import PostgresStore
    from kbcli.stores.postgres import keyword as pg_keyword

    with monkeypatch.context() as m:
        patch_old_fields(m, pg_keyword)
        old = PostgresStore(pg_dsn, pg_table)
        ingest(old, pages)
        assert old.get_meta("analyzer").endswith(OLD_FIELDS)
        old.close()
    store = PostgresStore(pg_dsn, pg_table)
    try:
        found = {f.check: f for f in store.doctor()}
        assert not found["keyword-index"].ok and "built with" in found["keyword-index"].detail
        assert names(store.keyword_search("systemctl", k=1)) == ["systemctl.md"]
        assert store.get_meta("analyzer") == store.keyword_signature
        titles = {Path(d.metadata["source"]).name: d.metadata["title"] for d in store.list_all()}
        assert titles["journalctl.txt"] == "journalctl" and titles["systemctl.md"] == "systemctl"
        fresh = SQLiteStore(tmp_path / "fresh.db")
        ingest(fresh, pages)
        for query in ("systemctl", "journalctl", "start at boot"):
            assert scores(store, query) == pytest.approx(scores(fresh, query), abs=1e-9)
        assert all(f.ok for f in store.doctor())
    finally:
        store.close()


def test_chroma_copies_the_titles_an_upgrade_adds(tmp_path, pages, monkeypatch):
    """Chroma holds a copy of each chunk's metadata for its ``where`` filters: when the
    keyword upgrade of an old index adds titles in place, the copy is rebuilt, so a dense
    search filtered by title finds the page (it found nothing while the copy lacked titles)."""
    need("chromadb")
    from kbcli.stores.chroma.store import ChromaStore
    from kbcli.stores.sqlite import keyword

    with monkeypatch.context() as m:
        patch_old_fields(m, keyword)
        old = ChromaStore(tmp_path / "chroma")
        base = ingest(old, pages)
        query = base.embedder.embed_query("systemctl")
        assert old.search(query, k=5, filter={"title": "systemctl"}) == []  # no titles yet
        old.close()
    store = ChromaStore(tmp_path / "chroma")
    try:
        rebuilds = store._matrix.rebuilds  # the collection object
        assert names(store.keyword_search("systemctl", k=1)) == ["systemctl.md"]  # upgrades
        assert store.get_meta("analyzer") == store.keyword_signature
        hits = store.search(query, k=5, filter={"title": "systemctl"})
        assert names(hits) == ["systemctl.md"]
        assert store._matrix.rebuilds == rebuilds + 1
        assert store.doctor() and all(f.ok for f in store.doctor())
        store.search(query, k=5, filter={"title": "systemctl"})
        assert store._matrix.rebuilds == rebuilds + 1  # once
    finally:
        store.close()
