"""Injection (issue 17, matrix item 7): hostile strings as filter keys, values and ``--in``
paths, through the CLI and the Python API on SQLite and InMemory. Each is rejected with one
clear line (exit 2 / FilterError) or matched literally (exactly what the pure-Python evaluator
``kbcli.filters.model.matches`` says); tables and row counts never change."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run
from extras import need
from kbcli import Document, InMemoryStore, SQLiteStore
from kbcli.errors import FilterError
from kbcli.filters.model import matches, validate_filter
from kbcli.filters.syntax import parse_filter_expressions

PAYLOADS = [
    # quotes
    "'", '"', "''", "' OR '1'='1", "' OR 1=1 --", '" OR ""="', "a'b", 'a"b', "`", "`x`",
    # comments
    "--", "/*", "*/", "/* x */ 1", "#", "-- c\n",
    # statements
    "; DROP TABLE chunks; --", "'; DROP TABLE chunks; --", "x'); DROP TABLE chunks; --",
    '"); DROP TABLE chunks; --', "1; DELETE FROM vectors", "'; ATTACH DATABASE 'x.db' AS x; --",
    "'; PRAGMA writable_schema=1; --", "' UNION SELECT * FROM sqlite_master --", "1 OR 1=1",
    "1) OR (1=1", "team') OR TRUE OR ('",
    # unicode quotes and look-alikes
    "\u2018 OR \u20181\u2019=\u20181", "\u201cx\u201d", "\uff07", "\u02bc", "\u201b",
    "\u275b", "\u2019; DROP TABLE chunks; --", "\u00a0team",
    # NUL and control characters
    "\x00", "a\x00b", "\x00'; DROP TABLE chunks; --", "\n", "\r\n", "\t", "\x1b[31m",
    # 10 KB keys and values
    "k" * 10240, "'" * 10240, "\u00e9" * 5000,
    # JSON-path tricks
    'a"."b', "$..", "$", "$.team", "$[0]", "[0]", "a[0]", "a.b", "a..b", ".", "..", "*", "$.*",
    "a\\b", "\\", '\\"', "a'.'b", "$[#-1]", "@", "->", "->>", "team->>'$'",
    # LIKE, format and parameter markers
    "%", "_", "%_%", "%s", "%(x)s", "{}", "{0}", "?", ":name", "$1", "@p",
    # numbers, operators, reserved words
    "1e309", "-0", "NaN", "9" * 30, "0x10", " ", "", "team ", "source", "$eq", "$or", "NULL",
    "null", "true",
]  # fmt: skip


def _valid_key(key: str) -> bool:
    try:
        validate_filter({key: "v"})
    except FilterError:
        return False
    return True


def corpus() -> list[Document]:
    """Plain documents plus one per payload that holds it as a value and (when it is a valid
    key) as a key, so literal matches have something to find."""
    docs = [
        Document("plain", "alpha common words", {"team": "ops", "year": 2024}),
        Document("other", "alpha other words", {"team": "dev"}),
    ]
    for i, p in enumerate(PAYLOADS):
        # SQLite's JSON functions end a stored string at NUL (known limit, see filters.py;
        # filter values with NUL are refused), so NUL payloads are queried, never stored.
        meta = {"team": p, "n": i} if "\0" not in p else {"n": i}
        if _valid_key(p) and p not in ("team", "n"):
            meta[p] = "v"
        docs.append(Document(f"p{i}", f"alpha payload {i}", meta))
    return docs


def filters_for(p: str) -> list[dict]:
    out = [
        {p: "v"},
        {"team": p},
        {"team": {"$in": [p, "ops"]}},
        {"team": {"$ne": p}},
        {p: {"$exists": True}},
        {"$or": [{"team": p}, {p: "v"}]},
    ]
    if p:
        out.append({"team": {"$prefix": p}})
    return out


def snapshot(db: Path) -> tuple:
    conn = sqlite3.connect(db)
    try:
        master = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY 2"
        ).fetchall()
        counts = {
            name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
            for (kind, name, _, _) in master
            if kind == "table"
        }
    finally:
        conn.close()
    return master, counts


def vec(i: int) -> list[float]:
    return [1.0, float(i % 7), float(i % 3) + 0.5]


@pytest.fixture
def sqlite_db(tmp_path) -> Path:
    db = tmp_path / "kb.db"  # KB_DB (conftest)
    with SQLiteStore(db) as store:
        docs = corpus()
        store.add(docs, [vec(i) for i in range(len(docs))])
    return db


def _check_store(store, docs: list[Document]) -> tuple[int, int]:
    rejected = literal = 0
    for p in PAYLOADS:
        for f in filters_for(p):
            try:
                listed = {d.id for d in store.iter_documents(f)}
            except FilterError as exc:
                assert "\n" not in str(exc)
                rejected += 1
                with pytest.raises(FilterError):
                    store.keyword_search("alpha", k=500, filter=f)
                with pytest.raises(FilterError):
                    store.search(vec(1), k=500, filter=f)
                continue
            literal += 1
            want = {d.id for d in docs if matches(d.metadata, f)}
            assert listed == want, (p, f)
            assert store.count(f) == len(want), (p, f)
            assert {h.document.id for h in store.keyword_search("alpha", k=500, filter=f)} == want
            assert {h.document.id for h in store.search(vec(1), k=500, filter=f)} == want
    return rejected, literal


def test_payloads_on_the_sqlite_api_are_rejected_or_literal_and_change_nothing(sqlite_db):
    assert len(PAYLOADS) >= 60
    before = snapshot(sqlite_db)
    with SQLiteStore(sqlite_db) as store:
        docs = list(store.iter_documents())
        rejected, literal = _check_store(store, docs)
        for p in PAYLOADS:  # deletes that match nothing literally delete nothing
            try:
                assert store.delete_where({p: "no such value"}) == 0
                assert store.delete_where({"team": p + "\u2603 absent"}) == 0
            except FilterError:
                pass
    assert snapshot(sqlite_db) == before
    print(f"\ninjection (sqlite api): {rejected} rejected, {literal} matched literally")


def test_payloads_on_the_memory_api_are_rejected_or_literal():
    store = InMemoryStore()
    docs = corpus()
    store.add(docs, [vec(i) for i in range(len(docs))])
    rejected, literal = _check_store(store, docs)
    assert len(store) == len(docs)
    print(f"\ninjection (memory api): {rejected} rejected, {literal} matched literally")


def _one_line_error(result) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout[-300:], result.stderr[-300:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-500:]


@pytest.mark.slow
def test_payloads_through_the_cli_are_rejected_or_literal_and_change_nothing(sqlite_db):
    before = snapshot(sqlite_db)
    with SQLiteStore(sqlite_db) as store:
        docs = list(store.iter_documents())
    outcomes = {"rejected": 0, "literal": 0}
    for p in PAYLOADS:
        for expr in (f"{p}=v", f"team={p}", f"team!={p}"):
            try:
                f = parse_filter_expressions([expr])
            except FilterError:
                f = None
            listed = run("--db", str(sqlite_db), "list", f"--filter={expr}", "--limit", "0",
                         "--json")  # fmt: skip
            if f is None or listed.exit_code == 2:
                _one_line_error(listed)
                outcomes["rejected"] += 1
                continue
            assert listed.exit_code == 0, (expr, listed.stderr)
            got = {d["id"] for d in json.loads(listed.stdout)} if listed.stdout.strip() else set()
            assert got == {d.id for d in docs if matches(d.metadata, f)}, expr
            outcomes["literal"] += 1
            found = run("--db", str(sqlite_db), "search", "alpha", "--mode", "keyword",
                        f"--filter={expr}", "-k", "500", "--json")  # fmt: skip
            assert found.exit_code == 0, (expr, found.stderr)
            json.loads(found.stdout)
        scoped = run("--db", str(sqlite_db), "search", "alpha", "--mode", "keyword",
                     f"--in={p}", "--json")  # fmt: skip
        if scoped.exit_code == 0:
            assert json.loads(scoped.stdout) == [] or p in ("", ".", " ")  # no file is there
        else:
            _one_line_error(scoped)
    assert snapshot(sqlite_db) == before
    print(f"\ninjection (cli): {outcomes['rejected']} rejected, {outcomes['literal']} literal")


def _open_other(kind: str, tmp_path: Path, request) -> object:
    if kind == "faiss":
        need("faiss")
        from kbcli.stores.faiss.store import FaissStore

        return FaissStore(dim=3, path=tmp_path / "f.db")
    if kind == "chroma":
        need("chromadb")
        from kbcli.stores.chroma.store import ChromaStore

        return ChromaStore(tmp_path / "c.chroma", db=tmp_path / "c.db")
    need("psycopg")
    from kbcli.stores.postgres import PostgresStore

    return PostgresStore(request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_table"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["faiss", "chroma", "postgres"])
def test_payloads_on_the_other_stores_are_rejected_or_literal(tmp_path, request, kind):
    store = _open_other(kind, tmp_path, request)
    try:
        docs = corpus()
        store.add(docs, [vec(i) for i in range(len(docs))])
        rejected, literal = _check_store(store, docs)
        assert store.count() == len(docs)
    finally:
        store.close()
    print(f"\ninjection ({kind} api): {rejected} rejected, {literal} matched literally")


@pytest.mark.parametrize("scope", [None, {"team": {"$in": ["ops", "dev"]}}])
def test_payloads_through_the_agent_tool_never_escape_its_scope(sqlite_db, scope):
    """The MCP server's knowledge_search tool: a caller's hostile filter is refused with one
    ``Error:`` line or ANDed literally with the tool's scope, never widening it."""
    from kbcli import KnowledgeBase
    from kbcli.agent.tools.read import knowledge_tools
    from kbcli.embedders import SimpleEmbedder

    before = snapshot(sqlite_db)
    kb = KnowledgeBase.open(sqlite_db, embedder=SimpleEmbedder())
    try:
        docs = list(kb.store.iter_documents())
        search = next(t for t in knowledge_tools(kb, filter=scope) if t.name == "knowledge_search")
        refused = passed = 0
        for p in PAYLOADS:
            for f in filters_for(p):
                result = search.call({"query": "alpha", "k": 50, "mode": "keyword", "filter": f})
                if result.is_error:
                    assert result.text.startswith("Error:") and "\n" not in result.text
                    refused += 1
                    continue
                passed += 1
                want = {d.id for d in docs if matches(d.metadata, f) and matches(d.metadata, scope)}
                got = {c.id for c in result.citations}
                assert got <= want and len(got) == min(50, len(want)), (p, f)
    finally:
        kb.close()
    assert snapshot(sqlite_db) == before
    print(f"\ninjection (agent tool, scope={scope}): {refused} refused, {passed} literal")
