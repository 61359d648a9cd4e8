"""Fuzzing the filter parser and compilers (issue 17, matrix item 6).

Random ``--filter`` expressions and random filter-shaped objects (hostile keys: quotes, NUL,
unicode quotes, 10 KB keys, JSON-path and SQL look-alikes, lone surrogates; huge, negative,
float, NaN, bool, None, list and dict values; unknown operators) either raise
:class:`FilterError` or give a filter that every compiler accepts. A compiled filter carries no
user text: its SQL is made only of the compiler's own words, is the same for any filter of the
same shape (keys and values renamed), and has one bound parameter per placeholder; the
parameters bind (SQLite in memory; PostgreSQL on the session server when it runs).
``KB_STRESS=1`` runs 20 times as many examples.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from filter_strategies import examples, expressions, raw_filters, valid_filters
from kbcli.errors import FilterError
from kbcli.filters.model import LOGICAL_OPERATORS, matches, validate_filter
from kbcli.filters.sql import compile_sql
from kbcli.filters.syntax import parse_filter_expressions
from kbcli.stores.chroma.store import compile_where
from kbcli.stores.postgres.filters import compile_filter

SRC = str(Path(__file__).resolve().parents[2] / "src")
FUZZ = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --- the no-user-text check ------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s+|'[^']*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_]*|\d+|%s|\?|::|->>|->|>=|<=|[(),=<>.]"
)
SQLITE_WORDS = {
    "coalesce", "json_type", "json_extract", "substr", "length", "IN", "AND", "OR", "NOT",
    "IS", "NULL", "'null'", "'true'", "'false'", "'integer'", "'real'", "'text'", "0", "1",
}  # fmt: skip
POSTGRES_WORDS = {
    "coalesce", "jsonb_typeof", "starts_with", "CASE", "WHEN", "THEN", "ELSE", "END",
    "COLLATE", '"C"', "TRUE", "FALSE", "AND", "OR", "NOT", "IS", "NULL", "text", "jsonb",
    "'string'", "'number'",
}  # fmt: skip
PUNCTUATION = {"(", ")", ",", "=", "<", ">", ">=", "<=", "::", "->", "->>", "."}


def sql_tokens(sql: str) -> list[str]:
    """The tokens of ``sql``; AssertionError on any character no token covers."""
    tokens, at = [], 0
    while at < len(sql):
        match = _TOKEN.match(sql, at)
        assert match, f"unexpected text at {at}: {sql[at : at + 40]!r}"
        if not match.group().isspace():
            tokens.append(match.group())
        at = match.end()
    return tokens


def assert_only_compiler_words(
    sql: str, params: list[Any], words: set[str], placeholder: str, column: str
) -> None:
    """Every token of ``sql`` is one of the compiler's ``words``, punctuation, a placeholder
    or the trusted ``column``; one parameter per placeholder."""
    allowed = words | PUNCTUATION | {placeholder, *column.split(".")}
    tokens = sql_tokens(sql)
    stray = [t for t in tokens if t not in allowed]
    assert not stray, f"text in the SQL that the compiler does not write: {stray[:5]}"
    assert tokens.count(placeholder) == len(params), (tokens.count(placeholder), len(params))


def renamed(flt: dict[str, Any]) -> dict[str, Any]:
    """``flt`` with every key and value replaced by a neutral one of the same type."""
    names: dict[str, str] = {}
    counter = itertools.count()

    def key(k: str) -> str:
        return names.setdefault(k, f"k{len(names)}")

    def value(v: Any) -> Any:
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int):
            return 7
        if isinstance(v, float):
            return 7.5
        if isinstance(v, str):
            return f"v{next(counter)}"
        return [value(i) for i in v]

    def walk(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in LOGICAL_OPERATORS:
                out[k] = [walk(sub) for sub in v]
            elif isinstance(v, dict):
                out[key(k)] = {op: value(operand) for op, operand in v.items()}
            else:
                out[key(k)] = value(v)
        return out

    return walk(flt)


SAMPLE = json.dumps({"a": 1, "x": "y"})
_SQLITE = sqlite3.connect(":memory:")


def check_sqlite(flt: dict[str, Any]) -> None:
    """The SQLite SQL of ``flt`` carries no user text and its parameters bind."""
    sql, params = compile_sql(flt, "metadata")
    assert_only_compiler_words(sql, params, SQLITE_WORDS, "?", "metadata")
    assert compile_sql(renamed(flt), "metadata")[0] == sql, "the SQL depends on user text"
    _SQLITE.execute(f"SELECT count(*) FROM (SELECT ? AS metadata) WHERE {sql}", [SAMPLE, *params])


def check_postgres(flt: dict[str, Any], pg: Any) -> None:
    """The PostgreSQL SQL of ``flt`` carries no user text; its parameters bind on ``pg``
    (a connection to the session server, or None when PostgreSQL is not installed)."""
    sql, params = compile_filter(flt, "c.metadata")
    assert_only_compiler_words(sql, params, POSTGRES_WORDS, "%s", "c.metadata")
    assert compile_filter(renamed(flt), "c.metadata")[0] == sql, "the SQL depends on user text"
    if pg is not None:
        pg.execute(
            f"SELECT count(*) FROM (VALUES (%s::jsonb)) AS c(metadata) WHERE {sql}",
            [SAMPLE, *params],
        ).fetchone()


@pytest.fixture(scope="module")
def pg(request):
    """A connection to the session's PostgreSQL server, or None without PostgreSQL."""
    try:
        dsn = request.getfixturevalue("pg_dsn")
    except pytest.skip.Exception:
        yield None
        return
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    yield conn
    conn.close()


def test_the_check_catches_user_text_in_the_sql(monkeypatch):
    """The checks fail on SQL with user text in it, and on a compiler that splices a key,
    even a key made of the compiler's own words (the rename check catches that one)."""
    words = SQLITE_WORDS
    for sql, params in [
        ("json_extract(metadata, '$.\"x\"') = ?", ["v"]),
        ("json_type(metadata, ?) = 'null' OR x", ["k"]),
        ("json_type(metadata, ?) = ?", ["k"]),
        ("coalesce(?, 0) -- ;", ["k"]),
    ]:
        with pytest.raises(AssertionError):
            assert_only_compiler_words(sql, params, words, "?", "metadata")

    def splicing(column: str, key: str, op: str, operand: Any, params: list[Any]) -> str:
        params.append(operand)
        return f"(json_extract({column}, ?) IS NOT NULL AND {key})"

    monkeypatch.setattr("kbcli.filters.sql._compile_op", splicing)
    for flt in ({"a": 1}, {"' OR 1=1 --": 1}, {"AND": 1}):
        with pytest.raises(AssertionError):
            check_sqlite(flt)


# --- the command-line syntax -------------------------------------------------------------------


@FUZZ
@given(st.lists(expressions, min_size=1, max_size=3))
@example(["year>=2024"])
@example(["a=\udcff"])
@example(["\udcff=1"])
@example(["n<" + "9" * 30])
@example(["x=1e999"])
@example(["x=a\x00b"])
def test_parsing_expressions_gives_a_filter_or_a_filter_error(pg, exprs):
    try:
        flt = parse_filter_expressions(exprs)
    except FilterError as exc:
        assert str(exc) and "\n" not in str(exc).strip()
        return
    assert flt is not None and validate_filter(flt) == flt
    check_sqlite(flt)
    check_postgres(flt, pg)


# --- raw objects shaped like filters ---------------------------------------------------------


@FUZZ
@given(raw_filters)
@example({"a": {"$eq": 2**63}})
@example({"a": float("nan")})
@example({"$or": []})
@example({"a": {"$in": []}})
@example({"a": {}})
@example({"a": {"$prefix": ""}})
@example({"a": {"$not": {"$eq": 1}}})
@example({"$not": {"a": 1}})
@example({1: "a"})
@example({"x" * 10240: 1})
@example({"a\x00b": 1})
@example({"a": "b\x00"})
@example({"\u2019 OR 1=1 --": "x"})
@example({"a": ["x"]})
@example({"a": {"$gt": True}})
def test_validating_any_object_gives_a_filter_or_a_filter_error(pg, obj):
    try:
        flt = validate_filter(obj)
    except FilterError as exc:
        assert str(exc) and "\n" not in str(exc).strip()
        return
    if flt is None:
        assert obj is None or obj == {}
        return
    check_sqlite(flt)
    check_postgres(flt, pg)
    try:
        compile_where(flt)
    except FilterError:
        pass  # Chroma cannot express it: the store scans exactly instead
    assert matches({"a": 1, "x": "y"}, flt) in (True, False)


# --- valid filters ---------------------------------------------------------------------------


@FUZZ
@given(valid_filters)
@example({"x') OR 1=1 --": "v"})
def test_every_valid_filter_compiles_to_bound_sql(pg, flt):
    flt = validate_filter(flt)
    check_sqlite(flt)
    check_postgres(flt, pg)
    try:
        compile_where(flt)
    except FilterError:
        pass


def test_a_filter_argument_that_is_not_utf8_is_one_line(tmp_path):
    """A byte that is not UTF-8 in ``--filter`` (Python reads it as a lone surrogate) used to
    reach SQLite and end in a UnicodeEncodeError traceback."""
    env = {**os.environ, "PYTHONPATH": SRC}
    db = str(tmp_path / "kb.db")
    base = [sys.executable, "-m", "kbcli", "--db", db]
    assert subprocess.run([*base, "add", "hello", "--meta", "a=1"], env=env).returncode == 0
    for expr in (b"\xff=1", b"a=\xff", b"a>\xff"):
        done = subprocess.run([*base, "list", "--filter", expr], env=env, capture_output=True)
        err = done.stderr.decode("utf-8", "replace").strip()
        assert done.returncode == 2 and "Traceback" not in err, err
        assert len(err.splitlines()) == 1 and "UTF-8" in err, err
