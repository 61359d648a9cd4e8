"""A filter is checked once per search (issue 38): where it enters kb (the command line, a
SearchOptions a library user builds) it becomes a CheckedFilter, and every layer below (the
view, the pipeline, the retrievers, the store) takes it as it is."""

from __future__ import annotations

import sys

import pytest

from cli_helpers import SAMPLE, run_json, seed
from kbcli import KnowledgeBase, SearchOptions
from kbcli.filters import model
from kbcli.search.query import search


@pytest.fixture
def checks(monkeypatch):
    """Every call of validate_filter, wherever kbcli imported it from."""
    calls: list[object] = []
    real = model.validate_filter

    def counted(filter):
        calls.append(filter)
        return real(filter)

    for module in list(sys.modules.values()):
        if getattr(module, "validate_filter", None) is real:
            monkeypatch.setattr(module, "validate_filter", counted)
    return calls


def test_a_filtered_hybrid_kb_search_checks_its_filter_once(checks):
    seed(SAMPLE)
    checks.clear()
    hits, _ = run_json(
        "search", "invoices", "--mode", "hybrid", "--filter", "page=2", "--by", "chunk", "--json"
    )
    assert hits and all(h["metadata"]["page"] == 2 for h in hits)
    assert len(checks) == 1


def test_a_filtered_hybrid_library_search_checks_its_filter_once(tmp_path, checks):
    kb = KnowledgeBase.open(tmp_path / "kb.db")
    try:
        kb.add("invoices are paid monthly", {"source": "/a.md", "page": 2})
        kb.add("invoices are archived yearly", {"source": "/b.md", "page": 3})
        checks.clear()
        options = SearchOptions(k=3, mode="hybrid", filter={"page": 2})
        hits = search(kb, '"paid monthly" invoices', options)
        assert [h.source for h in hits] == ["/a.md"]
        assert len(checks) == 1
        checks.clear()
        results = kb.search("invoices", filter={"page": 2})
        assert [r.document.metadata["page"] for r in results] == [2]
        assert len(checks) == 1
    finally:
        kb.close()
