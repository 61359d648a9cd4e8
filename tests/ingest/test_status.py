"""``kb status``'s logic (kbcli.ingest.status): the roots a sync records, and what a walk of
them finds new, changed, touched or gone, on real files and a real SQLite index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kbcli.ingest.status as status_module
from counting_embedder import CountingEmbedder
from kbcli import InvalidOptionError, KnowledgeBase
from kbcli.ingest.discovery import Discovery
from kbcli.ingest.status import (
    MAX_ROOTS,
    OTHER,
    ROOTS_KEY,
    Root,
    compare,
    index_status,
    record_roots,
    recorded_roots,
)
from kbcli.ingest.sync import sync
from kbcli.ingest.watch_marker import marker_path, watch_running, watching


def tree(root: Path, n: int = 4) -> list[Path]:
    files = []
    for i in range(n):
        folder = root / ("sub" if i % 2 else "")
        folder.mkdir(parents=True, exist_ok=True)
        f = folder / f"doc{i}.md"
        f.write_text(f"# Doc {i}\n\nText of document {i} about topic{i}.\n")
        files.append(f)
    return files


@pytest.fixture
def kb(tmp_path):
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    yield kb
    kb.close()


def bump_mtime(path: Path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_a_sync_records_its_roots_with_its_rules(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs)
    single = tmp_path / "one.txt"
    single.write_text("a single file\n")
    sync(kb, [docs, single], extensions=".md,.txt", include_hidden=True)
    roots = {r.path: r for r in recorded_roots(kb.store)}
    assert set(roots) == {str(docs.resolve()), str(single.resolve())}
    folder = roots[str(docs.resolve())]
    assert folder.extensions == (".md", ".txt") and folder.include_hidden and not folder.is_file
    assert folder.synced_at == kb.store.get_meta("last_ingest")
    assert roots[str(single.resolve())].is_file


def test_a_file_root_of_an_unpicked_extension_is_never_new(tmp_path, kb):
    script = tmp_path / "tool.py"
    script.write_text("print('kb ingest skips this extension')\n")
    note = tmp_path / "note.md"
    note.write_text("# a note\n")
    sync(kb, [script, note])
    assert {r.path for r in recorded_roots(kb.store)} == {
        str(script.resolve()),
        str(note.resolve()),
    }
    status = index_status(kb.store)
    assert not status.behind and status.totals()["indexed"] == 1, status.as_json()


def test_a_root_inside_another_is_counted_once(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs, 4)
    sync(kb, [docs])
    sync(kb, [docs / "sub"])
    assert len(recorded_roots(kb.store)) == 2
    (docs / "sub" / "new.md").write_text("# new\n")
    status = index_status(kb.store)
    assert [r.path for r in status.roots] == [str(docs.resolve())]
    assert (status.totals()["indexed"], status.totals()["new"]) == (4, 1)
    [inner] = index_status(kb.store, [docs / "sub"]).roots  # named: walked alone
    assert (inner.indexed, inner.new) == (2, 1)


def test_a_watch_batch_records_no_root(tmp_path, kb):
    docs = tmp_path / "docs"
    files = tree(docs)
    sync(kb, [docs], only=[files[0].resolve()])
    assert recorded_roots(kb.store) == []


def test_roots_are_bounded_oldest_forgotten(tmp_path, kb, monkeypatch):
    assert MAX_ROOTS == 1000
    monkeypatch.setattr(status_module, "MAX_ROOTS", 5)
    rules = Root("")
    for i in range(5 + 3):
        found = Discovery([], [(tmp_path / f"r{i}", True)], [])
        record_roots(kb.store, found, rules, f"t{i}")
    roots = recorded_roots(kb.store)
    assert len(roots) == 5
    assert roots[0].path == str(tmp_path / "r3") and roots[-1].synced_at == "t7"
    record_roots(kb.store, Discovery([], [(tmp_path / "r4", True)], []), rules, "t8")
    assert [r.path for r in recorded_roots(kb.store)][-1] == str(tmp_path / "r4")


def test_an_unreadable_roots_record_reads_as_none(kb):
    kb.store.set_meta(ROOTS_KEY, "{not json")
    assert recorded_roots(kb.store) == []
    kb.store.set_meta(ROOTS_KEY, json.dumps([{"path": 3}, "x", {"path": "/a", "extensions": 5}]))
    assert recorded_roots(kb.store) == []


def test_edits_behind_the_index_are_counted_exactly(tmp_path, kb):
    docs = tmp_path / "docs"
    files = tree(docs, 6)
    sync(kb, [docs])
    current = index_status(kb.store)
    assert not current.behind
    assert current.totals() == {
        "indexed": 6, "new": 0, "changed": 0, "gone": 0, "touched": 0, "unreadable": 0
    }  # fmt: skip

    files[0].write_text(files[0].read_text() + "\nAn added line that grows the file.\n")
    same_size = files[1].read_text().replace("Text", "Txet")
    files[1].write_text(same_size)
    bump_mtime(files[1])  # same size, other bytes: told apart by the hash
    files[2].unlink()
    bump_mtime(files[3])  # touched: same bytes
    (docs / "new.md").write_text("# New\n\nA new note.\n")
    (docs / "sub" / "new2.txt").write_text("another new one\n")
    (docs / "skipped.py").write_text("print('not an extension kb ingest picks')\n")
    (docs / ".hidden.md").write_text("# hidden\n")
    (docs / ".kbignore").write_text("ignored.md\n")
    (docs / "ignored.md").write_text("# ignored\n")

    status = index_status(kb.store)
    assert status.behind
    [root] = status.roots
    assert (root.new, root.changed, root.gone, root.touched) == (2, 2, 1, 1)
    assert sorted(root.examples["new"]) == sorted(
        [str((docs / "new.md").resolve()), str((docs / "sub" / "new2.txt").resolve())]
    )
    assert root.examples["gone"] == [str(files[2].resolve())]
    assert "2 new, 2 changed, 1 gone" in status.summary()

    sync(kb, [docs])
    after = index_status(kb.store)
    assert not after.behind and after.totals()["indexed"] == 7, after.as_json()


def test_unchanged_files_are_never_read(tmp_path, kb, monkeypatch):
    docs = tmp_path / "docs"
    files = tree(docs, 5)
    sync(kb, [docs])
    reads = []
    monkeypatch.setattr(status_module, "read_content", lambda *a, **k: reads.append(a) or None)
    assert not index_status(kb.store).behind and reads == []
    files[0].write_text("different length entirely\n")
    assert index_status(kb.store).roots[0].changed == 1 and reads == []  # size told it


def test_a_file_over_the_hash_limit_counts_as_changed_unread(tmp_path, kb, monkeypatch):
    docs = tmp_path / "docs"
    files = tree(docs, 2)
    sync(kb, [docs])
    bump_mtime(files[0])
    monkeypatch.setattr(status_module, "read_content", lambda *a, **k: pytest.fail("read"))
    assert index_status(kb.store, max_bytes=4).roots[0].changed == 1


def test_a_path_argument_narrows_the_walk_with_the_roots_rules(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs, 4)
    sync(kb, [docs], extensions=".md,.txt")
    (docs / "sub" / "x.txt").write_text("new in sub\n")
    (docs / "top.txt").write_text("new at the top\n")
    status = index_status(kb.store, [docs / "sub"])
    [root] = status.roots
    assert root.path == str((docs / "sub").resolve())
    assert (root.new, root.indexed) == (1, 2)


def test_a_path_not_ingested_is_one_line(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs, 2)
    sync(kb, [docs])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(InvalidOptionError, match="elsewhere is not ingested"):
        index_status(kb.store, [elsewhere])


def test_files_outside_a_recorded_root_are_checked_for_changes(tmp_path, kb):
    docs = tmp_path / "docs"
    files = tree(docs, 3)
    for f in files:
        kb.ingest_file(f)  # no sync: no root recorded
    files[0].unlink()
    files[1].write_text("changed and longer than it was before, surely\n")
    (docs / "new.md").write_text("# not counted: no root says it belongs\n")
    [group] = index_status(kb.store).roots
    assert group.path == OTHER and not group.walked
    assert (group.new, group.changed, group.gone, group.indexed) == (0, 1, 1, 3)
    # named as a PATH: the same check under it
    [named] = index_status(kb.store, [docs]).roots
    assert (named.changed, named.gone) == (1, 1)


def test_a_root_folder_removed_counts_its_files_gone(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs, 3)
    sync(kb, [docs])
    for f in sorted(docs.rglob("*"), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    docs.rmdir()
    assert index_status(kb.store).roots[0].gone == 3


def test_vectors_pending_make_the_index_behind(tmp_path, kb):
    docs = tmp_path / "docs"
    tree(docs, 1)
    sync(kb, [docs])
    status = index_status(kb.store, vectors_pending=3)
    assert status.behind and "3 chunks without vectors" in status.summary()


def test_compare(tmp_path):
    from kbcli.ingest.files import read_content
    from kbcli.types import FileRecord

    f = tmp_path / "a.md"
    f.write_text("hello\n")
    st = os.stat(f)
    digest = read_content(f, None).sha256
    record = FileRecord(str(f), st.st_size, st.st_mtime_ns, digest, "", [], "")
    assert compare(f, record, None) is None
    bump_mtime(f)
    assert compare(f, record, None) == "touched"
    f.write_text("jello\n")
    assert compare(f, record, None) == "changed"
    assert compare(tmp_path / "gone.md", record, None) == "unreadable"


def test_the_watch_marker_is_seen_while_held_and_gone_after(tmp_path):
    db = tmp_path / "kb.db"
    db.touch()
    assert watch_running(db) == (False, None)
    with watching(db):
        assert watch_running(db) == (True, os.getpid())
        with watching(db):  # a second watch of the same index (other folders)
            pass
        assert watch_running(db)[0]  # the first still holds it
    assert watch_running(db) == (False, None) and not marker_path(db).exists()


def test_a_marker_left_by_a_killed_watch_reads_as_not_running(tmp_path):
    db = tmp_path / "kb.db"
    db.touch()
    code = (
        "import sys, time; from pathlib import Path; from kbcli.ingest.watch_marker import "
        "watching\nwith watching(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert watch_running(db) == (True, child.pid)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 5
    while watch_running(db)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker_path(db).exists()  # the file stays (killed), its pid is not trusted
    assert watch_running(db) == (False, None)


def test_the_same_status_on_postgres(tmp_path, pg_dsn, pg_table):
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, pg_table)
    kb = KnowledgeBase(store=store, embedder=CountingEmbedder())
    try:
        docs = tmp_path / "docs"
        files = tree(docs, 3)
        sync(kb, [docs])
        assert [r.path for r in recorded_roots(store)] == [str(docs.resolve())]
        assert not index_status(store).behind
        files[0].unlink()
        (docs / "new.md").write_text("# new\n")
        assert index_status(store).summary().startswith("Index behind: 1 new, 1 gone")
        assert status_module.database_file(store) is None  # a server's index: no marker file
    finally:
        kb.close()
