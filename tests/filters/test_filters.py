import json

import pytest

from filter_strategies import KNOWN_DOCS as DOCS
from kbcli.errors import FilterError
from kbcli.filters.model import matches, validate_filter
from kbcli.filters.sql import compile_sql
from kbcli.filters.syntax import under_folders


def test_expected_semantics():
    docs = DOCS[:7]  # the ones without a source
    assert [i for i, d in enumerate(docs) if matches(d, {"year": 2024})] == [1]
    assert [i for i, d in enumerate(docs) if matches(d, {"lang": {"$ne": "en"}})] == [1, 3, 4, 6]
    assert [i for i, d in enumerate(docs) if matches(d, {"year": {"$gt": 2020}})] == [1, 2]
    assert matches({}, None) and matches({"a": 1}, {})


def test_prefix_is_literal_and_case_sensitive():
    def hits(flt):
        return [i for i, d in enumerate(DOCS) if matches(d, flt)]

    assert hits({"source": {"$prefix": "/docs/guide/"}}) == [7]
    assert hits({"source": {"$prefix": "/docs/guide"}}) == [7, 8]
    assert hits({"source": {"$prefix": "/docs/g_ide/"}}) == []  # no LIKE wildcards
    assert hits({"source": {"$prefix": "/docs/g%ide/"}}) == [9]
    assert hits({"source": {"$prefix": "/DOCS/"}}) == []
    assert hits({"source": {"$prefix": "7"}}) == []  # only text values
    sql, params = compile_sql({"source": {"$prefix": "x' OR 1=1 --"}})
    assert "OR 1=1" not in sql and "x' OR 1=1 --" in params


@pytest.mark.parametrize(
    "bad",
    [
        "lang=en",
        {"lang": {"$regex": "x"}},
        {"$not": {"a": 1}},
        {"$or": {"a": 1}},
        {"$or": []},
        {"a": {"$in": "x"}},
        {"a": {"$in": []}},
        {"a": {"$gt": [1]}},
        {"a": {"$exists": "yes"}},
        {"a": {"$prefix": ""}},
        {"a": {"$prefix": 3}},
        {"a": {}},
        {"a": [1, 2]},
        {'a"b': 1},
        {"": 1},
    ],
)
def test_invalid_filters_raise_clear_errors(bad):
    with pytest.raises(FilterError):
        validate_filter(bad)


def test_text_prefixes_name_what_a_filter_pins_a_key_to():
    from kbcli.filters.sql import text_prefixes

    assert text_prefixes({"source": "/a.md"}, "source") == ["/a.md"]
    assert text_prefixes({"source": {"$prefix": "/d/"}, "lang": "en"}, "source") == ["/d/"]
    assert text_prefixes({"source": {"$in": ["/a", "/b"]}}, "source") == ["/a", "/b"]
    assert text_prefixes({"$and": [{"lang": "en"}, {"source": "/a"}]}, "source") == ["/a"]
    both = {"$or": [{"source": "/a"}, {"source": {"$prefix": "/d/"}}]}
    assert text_prefixes(both, "source") == ["/a", "/d/"]
    for loose in (
        None,
        {},
        {"lang": "en"},
        {"source": 7},
        {"source": ""},
        {"source": {"$in": ["/a", 7]}},
        {"source": {"$ne": "/a"}},
        {"source": {"$gt": "/a"}},
        {"$or": [{"source": "/a"}, {"lang": "en"}]},
    ):
        assert text_prefixes(loose, "source") is None, loose


def test_after_prefix_is_the_least_string_past_every_extension():
    from kbcli.filters.sql import after_prefix

    assert after_prefix("/docs/") == "/docs0"
    assert after_prefix("a\U0010ffff") == "b"
    assert after_prefix("\U0010ffff\U0010ffff") is None
    assert after_prefix("\ud7ff") == "\ue000"  # past the surrogates, which cannot be encoded
    for text in ("/docs/x", "/docs/\U0010ffff", "/docs/" + "\U0010ffff" * 3):
        assert "/docs/" <= text < after_prefix("/docs/")
        assert text.encode() < after_prefix("/docs/").encode()  # what SQLite compares


def test_filter_keys_lists_each_tested_key_once():
    from kbcli.filters.model import filter_keys

    assert filter_keys(None) == [] and filter_keys({}) == []
    flt = {"a": 1, "$or": [{"b": {"$gt": 2}}, {"$and": [{"a": 3}, {"c": {"$exists": False}}]}]}
    assert filter_keys(flt) == ["a", "b", "c"]


def test_text_prefixes_gives_the_narrowest_of_anded_pins():
    from kbcli.filters.sql import text_prefixes

    scope = {"source": {"$prefix": "/team/"}}
    mine = {"source": {"$prefix": "/team/docs/"}}
    for pair in ([scope, mine], [mine, scope]):
        assert text_prefixes({"$and": pair}, "source") == ["/team/docs/"]
    both = {"source": {"$prefix": "/team/", "$eq": "/team/a.md"}}
    assert text_prefixes(both, "source") == ["/team/a.md"]
    apart = {"$and": [{"source": {"$prefix": "/x/"}}, {"source": {"$in": ["/y/1", "/x/2"]}}]}
    assert text_prefixes(apart, "source") == ["/x/"]  # neither within the other: the first
    assert text_prefixes({"$and": [{"lang": "en"}]}, "source") is None


# --- a filter is checked once, where it enters ------------------------------------------------


def test_a_checked_filter_is_a_frozen_copy_passed_down_unchecked():
    import pickle

    from kbcli.filters.model import CheckedFilter

    mine = {"team": "ops", "year": {"$gte": 2020}}
    checked = validate_filter(mine)
    assert isinstance(checked, CheckedFilter) and checked == mine
    mine["year"]["$gte"] = 1900  # the caller's dict changes later: the checked one does not
    assert checked["year"] == {"$gte": 2020}
    with pytest.raises(TypeError, match="cannot be changed"):
        checked["team"] = "dev"
    with pytest.raises(TypeError):
        checked.update(team="dev")
    assert validate_filter(checked) is checked
    assert pickle.loads(pickle.dumps(checked)) == checked
    assert json.loads(json.dumps(checked)) == {"team": "ops", "year": {"$gte": 2020}}
    assert validate_filter({}) is None


def test_a_filtered_search_checks_its_filter_once(tmp_path, monkeypatch):
    import kbcli.filters.model as filters
    from kbcli import KnowledgeBase

    kb = KnowledgeBase.open(tmp_path / "kb.db")
    for i in range(6):
        kb.add(f"note {i} on resetting a password", {"team": "ops" if i % 2 else "dev", "n": i})
    checks = []
    real = filters._check

    def counted(f, depth):
        if depth == 1:
            checks.append(f)
        return real(f, depth)

    monkeypatch.setattr(filters, "_check", counted)
    for mode in ("keyword", "semantic", "hybrid"):
        checks.clear()
        flt = {"team": "ops", "n": {"$gte": 3}}
        hits = kb.search("reset password", k=3, mode=mode, filter=flt)
        assert {h.document.metadata["n"] for h in hits} <= {3, 5}
        assert len(checks) == 1, (mode, checks)
    kb.close()


def test_a_folder_is_the_folder_and_what_is_under_it():
    """``--in /docs/a``: not the sibling ``/docs/ab`` (each store's reads of it are checked
    against this evaluator: filters/test_postgres_source.py, the contract suites)."""
    sources = ["/docs/a/x.md", "/docs/ab/y.md", "/docs/a/sub/z.md", "/other/a/w.md"]
    folder = under_folders(["/docs/a"])
    assert [s for s in sources if matches({"source": s}, folder)] == sources[0:3:2]
