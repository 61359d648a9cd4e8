"""The --filter and --meta syntax of the CLI (kbcli.filters.syntax: parse_filter_expressions,
parse_meta)."""

from __future__ import annotations

import pytest

from kbcli.errors import FilterError, InvalidOptionError
from kbcli.filters.model import matches
from kbcli.filters.syntax import parse_filter_expressions, parse_meta


@pytest.mark.parametrize(
    ("exprs", "expected"),
    [
        (["lang=en"], {"lang": "en"}),
        (["lang = en"], {"lang": "en"}),
        (["lang!=en"], {"lang": {"$ne": "en"}}),
        (["lang=en,zh"], {"lang": {"$in": ["en", "zh"]}}),
        (["lang!=en,zh"], {"lang": {"$nin": ["en", "zh"]}}),
        (["page=3"], {"page": {"$in": [3, "3"]}}),
        (["page!=3"], {"page": {"$nin": [3, "3"]}}),
        (["score=0.5"], {"score": {"$in": [0.5, "0.5"]}}),
        (["draft=true"], {"draft": {"$in": [True, "true"]}}),
        (["owner=null"], {"owner": {"$in": [None, "null"]}}),
        (["year>2020"], {"year": {"$gt": 2020}}),
        (["year>=2020"], {"year": {"$gte": 2020}}),
        (["year<2020"], {"year": {"$lt": 2020}}),
        (["year<=2020.5"], {"year": {"$lte": 2020.5}}),
        (["name>m"], {"name": {"$gt": "m"}}),
        (["url=https://x.org/?a=b"], {"url": "https://x.org/?a=b"}),
        (["version=1.2.3"], {"version": "1.2.3"}),
        (["lang=en", "year>=2020"], {"$and": [{"lang": "en"}, {"year": {"$gte": 2020}}]}),
        ([], None),
    ],
)
def test_parses(exprs, expected):
    assert parse_filter_expressions(exprs) == expected


@pytest.mark.parametrize("expr", ["lang", "=en", "lang=", "a=x,,y", "year>", "  "])
def test_bad_syntax_names_the_expression_and_the_forms(expr):
    with pytest.raises(FilterError) as info:
        parse_filter_expressions([expr])
    message = str(info.value)
    assert repr(expr) in message
    assert "key!=value" in message and "key>=3" in message


def test_ordering_with_a_boolean_is_refused():
    with pytest.raises(FilterError, match="number or a text"):
        parse_filter_expressions(["draft>true"])


def test_numeric_equality_matches_loader_ints_and_cli_strings():
    where = parse_filter_expressions(["page=3"])
    assert matches({"page": 3}, where)
    assert matches({"page": "3"}, where)
    assert not matches({"page": 4}, where)
    assert not matches({}, where)


def test_not_equal_matches_documents_without_the_key():
    where = parse_filter_expressions(["page!=3"])
    assert matches({}, where)
    assert not matches({"page": "3"}, where)


def test_parse_meta_types_numbers_and_booleans_only():
    assert parse_meta(["page=3", "url=a=b", "empty="]) == {"page": 3, "url": "a=b", "empty": ""}
    assert parse_meta(["x=-1.5", "y=2e3", "ok=true", "no=false"]) == {
        "x": -1.5,
        "y": 2000.0,
        "ok": True,
        "no": False,
    }
    # not JSON numbers, quoted, or out of range: text, exactly as written
    texts = ["zip=01234", "plus=+3", "v=1.", "t=True", "n=null", "big=" + "9" * 30, "f=1e999"]
    assert parse_meta(texts) == {
        "zip": "01234",
        "plus": "+3",
        "v": "1.",
        "t": "True",
        "n": "null",
        "big": "9" * 30,
        "f": "1e999",
    }
    assert parse_meta(['code="2024"', "name='42'", 'q="']) == {
        "code": "2024",
        "name": "42",
        "q": '"',
    }
    assert parse_meta([]) == {}


@pytest.mark.parametrize("expr", ["novalue", "=x", ' ="x'])
def test_parse_meta_rejects_bad_syntax(expr):
    with pytest.raises(InvalidOptionError):
        parse_meta([expr])


# --- mistyped operators: refused with the likely meaning, never matched as a value -------------

MISTYPED = [
    ("year>>3", "'>>'", "year>3"),
    ("year=<3", "'=<'", "year<=3"),
    ("year=>3", "'=>'", "year>=3"),
    ("year<>3", "'<>'", "year!=3"),
    ("year=!3", "'=!'", "year!=3"),
    ("year!==3", "'!=='", "year!=3"),
    ("year===3", "'==='", "year=3"),
    ("year<<3", "'<<'", "year<3"),
    ("year> >3", "'>>'", "year>3"),
    ("year>=<3", "'>=<'", None),
]


@pytest.mark.parametrize(("expr", "run", "meant"), MISTYPED)
def test_a_value_starting_with_an_operator_is_a_mistyped_operator(expr, run, meant):
    with pytest.raises(FilterError) as info:
        parse_filter_expressions([expr])
    message = str(info.value)
    assert "\n" not in message
    assert repr(expr) in message and f"{run} is not an operator" in message
    assert (f"did you mean {meant!r}?" in message) if meant else "did you mean" not in message
    assert "quote a value that starts with one" in message


def test_a_bang_without_equals_suggests_not_equal():
    with pytest.raises(FilterError, match=r"'year!3' \(did you mean 'year!=3'\?\): use key="):
        parse_filter_expressions(["year!3"])


def test_double_equals_is_equals():
    assert parse_filter_expressions(["year==3"]) == parse_filter_expressions(["year=3"])
    assert parse_filter_expressions(["lang == en"]) == {"lang": "en"}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("title=a>b", {"title": "a>b"}),
        ("formula=x<=y", {"formula": "x<=y"}),
        ("cmp=a!=b", {"cmp": "a!=b"}),
        ("title!=a=b", {"title": {"$ne": "a=b"}}),
        ("name>m<n", {"name": {"$gt": "m<n"}}),
    ],
)
def test_operator_characters_inside_a_value_are_text(expr, expected):
    assert parse_filter_expressions([expr]) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('title="=x"', {"title": "=x"}),
        ("title='>3'", {"title": ">3"}),
        ('arrow!="=>"', {"arrow": {"$ne": "=>"}}),
        ('code="2024"', {"code": "2024"}),  # text only, not also the number
        ('title="a,b"', {"title": "a,b"}),  # one value, not any of two
        ('empty=""', {"empty": ""}),
        ('name>="m"', {"name": {"$gte": "m"}}),
        ('q="', {"q": '"'}),  # a lone quote is just text
    ],
)
def test_a_quoted_value_is_exactly_the_text_between_the_quotes(expr, expected):
    assert parse_filter_expressions([expr]) == expected


def test_quoted_text_matches_only_text():
    where = parse_filter_expressions(['code="2024"'])
    assert matches({"code": "2024"}, where) and not matches({"code": 2024}, where)
    assert matches({"t": "=x"}, parse_filter_expressions(['t="=x"']))


def test_the_mistyped_operator_error_stays_one_line_for_any_key_or_value():
    # found by the KB_STRESS fuzz: the suggestion repeated the key's newline
    with pytest.raises(FilterError) as info:
        parse_filter_expressions(["0\n0<<\n1"])
    assert "\n" not in str(info.value)
    assert "did you mean '0\\n0<\\n1'?" in str(info.value)
