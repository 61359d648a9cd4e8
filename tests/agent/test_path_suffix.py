"""The end of a path names an indexed file when only one file has it: the one rule of ``kb
get``, ``knowledge_get`` and ``kb eval`` (:func:`kbcli.agent.get.path_suffix_match`), on whole
path components, within the reader's scope, with a bounded list of candidates."""

from __future__ import annotations

import pytest

from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
from kbcli.agent.get import (
    MAX_CANDIDATES,
    AmbiguousPathError,
    path_suffix,
    path_suffix_match,
    read_file,
)
from kbcli.agent.tools.read import NO_FILE, KnowledgeGetTool
from kbcli.views import KnowledgeView

SOURCES = ["/n/common/lsof.md", "/n/linux/lsof.md", "/n/common/tar.md", "/n/other/..md"]


@pytest.mark.parametrize(
    "path,expected",
    [
        ("tar.md", "/n/common/tar.md"),
        ("common/tar.md", "/n/common/tar.md"),
        ("./common//tar.md", "/n/common/tar.md"),
        ("linux/lsof.md", "/n/linux/lsof.md"),
        ("..md", "/n/other/..md"),
        ("ar.md", None),  # not a whole component
        ("sof.md", None),
        ("mmon/tar.md", None),
        ("/common/tar.md", None),  # absolute: only as itself
        ("../common/tar.md", None),
        ("~/tar.md", None),
        ("", None),
    ],
)
def test_whole_components_only(path, expected):
    assert path_suffix_match(path, SOURCES) == expected


def test_several_are_refused_naming_them():
    with pytest.raises(AmbiguousPathError) as caught:
        path_suffix_match("lsof.md", SOURCES)
    assert str(caught.value) == (
        "'lsof.md' matches 2 indexed files (/n/common/lsof.md, /n/linux/lsof.md): give more "
        "of the path"
    )
    assert caught.value.exit_code == 2


def test_the_list_of_candidates_is_bounded_and_so_is_the_reading():
    read: list[str] = []

    def sources():
        for n in range(10_000):
            read.append(f"/n/{n:05d}/README.md")
            yield read[-1]

    with pytest.raises(AmbiguousPathError) as caught:
        path_suffix_match("README.md", sources())
    assert len(caught.value.candidates) == MAX_CANDIDATES
    assert f"matches more than {MAX_CANDIDATES} indexed files" in str(caught.value)
    assert str(caught.value).endswith(", ...): give more of the path")
    assert len(read) == MAX_CANDIDATES + 1  # stopped at the first one past the bound


def test_path_suffix_normalises():
    assert path_suffix("./a//b.md") == "a/b.md"
    assert path_suffix("a/./b.md") == "a/b.md"
    assert path_suffix("/a/b.md") is None and path_suffix("a/../b.md") is None


@pytest.fixture
def tenants(tmp_path):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=SimpleEmbedder())
    for source, tenant in [
        ("/acme/ops/lsof.md", "acme"),
        ("/acme/dev/lsof.md", "acme"),
        ("/acme/dev/tar.md", "acme"),
        ("/globex/lsof.md", "globex"),
        ("/globex/tar.md", "globex"),
        ("/globex/secret.md", "globex"),
    ]:
        kb.add(f"notes of {source}", {"source": source, "tenant": tenant})
    yield kb
    kb.close()


def test_a_scope_never_names_what_it_hides(tenants):
    acme = KnowledgeView(tenants, {"tenant": "acme"})
    # /globex/tar.md shares the end: hidden, it neither counts nor shows
    assert read_file(acme, "tar.md").source == "/acme/dev/tar.md"
    with pytest.raises(AmbiguousPathError) as caught:
        read_file(acme, "lsof.md")
    assert caught.value.candidates == ["/acme/dev/lsof.md", "/acme/ops/lsof.md"]
    assert "globex" not in str(caught.value)
    get = KnowledgeGetTool(acme)
    refused = get.call({"path": "lsof.md"})
    assert refused.is_error and "globex" not in refused.text
    assert refused.text.startswith("Error: 'lsof.md' matches 2 indexed files (")
    assert get.call({"path": "secret.md"}).text == NO_FILE  # as for a file never indexed
    assert get.call({"path": "nothing.md"}).text == NO_FILE
    assert "notes of /acme/ops/lsof.md" in get.call({"path": "ops/lsof.md"}).text
    everything = KnowledgeGetTool(tenants).call({"path": "lsof.md"})
    assert "3 indexed files" in everything.text and "/globex/lsof.md" in everything.text


def test_a_scope_is_checked_in_bounded_batches(tenants, monkeypatch):
    """Many files share the end outside the scope: each batch of names is one query."""
    import kbcli.agent.get as reading

    for n in range(30):
        tenants.add("other", {"source": f"/globex/{n}/tar.md", "tenant": "globex"})
    monkeypatch.setattr(reading, "SCOPE_BATCH", 7)
    acme = KnowledgeView(tenants, {"tenant": "acme"})
    asked: list[int] = []
    real = KnowledgeView.iter_documents

    def counted(self, filter=None, **kwargs):
        if filter is not None:
            asked.append(len(filter["source"]["$in"]))
        return real(self, filter, **kwargs)

    monkeypatch.setattr(KnowledgeView, "iter_documents", counted)
    assert read_file(acme, "tar.md").source == "/acme/dev/tar.md"
    assert asked and max(asked) <= 7 and sum(asked) == 32
