"""Per-hit freshness and the index watermark (kbcli.search.freshness) on real files and a
real SQLite index: edit -> changed, delete -> missing, touch -> current, kb add text ->
not_a_file, chunks without a vector -> vectors_pending, and --stale hide/fail."""

from __future__ import annotations

import os
import threading

import pytest

from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.errors import IndexBehindError, InvalidOptionError
from kbcli.ingest.sync import sync
from kbcli.search.freshness import (
    FRESHNESS_STATES,
    apply_stale,
    check_hits,
    index_watermark,
    stale_policy,
)
from kbcli.types import Freshness, SearchResult, Watermark


@pytest.fixture
def folder(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "alpha.md").write_text("# Alpha\n\nThe alpha reactor runs on heavy water.\n")
    (notes / "beta.md").write_text("# Beta\n\nThe beta reactor runs on molten salt.\n")
    return notes


@pytest.fixture
def kb(tmp_path, folder):
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    sync(kb, [folder])
    yield kb
    kb.close()


def states(kb: KnowledgeBase, query: str = "reactor", **options) -> dict[str, str]:
    """source name -> state of each hit of ``query``."""
    results = kb.search(query, k=10, **options)
    return {
        os.path.basename(str(r.document.metadata.get("source", r.document.id))): (
            r.freshness.state if r.freshness else "none"
        )
        for r in results
    }


def test_the_types_say_what_the_design_says():
    assert FRESHNESS_STATES == ("current", "changed", "missing", "vectors_pending", "not_a_file")
    assert Freshness("changed", "2026-01-01T00:00:00+00:00").as_json() == {
        "state": "changed",
        "indexed_at": "2026-01-01T00:00:00+00:00",
    }
    assert Watermark("2026-01-01T00:00:00+00:00", True, 3).as_json() == {
        "changed_at": "2026-01-01T00:00:00+00:00",
        "syncing": True,
        "vectors_pending": 3,
    }
    assert IndexBehindError("x").exit_code == 6


def test_files_just_indexed_are_current_with_their_indexed_at(kb):
    results = kb.search("reactor", k=10)
    assert {r.freshness.state for r in results} == {"current"}
    record = kb.store.file_records()[str(results[0].document.metadata["source"])]
    assert results[0].freshness.indexed_at == record.indexed_at


def test_an_edit_after_indexing_is_changed(kb, folder):
    (folder / "alpha.md").write_text("# Alpha\n\nThe alpha reactor was shut down for good.\n")
    assert states(kb) == {"alpha.md": "changed", "beta.md": "current"}


def test_an_edit_of_the_same_size_is_changed_by_its_hash(kb, folder):
    path = folder / "alpha.md"
    text = path.read_text()
    path.write_text(text.replace("heavy", "HEAVY"))
    assert states(kb)["alpha.md"] == "changed"


def test_a_deleted_file_is_missing(kb, folder):
    (folder / "beta.md").unlink()
    assert states(kb) == {"alpha.md": "current", "beta.md": "missing"}


def test_an_unreadable_file_is_missing(kb, folder):
    path = folder / "beta.md"
    path.unlink()
    path.mkdir()  # same name, not a regular file
    assert states(kb)["beta.md"] == "missing"


def test_a_touch_without_change_stays_current(kb, folder):
    path = folder / "alpha.md"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert states(kb)["alpha.md"] == "current"


def test_text_added_with_kb_add_is_not_a_file(kb):
    kb.add("A reactor log kept only in the index.", {"source": "log"})
    results = kb.search("reactor log kept only", k=10)
    added = [r for r in results if r.document.metadata.get("source") == "log"]
    assert added and added[0].freshness.state == "not_a_file"
    assert added[0].freshness.indexed_at  # when it was added


def test_a_chunk_without_its_vector_is_vectors_pending_then_current(kb, folder):
    store = kb.store
    source = str(folder / "alpha.md")
    docs = list(store.iter_documents(source=source, with_embeddings=True))
    kept = {d.id: d.embedding for d in docs}
    # what a held vector fill leaves: the rows, no vectors
    store.add([d.__class__(d.id, d.text, d.metadata) for d in docs])
    assert states(kb, mode="keyword")["alpha.md"] == "vectors_pending"
    assert index_watermark(kb).vectors_pending == len(docs)
    store.set_vectors(kept)
    assert states(kb, mode="keyword")["alpha.md"] == "current"
    assert index_watermark(kb).vectors_pending == 0


def test_a_store_without_a_ledger_leaves_freshness_unknown():
    from kbcli.types import Document

    class Plain:  # a reference store: no ledger, no catalog
        def search(self, *args, **kwargs):
            return []

    result = SearchResult(Document("x", "text", {"source": "/nowhere.md"}), 1.0)
    check_hits(Plain(), [result])
    assert result.freshness is None


def test_stale_policies(kb, folder):
    (folder / "alpha.md").unlink()
    results = list(kb.search("reactor", k=10))
    assert apply_stale(results, "flag") == results
    hidden = apply_stale(results, "hide")
    assert [r.freshness.state for r in hidden] == ["current"]
    with pytest.raises(IndexBehindError, match=r"alpha\.md \(missing\).*kb ingest"):
        apply_stale(results, "fail")
    assert stale_policy(None) == "flag"
    with pytest.raises(InvalidOptionError, match="hide, flag, fail"):
        stale_policy("ignore")


def test_the_watermark_after_writes_and_during_an_ingest(kb, folder):
    mark = index_watermark(kb)
    assert mark.changed_at is not None and mark.syncing is False and mark.vectors_pending == 0
    kb.store.set_meta("changed_at", "2000-01-01T00:00:00+00:00")
    (folder / "gamma.md").write_text("Gamma reactor.\n")
    sync(kb, [folder])
    assert index_watermark(kb).changed_at > "2000-01-01T00:00:00+00:00"
    held, release = threading.Event(), threading.Event()

    def ingest() -> None:
        with kb.store.writer_lock(1.0):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=ingest)
    thread.start()
    try:
        assert held.wait(10)
        assert index_watermark(kb).syncing is True
        assert index_watermark(kb.scoped({"source": {"$ne": "x"}})).syncing is True
    finally:
        release.set()
        thread.join()
    assert index_watermark(kb).syncing is False


def test_hide_fills_up_from_further_hits(kb, folder):
    (folder / "gamma.md").write_text("# Gamma\n\nThe gamma reactor runs on thorium.\n")
    sync(kb, [folder])
    first = kb.search("reactor", k=1, mode="keyword")[0]
    source = first.document.metadata["source"]
    os.unlink(source)
    assert kb.search("reactor", k=1, mode="keyword")[0].freshness.state == "missing"
    hidden = kb.search("reactor", k=2, mode="keyword", stale="hide")
    assert len(hidden) == 2
    assert {r.freshness.state for r in hidden} == {"current"}
    assert source not in {r.document.metadata["source"] for r in hidden}
    with pytest.raises(IndexBehindError):
        kb.search("reactor", k=1, mode="keyword", stale="fail")
    with pytest.raises(InvalidOptionError, match="hide, flag, fail"):
        kb.search("reactor", stale="later")


def test_a_scope_and_the_search_box_path_say_the_same(kb, folder):
    from kbcli.search.query import search as search_box
    from kbcli.types import SearchOptions

    (folder / "alpha.md").write_text("# Alpha\n\nThe alpha reactor is gone now, long text.\n")
    scoped = kb.scoped({"source": {"$ne": "x"}}).search("reactor", k=10)
    assert {os.path.basename(r.document.metadata["source"]): r.freshness.state for r in scoped} == {
        "alpha.md": "changed",
        "beta.md": "current",
    }
    hits = search_box(kb, "reactor", SearchOptions(k=10))
    assert {os.path.basename(h.source): h.result.freshness.state for h in hits} == {
        "alpha.md": "changed",
        "beta.md": "current",
    }
    unchecked = search_box(kb, "reactor", SearchOptions(k=10), fresh=False)
    assert all(h.result.freshness is None for h in unchecked)


def test_kb_get_says_the_state(kb, folder):
    from kbcli.agent.get import read_chunk, read_file

    path = folder / "beta.md"
    assert read_file(kb, str(path)).to_dict()["freshness"]["state"] == "current"
    chunk = next(kb.store.iter_documents(source=str(path)))
    path.write_text("# Beta\n\nEdited behind the index's back, and longer.\n")
    shown = read_chunk(kb, chunk.id)
    assert shown.to_dict()["freshness"]["state"] == "changed"
    assert any("changed since this chunk was indexed" in note for note in shown.notes)
    assert read_file(kb, str(path)).freshness.state == "changed"


def test_a_view_of_the_knowledge_base_says_how_fresh_its_hits_are(tmp_path):
    """KnowledgeView.search (what kb.scoped() and the readers return) checks its hits as
    KnowledgeBase.search does."""
    from kbcli import KnowledgeBase
    from kbcli.ingest.sync import sync
    from kbcli.views import KnowledgeView

    docs = tmp_path / "docs"
    (docs / "a").mkdir(parents=True)
    (docs / "a" / "one.md").write_text("# One\n\nzebra crossing rules\n")
    kb = KnowledgeBase.open(tmp_path / "kb.db")
    try:
        sync(kb, [docs])
        view = KnowledgeView(kb, {"source": {"$prefix": str(docs / "a")}})
        [hit] = view.search("zebra", mode="keyword", k=3)
        assert hit.freshness is not None and hit.freshness.state == "current"
        (docs / "a" / "one.md").write_text("# One\n\nrewritten, longer than before\n")
        [hit] = view.search("zebra", mode="keyword", k=3)
        assert hit.freshness is not None and hit.freshness.state == "changed"
        assert view.search("zebra", mode="keyword", k=3, stale="hide") == []
    finally:
        kb.close()
