"""Freshness through ``kb mcp`` and the MCP SDK's own client (stdio): a hit's state beside its
source in knowledge_search's text, the file's state in knowledge_get's header, the watermark
once per reply (structured content), and the ``stale`` argument (hide, fail)."""

from __future__ import annotations

import pytest

from extras import need
from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.sync import sync
from kbcli.types import Document
from mcp_clients import _stdio_client

need("mcp")


@pytest.fixture
def served(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "alpha.md").write_text("# Alpha\n\nThe alpha reactor runs on heavy water.\n")
    (notes / "beta.md").write_text("# Beta\n\nThe beta reactor runs on molten salt.\n")
    (notes / "gamma.md").write_text("# Gamma\n\nThe gamma reactor runs on thorium.\n")
    (notes / "delta.md").write_text("# Delta\n\nThe delta reactor runs on sodium.\n")
    db = tmp_path / "kb.db"
    with KnowledgeBase.open(db, embedder=SimpleEmbedder()) as kb:
        sync(kb, [notes])
        # delta's chunks without their vectors (what a held vector fill leaves)
        docs = list(kb.store.iter_documents(source=str(notes / "delta.md")))
        kb.store.add([Document(d.id, d.text, d.metadata) for d in docs])
    home = tmp_path / "home"  # the conftest's isolated HOME
    client = _stdio_client(db, home)
    yield client, notes
    client.close()


def test_states_beside_the_source_and_the_watermark_once(served):
    client, notes = served
    (notes / "alpha.md").write_text("# Alpha\n\nThe alpha reactor was shut down for good.\n")
    (notes / "beta.md").unlink()
    text, is_error = client.call("knowledge_search", {"query": "reactor", "k": 10})
    assert not is_error
    by_file = {name: line for line in text.splitlines() for name in ("alpha", "beta", "gamma")
               if f"/{name}.md" in line}  # fmt: skip
    assert f"source: {notes / 'alpha.md'} (changed since indexed)" in by_file["alpha"]
    assert f"source: {notes / 'beta.md'} (file missing)" in by_file["beta"]
    assert "(source: " in by_file["gamma"] and "since indexed" not in by_file["gamma"]
    assert f"source: {notes / 'delta.md'} (vector pending)" in text, text
    result = client.run(client.client.call_tool("knowledge_search", {"query": "reactor"}))
    index = result.structured_content["index"]
    assert set(index) == {"changed_at", "syncing", "vectors_pending"}
    assert index["vectors_pending"] == 1 and index["syncing"] is False
    assert len(result.content) == 1  # the text once; the watermark beside it, once


def test_stale_fail_and_hide(served):
    client, notes = served
    (notes / "beta.md").unlink()
    text, is_error = client.call("knowledge_search", {"query": "beta reactor", "stale": "fail"})
    assert is_error and "The index is behind" in text and "beta.md (missing)" in text
    text, is_error = client.call(
        "knowledge_search", {"query": "beta reactor", "k": 3, "stale": "hide"}
    )
    assert not is_error and "beta.md" not in text and text.count("\n") == 2
    text, is_error = client.call("knowledge_search", {"query": "x", "stale": "never"})
    assert is_error and "stale must be one of hide, flag, fail" in text


def test_get_says_the_file_changed(served):
    client, notes = served
    path = notes / "gamma.md"
    text, is_error = client.call("knowledge_get", {"path": str(path)})
    assert not is_error and "since indexed" not in text.split("\n")[0]
    path.write_text("# Gamma\n\nRewritten after it was indexed, longer now.\n")
    text, is_error = client.call("knowledge_get", {"path": str(path)})
    assert not is_error
    assert text.split("\n")[0].endswith("; changed since indexed]")
    result = client.run(client.client.call_tool("knowledge_get", {"path": str(path)}))
    assert result.structured_content["index"]["syncing"] is False
