"""Big filters: thousands of ``--in`` folders, ``$in`` values and ``$or`` branches.

SQLite refuses an expression deeper than 1,000, and a flat chain of N ORs is N deep: ``kb
search --in`` given 1,000 times said "database error: Expression tree is too large" (exit 1),
and so did a library or agent filter with 1,000 ``$in`` values. Now the SQL groups long
chains (:func:`kbcli.filters.sql.balanced`), ``$in`` values go in one ``IN`` list, folders inside
another ``--in`` folder are merged, and a filter holds at most
:data:`~kbcli.filters.model.MAX_FILTER_CONDITIONS` conditions (PostgreSQL binds at most 65,535
parameters per statement): past that, one line naming the option, exit 2. Every store answers
exactly what :func:`kbcli.filters.model.matches` passes.
"""

from __future__ import annotations

import os

import pytest

from cli_helpers import run, run_json, seed
from extras import need
from kbcli import Document, KnowledgeBase, SimpleEmbedder
from kbcli.errors import FilterError
from kbcli.filters.model import MAX_FILTER_CONDITIONS, MAX_FILTER_DEPTH, matches, validate_filter
from kbcli.filters.sql import balanced, compile_sql, minimal_prefixes
from kbcli.filters.syntax import under_folders

LIMIT = MAX_FILTER_CONDITIONS
FOLDERS = 40  # indexed folders /proj/g0 ... /proj/g39, three files each


def corpus() -> list[Document]:
    embed = SimpleEmbedder()
    docs = []
    for i in range(FOLDERS * 3):
        text = f"common alpha word{i % 7} in file {i}"
        meta = {"source": f"/proj/g{i % FOLDERS}/f{i}.md", "n": i, "lang": f"l{i % 5}"}
        docs.append(Document(f"d{i:04d}", text, meta, embedding=embed.embed_query(text)))
    return docs


def big_filters() -> dict[str, dict]:
    """Filters of exactly LIMIT conditions that pass a known part of the corpus."""
    wanted = [f"/proj/g{i}/f{i + FOLDERS}.md" for i in range(0, FOLDERS, 3)]
    paths = wanted + [f"/nowhere/{i}.md" for i in range(LIMIT - len(wanted))]
    folders = [f"/proj/g{i}/" for i in range(0, FOLDERS, 4)]
    prefixes = folders + [f"/nowhere/{i}/" for i in range(LIMIT - len(folders))]
    numbers = list(range(0, 2 * LIMIT, 2))
    return {
        "$in of paths": {"source": {"$in": paths}},
        "$or of prefixes": {"$or": [{"source": {"$prefix": p}} for p in prefixes]},
        "$nin of mixed": {"n": {"$nin": [*numbers[: LIMIT - 3], "7", True, None]}},
        "nested": deep_ok(),
    }


def deep_ok() -> dict:
    """A filter nested MAX_FILTER_DEPTH levels deep, alternating $or and $and."""
    deep: dict = {"n": {"$lt": 60}}
    for level in range(MAX_FILTER_DEPTH - 1):
        if level % 2:
            deep = {"$and": [deep, {"n": {"$gte": 0}}], "lang": {"$ne": "zz"}}
        else:
            deep = {"$or": [deep, {"n": 7}]}
    return deep


def check_store(store) -> None:
    """Counts, listings and keyword and dense searches under each big filter equal what
    ``matches`` passes; one condition more is a FilterError, never a database error."""
    docs = corpus()
    store.add(docs)
    kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
    for name, flt in big_filters().items():
        expected = {d.id for d in docs if matches(d.metadata, flt)}
        assert 0 < len(expected) < len(docs), name
        assert store.count(flt) == len(expected), name
        assert {d.id for d in store.iter_documents(flt)} == expected, name
        for mode in ("keyword", "semantic"):
            hits = kb.search("common alpha", k=len(docs), mode=mode, filter=flt, dedupe=False)
            assert {h.document.id for h in hits} == expected, (name, mode)
    over = {"source": {"$in": [f"/x/{i}" for i in range(LIMIT + 1)]}}
    for call in (lambda: store.count(over), lambda: kb.search("common", filter=over)):
        with pytest.raises(FilterError, match=f"holds {LIMIT + 1} conditions.*at most {LIMIT}"):
            call()


@pytest.mark.slow
def test_sqlite_store_answers_big_filters(tmp_path):
    from kbcli.stores import SQLiteStore

    store = SQLiteStore(tmp_path / "kb.db")
    try:
        check_store(store)
    finally:
        store.close()


@pytest.mark.slow
def test_postgres_store_answers_big_filters(pg_dsn, pg_table):
    """65,535 bind parameters per statement: LIMIT conditions of the widest kind fit."""
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, pg_table)
    try:
        check_store(store)
    finally:
        store.close()


@pytest.mark.slow
def test_chroma_store_answers_big_filters(tmp_path):
    need("chromadb")
    from kbcli.stores.chroma.store import ChromaStore

    store = ChromaStore(tmp_path / "chroma")
    try:
        check_store(store)
    finally:
        store.close()


def test_chroma_store_answers_an_or_of_a_thousand_values(tmp_path):
    need("chromadb")
    from kbcli.stores.chroma.store import ChromaStore

    store = ChromaStore(tmp_path / "chroma")
    try:
        docs = corpus()
        store.add(docs)
        flt = {"$or": [{"lang": f"l{i}"} for i in range(3, 1003)]}
        kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
        hits = kb.search("common alpha", k=len(docs), mode="semantic", filter=flt, dedupe=False)
        assert {h.document.id for h in hits} == {d.id for d in docs if matches(d.metadata, flt)}
    finally:
        store.close()


# --- the SQL ----------------------------------------------------------------------------------


def test_long_chains_are_grouped_not_deep():
    parts = [f"t{i}" for i in range(10_000)]
    sql = balanced(parts, " OR ")
    assert sql.replace("(", "").replace(")", "").split(" OR ") == parts  # order kept
    depth = deepest = 0
    for ch in sql:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    assert deepest == 2  # 64 x 64 x 64 > 10,000 (the caller brackets the whole)
    assert balanced(["only"], " AND ") == "only"


def test_in_values_share_one_in_list_per_type():
    sql, params = compile_sql({"k": {"$in": ["a", "b", 1, 2.5, True, None]}})
    assert sql.count(" IN (?, ?)") == 2  # texts, numbers
    assert "= 'true'" in sql and "= 'null'" in sql
    assert len(params) == 2 + 2 + 2 + 2 + 1 + 1


def test_a_filter_nested_too_deep_is_refused_not_a_recursion_error():
    flt: dict = {"lang": "en"}
    for _ in range(5000):
        flt = {"$and": [flt]}
    with pytest.raises(FilterError, match=f"more than {MAX_FILTER_DEPTH} levels"):
        validate_filter(flt)
    ok: dict = {"lang": "en"}
    for _ in range(MAX_FILTER_DEPTH - 1):
        ok = {"$or": [ok]}
    assert validate_filter(ok) == ok


def test_folders_inside_other_folders_are_merged():
    assert minimal_prefixes(["/a/b/", "/a/", "/ab/", "/a/", "/a/c/d/"]) == ["/a/", "/ab/"]
    sep = os.sep
    got = under_folders([f"{sep}d{sep}x", f"{sep}d", f"{sep}e", f"{sep}d{sep}y"])
    assert got == {"$or": [{"source": {"$prefix": f"{sep}d{sep}"}},
                           {"source": {"$prefix": f"{sep}e{sep}"}}]}  # fmt: skip


# --- kb search --in ---------------------------------------------------------------------------


@pytest.fixture
def folders():
    seed([(d.text, d.metadata) for d in corpus()])


def test_in_given_2000_times_searches(folders):
    """Was: "Error: database error: Expression tree is too large (maximum depth 1000)", exit 1."""
    args = ["search", "common alpha", "--by", "chunk", "-k", "500", "--json"]
    for i in range(2000):
        args += ["--in", f"/proj/g{i}" if i < 4 else f"/elsewhere/h{i}"]
    hits, _ = run_json(*args)
    assert len(hits) == 4 * 3
    assert {h["metadata"]["source"].split("/")[2] for h in hits} == {"g0", "g1", "g2", "g3"}


def test_in_nested_folders_count_once(folders):
    args = ["search", "common alpha", "--by", "chunk", "-k", "500", "--json", "--in", "/proj"]
    for i in range(LIMIT + 10):
        args += ["--in", f"/proj/g{i}"]
    hits, _ = run_json(*args)
    assert len(hits) == FOLDERS * 3


def test_in_past_the_limit_is_one_line_naming_the_option(folders):
    args = ["search", "common alpha"]
    for i in range(LIMIT + 1):
        args += ["--in", f"/elsewhere/h{i}"]
    result = run(*args)
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: --in was given {LIMIT + 1} folders")
    assert f"at most {LIMIT}" in lines[0]


def test_filter_past_the_limit_is_one_line(folders):
    values = ",".join(f"v{i}" for i in range(LIMIT + 1))
    result = run("search", "common", "--filter", f"lang={values}")
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"holds {LIMIT + 1} conditions" in lines[0], result.stderr


def test_agent_tool_with_a_deeply_nested_filter(folders):
    """A hundred nested $and levels fit the tool's 4,000 characters and made SQLite's parser
    overflow: the model got "knowledge_search failed unexpectedly (OperationalError)"."""
    from kbcli.agent.tools.read import KnowledgeSearchTool

    kb = KnowledgeBase.open(create=False, embedder=SimpleEmbedder())
    try:
        tool = KnowledgeSearchTool(kb)
        deep: dict = {"n": 7}
        for _ in range(100):
            deep = {"$and": [deep]}
        answer = tool.run_sync("common alpha", 5, "keyword", filter=deep)
        assert answer.startswith("Error: ") and f"more than {MAX_FILTER_DEPTH} levels" in answer
        assert "\n" not in answer
        assert tool.run_sync("common alpha", 5, "keyword", filter=deep_ok()).startswith("1. ")
    finally:
        kb.close()
