"""``knowledge_status`` in process on a real SQLite index: the whole index (roots, counts, a
watch) and a scope, which sees only its own files' counts and never another's paths."""

from __future__ import annotations

from counting_embedder import CountingEmbedder
from kbcli import KnowledgeBase
from kbcli.agent.tools.status import KnowledgeStatusTool
from kbcli.ingest.sync import sync


def build(tmp_path):
    acme, globex = tmp_path / "acme", tmp_path / "globex"
    for folder in (acme, globex):
        folder.mkdir()
        for i in range(3):
            (folder / f"{folder.name}{i}.md").write_text(f"# {folder.name} {i}\n\nText {i}.\n")
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=CountingEmbedder())
    sync(kb, [acme], metadata={"tenant": "acme"})
    sync(kb, [globex], metadata={"tenant": "globex"})
    return kb, acme, globex


def test_the_whole_index_and_a_scope(tmp_path):
    kb, acme, globex = build(tmp_path)
    try:
        whole = KnowledgeStatusTool(kb)
        reply = whole.call({})
        assert not reply.is_error and reply.text.startswith("Index current"), reply.text
        assert "kb watch: not running" in reply.text and f"root {acme.resolve()}" in reply.text

        (acme / "acme0.md").write_text("# acme 0\n\nEdited behind the index, longer now.\n")
        (acme / "acme1.md").unlink()
        (globex / "new.md").write_text("# a new globex file\n")
        text = whole.call({}).text
        assert text.startswith("Index behind: 1 new, 1 changed, 1 gone"), text

        acme_view = kb.scoped({"tenant": "acme"})
        scoped = KnowledgeStatusTool(acme_view).call({}).text
        assert scoped.startswith("Index behind: 1 changed, 1 gone"), scoped
        assert "files: indexed 3, changed 1, gone 1" in scoped
        assert "globex" not in scoped and "root " not in scoped and "kb watch" not in scoped
        assert str((acme / "acme0.md").resolve()) in scoped  # its own file, named

        other = KnowledgeStatusTool(kb.scoped({"tenant": "globex"})).call({}).text
        assert other.startswith("Index current"), other  # the new file is no scope's yet
        assert "acme" not in other
        assert KnowledgeStatusTool(kb).call({"x": 1}).is_error
    finally:
        kb.close()
