"""Incremental sync: unchanged files skipped, changed ones replaced, vanished ones pruned."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import kbcli.ingest.sync as sync_module
from counting_embedder import CountingEmbedder
from kbcli import DatabaseLockedError, IndexMismatchError, InvalidOptionError, KnowledgeBase
from kbcli.ingest.report import SyncReport
from kbcli.ingest.sync import discover, parse_extensions, sync
from kbcli.system.locking import lock_file


def make_tree(root: Path, n: int = 5) -> list[Path]:
    files = []
    for i in range(n):
        sub = root / ("sub" if i % 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        f = sub / f"doc{i}.md"
        f.write_text(
            f"# Doc {i}\n\nParagraph one of document {i} about topic{i}.\n\nMore text {i}.\n"
        )
        files.append(f)
    return files


def open_kb(tmp_path: Path, embedder=None) -> KnowledgeBase:
    return KnowledgeBase.open(tmp_path / "kb.db", embedder=embedder or CountingEmbedder())


def chunks_by_source(kb: KnowledgeBase) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for doc in kb.store.list_all():
        out.setdefault(doc.metadata["source"], []).append(doc.text)
    return out


def test_first_run_then_nothing_changed(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    files = make_tree(docs)
    kb = open_kb(tmp_path)
    first = sync(kb, [docs])
    assert (first.added, first.updated, first.unchanged, first.failed) == (5, 0, 0, [])
    assert first.chunks_added == kb.store.count() > 0
    assert set(chunks_by_source(kb)) == {str(f.resolve()) for f in files}

    hashed = []
    monkeypatch.setattr(sync_module, "read_content", lambda p, *a, **k: hashed.append(p) or "x")
    embedded_before = kb.embedder.embedded
    again = sync(kb, [docs])
    assert (again.added, again.updated, again.unchanged, again.chunks_added) == (0, 0, 5, 0)
    assert hashed == [] and kb.embedder.embedded == embedded_before
    assert again.to_dict()["unchanged"] == 5 and isinstance(again.to_dict()["seconds"], float)


def test_touched_identical_file_is_hashed_and_skipped(tmp_path):
    docs = tmp_path / "docs"
    files = make_tree(docs, 2)
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    report = sync(kb, [docs])
    assert (report.unchanged, report.updated, report.chunks_added) == (2, 0, 0)
    record = kb.store.file_records()[str(files[0].resolve())]
    assert record.mtime_ns == files[0].stat().st_mtime_ns


def test_changed_file_replaced_and_only_new_text_embedded(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    f = docs / "guide.md"
    paragraphs = [f"Section {i} explains step {i} in plenty of words." for i in range(6)]
    f.write_text("\n\n".join(paragraphs))
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    kb.ingestor._chunker = _paragraph_chunker()
    sync(kb, [docs])
    before = kb.embedder.embedded
    assert before == 6
    paragraphs[2] = "Section 2 now says something entirely different."
    f.write_text("\n\n".join(paragraphs))
    report = sync(kb, [docs])
    assert (report.updated, report.chunks_added, report.chunks_removed) == (1, 6, 6)
    assert kb.embedder.embedded - before == 1  # only the changed chunk
    texts = chunks_by_source(kb)[str(f.resolve())]
    assert any("now says something entirely different" in t for t in texts)
    assert not any("explains step 2" in t for t in texts)
    assert kb.store.count() == 6 and kb.store.integrity_check() == []


def _paragraph_chunker():
    class ParagraphChunker:
        chunk_size, chunk_overlap = 1000, 0

        def chunk(self, text):  # text arrives whitespace-normalised: split on sentences
            return [p for p in text.split(". ") if p.strip()]

    return ParagraphChunker()


def test_moved_file_reembeds_nothing_and_the_old_path_leaves_by_default(tmp_path):
    docs = tmp_path / "docs"
    files = make_tree(docs, 3)
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    embedded = kb.embedder.embedded
    moved = docs / "renamed.md"
    files[0].rename(moved)
    report = sync(kb, [docs], prune=False)  # --no-prune: the vanished path stays
    assert (report.added, report.stale, report.missing, report.removed) == (1, 1, 1, 0)
    assert kb.embedder.embedded == embedded
    assert str(files[0].resolve()) in chunks_by_source(kb)
    pruned = sync(kb, [docs])  # the default follows the deletion
    assert (pruned.removed, pruned.stale, pruned.missing, pruned.unchanged) == (1, 0, 0, 3)
    assert pruned.chunks_removed > 0
    sources = chunks_by_source(kb)
    assert str(files[0].resolve()) not in sources and str(moved.resolve()) in sources
    assert str(files[0].resolve()) not in kb.store.file_records()


def test_prune_files_that_no_longer_match_ext_and_only_under_roots(tmp_path):
    docs, other = tmp_path / "docs", tmp_path / "other"
    make_tree(docs, 2)
    (docs / "notes.txt").write_text("plain text notes")
    make_tree(other, 1)
    kb = open_kb(tmp_path)
    sync(kb, [docs, other])
    report = sync(kb, [docs], extensions=".md", prune=True)
    assert report.removed == 1  # notes.txt; nothing under other/ is touched
    assert any("other" in s for s in chunks_by_source(kb))
    assert not any(s.endswith("notes.txt") for s in chunks_by_source(kb))


def test_failed_file_keeps_its_previous_version(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    good = docs / "a.md"
    good.write_text("alpha content that is fine")
    bad = docs / "b.md"
    bad.write_text("beta original content")
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    bad.write_bytes(b"\xff\xfe\x00\xd8" + os.urandom(4000))  # not decodable text any more
    report = sync(kb, [docs])
    assert len(report.failed) == 1 and report.failed[0].path == str(bad.resolve())
    assert str(bad.resolve()) in report.failed[0].error
    assert "\n" not in report.failed[0].error
    assert any("beta original" in t for t in chunks_by_source(kb)[str(bad.resolve())])


def test_chunk_settings_change_rebuilds_affected_files(tmp_path):
    docs = tmp_path / "docs"
    make_tree(docs, 2)
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    from kbcli.ingest import make_chunker

    kb2 = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    kb2.ingestor._chunker = make_chunker("simple", 20, 5)
    report = sync(kb2, [docs])
    assert report.updated == 2 and report.unchanged == 0
    assert all(len(d.text) <= 20 for d in kb2.store.list_all())


def test_embedder_change_needs_rebuild_and_rebuild_reembeds(tmp_path):
    docs = tmp_path / "docs"
    make_tree(docs, 3)
    sync(open_kb(tmp_path), [docs])
    kb = open_kb(tmp_path, CountingEmbedder(dim=32))
    with pytest.raises(IndexMismatchError, match="--rebuild"):
        sync(kb, [docs])
    with pytest.raises(IndexMismatchError):
        kb.search("topic1", mode="semantic")
    report = sync(kb, [docs], rebuild=True)
    assert report.rebuilt > 0 and report.updated == 3
    assert kb.store.embedder_info.dimension == 32
    assert kb.search("topic1", mode="semantic", k=1)
    assert kb.store.integrity_check() == []


def test_rebuild_resumes_after_interruption(tmp_path):
    docs = tmp_path / "docs"
    make_tree(docs, 4)
    sync(open_kb(tmp_path), [docs])
    kb = open_kb(tmp_path, CountingEmbedder(dim=16))
    calls = {"n": 0}

    def flaky(texts):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return kb.ingestor.embed(texts)

    with pytest.raises(KeyboardInterrupt):
        kb.store.reembed(flaky, kb.embedder.info, batch_size=2)
    assert kb.store.embedder_info.dimension == 64  # still the old index, not a mix
    done_first = kb.embedder.embedded
    total = kb.store.count()
    kb.store.reembed(kb.ingestor.embed, kb.embedder.info, batch_size=2)
    assert kb.embedder.embedded - done_first == total - 2
    assert kb.store.embedder_info.dimension == 16


def test_ignore_rules_hidden_and_symlink_loops(tmp_path):
    docs = tmp_path / "docs"
    make_tree(docs, 1)
    for folder in (".git", "node_modules", ".hidden", "build"):
        (docs / folder).mkdir()
        (docs / folder / "x.md").write_text("ignored")
    (docs / "drafts").mkdir()
    (docs / "drafts" / "wip.md").write_text("draft")
    (docs / "keep.md").write_text("kept")
    (docs / "secret.md").write_text("secret")
    (docs / ".kbignore").write_text("build/\nsecret.md\n# comment\n")
    (docs / "drafts" / ".kbignore").write_text("wip.md\n")
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    names = {p.relative_to(docs.resolve()).as_posix() for p in discover([docs], (".md",)).files}
    assert names == {"doc0.md", "keep.md"}
    with_hidden = discover([docs], (".md",), include_hidden=True).files
    assert {p.name for p in with_hidden} >= {"x.md"}
    flat = discover([docs], (".md",), recursive=False).files
    assert {p.name for p in flat} == {"doc0.md", "keep.md"}


def test_extension_parsing_and_missing_paths(tmp_path):
    assert parse_extensions(".md,PDF, txt,.md") == (".md", ".pdf", ".txt")
    with pytest.raises(InvalidOptionError):
        parse_extensions(" , ")
    with pytest.raises(InvalidOptionError, match="not found"):
        discover([tmp_path / "nope"], (".md",))
    f = tmp_path / "x.csv"
    f.write_text("a,b")
    d = discover([f], (".md",))
    assert d.files == [] and d.skipped == 1 and "not in --ext" in d.warnings[0]


def test_second_ingest_waits_then_fails_with_lock_error(tmp_path):
    docs = tmp_path / "docs"
    make_tree(docs, 1)
    kb = open_kb(tmp_path)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with lock_file(Path(f"{kb.store.path}.ingest-lock"), 1, str(kb.store.path)):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(5)
    started = time.monotonic()
    with pytest.raises(DatabaseLockedError, match="waited 0.3 s") as failed:
        sync(kb, [docs], wait=0.3)
    assert 0.25 <= time.monotonic() - started < 5
    assert kb.store.count() == 0
    kept = failed.value.report  # the sync found the file, wrote nothing
    assert kept is not None and (kept.added, kept.chunks_added) == (0, 0)
    assert kept.seconds >= 0.25
    release.set()
    t.join()
    assert sync(kb, [docs], wait=0.3).added == 1


def test_reader_never_sees_both_versions(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    f = docs / "v.md"
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    kb.ingestor._chunker = _paragraph_chunker()
    f.write_text("\n\n".join(f"version0 part{i}." for i in range(8)))
    sync(kb, [docs])
    reader = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    seen_bad: list[set[str]] = []
    stop = threading.Event()

    def read():
        while not stop.is_set():
            versions = {d.text.split()[0] for d in reader.store.list_all()}
            if len(versions) != 1:
                seen_bad.append(versions)

    t = threading.Thread(target=read)
    t.start()
    for v in range(1, 15):
        f.write_text("\n\n".join(f"version{v} part{i}." for i in range(8)))
        sync(kb, [docs])
    stop.set()
    t.join()
    assert seen_bad == []


def test_embedding_batches_cross_file_boundaries(tmp_path):
    """31 files of about 10 chunks: ceil(chunks / batch) requests, each file still whole."""

    class BatchCounter(CountingEmbedder):
        def __init__(self):
            super().__init__()
            self.batch_size = 64
            self.calls = 0

        def _embed_batch(self, texts):
            self.calls += 1
            return super()._embed_batch(texts)

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(31):
        paragraphs = [f"File {i} paragraph {j} " + "words " * 60 for j in range(10)]
        (docs / f"f{i}.md").write_text("\n\n".join(paragraphs))
    embedder = BatchCounter()
    kb = open_kb(tmp_path, embedder)
    report = sync(kb, [docs])
    chunks = kb.store.count()
    assert report.added == 31 and report.chunks_added == chunks > 64 * 3
    import math

    assert embedder.calls == math.ceil(chunks / 64)
    by_source = chunks_by_source(kb)
    assert len(by_source) == 31 and all(len(v) >= 10 for v in by_source.values())
    # Nothing changed: no request at all; one file changed: one request.
    sync(kb, [docs])
    assert embedder.calls == math.ceil(chunks / 64)
    (docs / "f3.md").write_text("A new text for file three.")
    sync(kb, [docs])
    assert embedder.calls == math.ceil(chunks / 64) + 1


def test_an_ingest_that_changed_the_index_writes_the_keyword_pack(tmp_path):
    """The first search after an ingest finds the keyword pack written (it would otherwise
    build it: 19 s at 1M chunks); a run that changed nothing leaves the pack alone."""
    docs = tmp_path / "docs"
    make_tree(docs)
    pack = Path(f"{tmp_path / 'kb.db'}.keyword-pack")
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    assert pack.is_file()
    written = pack.stat().st_mtime_ns
    kb.close()
    kb = open_kb(tmp_path)
    assert sync(kb, [docs]).chunks_added == 0
    assert pack.stat().st_mtime_ns == written
    hits = kb.store.keyword_search("topic3", k=1)
    assert hits[0].document.metadata["source"].endswith("doc3.md")
    assert pack.stat().st_mtime_ns == written  # the search used the pack the ingest wrote


def test_meta_title_relabels_both_ways_without_reembedding(tmp_path):
    """--meta title=X on a re-ingest names the page X (keyword search finds it by X); a later
    --meta without a title gives back the title from its first heading, not none."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Setup guide\n\nInstall the planter and water it weekly.\n")
    embedder = CountingEmbedder()
    kb = open_kb(tmp_path, embedder)
    sync(kb, [docs])
    embedded = embedder.embedded

    def titles() -> set:
        return {d.metadata.get("title") for d in kb.store.list_all()}

    assert titles() == {"Setup guide"}
    report = sync(kb, [docs], metadata={"title": "Zucchini handbook"})
    assert report.metadata_updated == 1 and titles() == {"Zucchini handbook"}
    hits = kb.store.keyword_search("zucchini", k=1)
    assert hits and hits[0].document.metadata["source"].endswith("guide.md")
    assert sync(kb, [docs]).metadata_updated == 0  # no --meta: the file keeps what it has
    report = sync(kb, [docs], metadata={"team": "garden"})
    assert report.metadata_updated == 1 and titles() == {"Setup guide"}
    assert kb.store.keyword_search("zucchini", k=1) == []
    assert embedder.embedded == embedded  # relabelled, never re-embedded


def test_sigterm_in_a_sync_is_an_interrupt_that_keeps_what_was_prepared(tmp_path, monkeypatch):
    import signal

    from kbcli.ingest.sync import SyncInterrupted
    from kbcli.system.signals import Terminated

    docs = tmp_path / "docs"
    make_tree(docs, 5)
    kb = open_kb(tmp_path)
    real = sync_module._sync_file
    seen = []

    def terminated_at_the_fourth(kb, path, *args):
        seen.append(path)
        if len(seen) == 4:
            raise Terminated(signal.SIGTERM)
        return real(kb, path, *args)

    monkeypatch.setattr(sync_module, "_sync_file", terminated_at_the_fourth)
    with pytest.raises(SyncInterrupted) as stop:
        sync(kb, [docs])
    assert stop.value.signum == signal.SIGTERM
    report = stop.value.report
    assert (report.interrupted, report.signal, report.added) == (True, "SIGTERM", 3)
    assert len(kb.store.file_records()) == 3


def test_an_interrupt_just_after_commit_stays_an_interrupt(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM between COMMIT and the end of the transaction block: the write is
    kept and the interrupt goes on (a ROLLBACK there raised "no transaction is active")."""
    from kbcli.stores.sqlite import connection

    kb = open_kb(tmp_path)

    def interrupt(name):
        if name == "after-commit":
            raise KeyboardInterrupt

    monkeypatch.setattr(connection, "crash_point", interrupt)
    with pytest.raises(KeyboardInterrupt):
        kb.store.set_meta("probe", "kept")
    monkeypatch.undo()
    assert kb.store.get_meta("probe") == "kept"
    kb.store.set_meta("probe", "again")  # the connection is usable: no transaction left open


def test_an_error_that_stops_a_sync_carries_what_the_index_kept(tmp_path, monkeypatch):
    """A sync stopped after some files were written: the error keeps its class and exit code,
    and its typed ``report`` counts the files the index holds (the library's view of what
    ``kb ingest --json`` prints with the error)."""
    docs = tmp_path / "docs"
    make_tree(docs, 4)
    kb = open_kb(tmp_path)
    calls = []

    def write_then_fail(*args, **kwargs):
        calls.append(1)
        raise DatabaseLockedError("the vector fill could not write: locked")

    monkeypatch.setattr(sync_module, "fill_vectors", write_then_fail)
    with pytest.raises(DatabaseLockedError) as failed:
        sync(kb, [docs])
    error = failed.value
    assert calls and error.exit_code == 3 and str(error).endswith("locked")
    assert isinstance(error.report, SyncReport)
    assert error.report.added == 4 == len(kb.store.file_records())
    assert error.report.chunks_added == kb.store.count() > 0
    assert error.report.to_dict()["added"] == 4


def test_an_error_raised_before_the_sync_reads_anything_carries_an_empty_report(tmp_path):
    kb = open_kb(tmp_path)
    with pytest.raises(InvalidOptionError) as failed:
        sync(kb, [tmp_path], extensions="")
    kept = failed.value.report
    assert kept is not None and kept.to_dict() == {**SyncReport().to_dict(), "seconds": 0.0}
