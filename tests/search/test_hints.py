"""``knowledge_search`` explains an empty answer as ``kb search`` does (a source nothing is
indexed under, a filter key no chunk has), judged only over the chunks its caller may see: a
scoped tool answers exactly as it would over an index that never held the hidden chunks."""

from __future__ import annotations

import itertools

import pytest

from kbcli import KnowledgeBase, KnowledgeSearchTool, SimpleEmbedder
from kbcli.agent.tools.read import MAX_HINT_CHECKS, NO_KEY, NO_RESULTS, NO_SOURCE
from sample_docs import SCOPE, _kb


@pytest.fixture(params=["sqlite", "memory"])
def indexes(request, tmp_path):
    """The whole index, and one that only ever held acme's chunks (same backend)."""
    (tmp_path / "full").mkdir()
    (tmp_path / "acme").mkdir()
    full = _kb(request.param, tmp_path / "full", with_outside=True)
    acme_only = _kb(request.param, tmp_path / "acme", with_outside=False)
    yield full, acme_only
    full.close()
    acme_only.close()


def _ask(tool: KnowledgeSearchTool, query: str, filter: dict, mode: str = "keyword") -> str:
    result = tool.call({"query": query, "mode": mode, "filter": filter})
    assert not result.is_error and "\n" not in result.text, result.text
    return result.text


def test_an_unknown_key_or_an_unindexed_source_is_named(indexes):
    tool = indexes[0].as_tool()
    assert _ask(tool, "password", {"yaer": 2024}) == NO_KEY.format(names="'yaer'")
    assert _ask(tool, "password", {"source": {"$prefix": "/acme/giude/"}}) == NO_SOURCE.format(
        where="under '/acme/giude/'"
    )
    assert _ask(tool, "password", {"source": "/acme/giude.md"}) == NO_SOURCE.format(
        where="at '/acme/giude.md'"
    )
    # Of several sources, those with nothing indexed are named (as kb search --in does).
    either = {"$or": [{"source": "/acme/guide.md"}, {"source": {"$prefix": "/nope/"}}]}
    assert _ask(tool, "zzzqqq", either) == NO_SOURCE.format(where="under '/nope/'")
    both = {"source": {"$in": ["/acme/giude.md"]}, "yaer": 1}  # the source first, as kb search
    assert _ask(tool, "password", both) == NO_SOURCE.format(where="at '/acme/giude.md'")
    assert _ask(tool, "password", {"tenant": "acme", "yaer": 1}) == NO_KEY.format(names="'yaer'")
    for text in (_ask(tool, "password", {"yaer": 1}), _ask(tool, "password", both)):
        assert text.startswith("No relevant knowledge found: ") and "the filter argument" in text


def test_a_known_key_or_source_without_matching_text_keeps_the_plain_answer(indexes):
    tool = indexes[0].as_tool()
    for query, filter in [
        ("zzzqqq", {"year": 2024}),
        ("password", {"year": 1999}),
        ("zzzqqq", {"source": {"$prefix": "/acme/"}}),
        ("zzzqqq", {"source": "/acme/billing.md"}),
        ("zzzqqq", {"year": {"$exists": False}}),
    ]:
        assert _ask(tool, query, filter) == NO_RESULTS, filter
    assert tool.call({"query": "zzzqqq", "mode": "keyword"}).text == NO_RESULTS
    assert _ask(tool, "password", {"year": 2024}).startswith("1. ")


def test_a_scope_answers_as_if_the_hidden_chunks_were_not_there(indexes):
    full, acme_only = indexes
    scoped, alone = full.as_tool(filter=SCOPE), acme_only.as_tool(filter=SCOPE)
    # The whole index knows these keys and sources ...
    unscoped = full.as_tool()
    assert _ask(unscoped, "zzzqqq", {"clearance": "top"}) == NO_RESULTS
    assert _ask(unscoped, "zzzqqq", {"source": {"$prefix": "/globex/"}}) == NO_RESULTS
    # ... acme's scope does not: the same answer as a key or folder that exists nowhere.
    hidden_key = _ask(scoped, "password", {"clearance": "top"})
    assert hidden_key == NO_KEY.format(names="'clearance'")
    assert _ask(scoped, "password", {"clarity": "top"}) == NO_KEY.format(names="'clarity'")
    hidden_folder = _ask(scoped, "invoices", {"source": {"$prefix": "/globex/"}})
    assert hidden_folder == NO_SOURCE.format(where="under '/globex/'")
    assert _ask(scoped, "invoices", {"source": {"$prefix": "/nowhere/"}}) == NO_SOURCE.format(
        where="under '/nowhere/'"
    )
    # Every answer (all of them empty) equals the one over an index that never held the hidden
    # chunks: plain, or naming the same key or source.
    filters = [
        {"clearance": "top"},
        {"clearance": {"$exists": True}},
        {"source": {"$prefix": "/globex/"}},
        {"source": "/globex/vault.md"},
        {"source": "/acme/guide.md", "clearance": "low"},
        {"$or": [{"source": "/globex/ledger.md"}, {"clearance": "low"}]},
        {"year": 2024, "tenant": "globex"},
        {"source": {"$in": ["/acme/billing.md", "/globex/vault.md"]}, "year": 2025},
    ]
    for filter, query, mode in itertools.product(
        filters, ["password", "vault weekly", "zzzqqq"], ("keyword", "semantic", "hybrid")
    ):
        assert _ask(scoped, query, filter, mode) == _ask(alone, query, filter, mode), filter


def test_many_or_long_names_stay_one_short_line(indexes):
    tool = indexes[0].as_tool()
    many = {"source": {"$in": [f"/n{i}.md" for i in range(MAX_HINT_CHECKS + 3)]}}
    assert _ask(tool, "password", many) == NO_SOURCE.format(
        where=f"at '/n0.md', at '/n1.md', at '/n2.md' and {MAX_HINT_CHECKS - 3} more"
    )  # only the first few are looked up
    keys = {f"k{i}": 1 for i in range(4)}
    assert _ask(tool, "password", keys) == NO_KEY.format(names="'k0', 'k1', 'k2' and 1 more")
    long_key = "x" * 300
    assert _ask(tool, "password", {long_key: 1}) == NO_KEY.format(names=repr("x" * 79 + "…"))
    # Keys past the first few are not looked up (an unknown one reads every chunk in scope).
    past = {f"k{i}": 1 for i in range(MAX_HINT_CHECKS + 2)}
    names = f"'k0', 'k1', 'k2' and {MAX_HINT_CHECKS - 3} more"
    assert _ask(tool, "password", past) == NO_KEY.format(names=names)


def test_the_checks_run_only_when_nothing_was_found(indexes, monkeypatch):
    from kbcli.search import hints

    def refuse(*args, **kwargs):
        raise AssertionError("a hint check ran")

    monkeypatch.setattr(hints, "unindexed", refuse)
    monkeypatch.setattr(hints, "unknown_keys", refuse)
    tool = indexes[0].as_tool()
    found = tool.call({"query": "password", "filter": {"year": 2024, "source": "/acme/guide.md"}})
    assert found.text.startswith("1. ") and not found.is_error
    assert tool.call({"query": "zzzqqq", "mode": "keyword"}).text == NO_RESULTS  # no filter
    assert tool.call({"query": "zzzqqq", "filter": {"year": 2024}}).is_error  # they do run here


def test_without_a_catalog_the_answer_stays_plain(indexes):
    from test_reference_api import ReferenceOnlyStore

    pipeline_tool = KnowledgeSearchTool(indexes[0].pipeline)
    assert _ask(pipeline_tool, "password", {"yaer": 1}) == NO_RESULTS
    kb = KnowledgeBase(store=ReferenceOnlyStore(), embedder=SimpleEmbedder())
    kb.add("the vpn password rotates", {"n": 1})
    assert _ask(kb.as_tool(), "vpn", {"yaer": 1}, mode="semantic") == NO_RESULTS
