"""The agent tools: schema forms, citations, argument validation, never raising."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from kbcli import KnowledgeBase, KnowledgeSearchTool, SimpleEmbedder, SQLiteStore
from kbcli.tools import (
    MAX_K,
    NO_CHUNK,
    NO_FILE,
    NO_QUERY,
    NO_RESULTS,
    KnowledgeGetTool,
    KnowledgeStatsTool,
    knowledge_tools,
)


@pytest.fixture
def kb(tmp_path):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=SimpleEmbedder())
    kb.add(
        "Click Reset password on the Security page.",
        {"source": "/docs/guide.pdf", "page": 3, "heading": "Account > Security"},
        id="chunk-1",
    )
    kb.add("Invoices are due in thirty days.", {"source": "/docs/billing.md"}, id="chunk-2")
    kb.add("A note without a source about passwords.", id="chunk-3")
    yield kb
    kb.close()


def test_schema_forms(kb):
    tool = kb.as_tool()
    schema = tool.input_schema
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    assert schema["properties"]["k"]["maximum"] == MAX_K
    assert schema["properties"]["mode"]["enum"] == ["keyword", "semantic", "hybrid"]
    assert tool.parameters == schema
    standalone = tool.json_schema()
    assert standalone["title"] == "knowledge_search" and standalone["type"] == "object"
    assert standalone["$schema"].startswith("https://json-schema.org/")
    openai = tool.to_openai_tool()
    assert openai == {
        "type": "function",
        "function": {
            "name": "knowledge_search",
            "description": tool.description,
            "parameters": schema,
        },
    }
    json.dumps([t.to_openai_tool() for t in knowledge_tools(kb)])  # all JSON-ready


def test_schema_validates_with_jsonschema(kb):
    jsonschema = pytest.importorskip("jsonschema")
    for tool in knowledge_tools(kb):
        jsonschema.Draft202012Validator.check_schema(tool.json_schema())


def test_citations_name_source_page_heading_and_id(kb):
    tool = kb.as_tool()
    result = tool.call({"query": "reset password", "k": 3, "mode": "keyword"})
    assert not result.is_error
    first = result.text.splitlines()[0]
    assert first == (
        "1. Click Reset password on the Security page. (source: /docs/guide.pdf, page 3, "
        "heading: Account > Security; id: chunk-1)"
    )
    assert result.citations[0].to_dict() == {
        "number": 1,
        "id": "chunk-1",
        "source": "/docs/guide.pdf",
        "page": 3,
        "heading": "Account > Security",
    }
    assert "(id: chunk-3)" in result.text  # no source: the id alone


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, NO_QUERY),
        ({"query": "   "}, NO_QUERY),
        ({"query": 42}, "Error: query must be a non-empty string"),
        ({"query": "x" * 2001}, "Error: query is too long (2001 characters; at most 2000)"),
        ({"query": "x", "k": 0}, "Error: k must be a whole number from 1 to 50, got 0"),
        ({"query": "x", "k": 51}, "Error: k must be a whole number from 1 to 50, got 51"),
        ({"query": "x", "k": True}, "Error: k must be a whole number"),
        ({"query": "x", "k": 2.5}, "Error: k must be a whole number"),
        ({"query": "x", "mode": "fuzzy"}, "Error: Unknown search mode 'fuzzy'"),
        ({"query": "x", "filter": {"$nope": 1}}, "Error: invalid filter: Unknown filter operator"),
        ({"query": "x", "filter": "a=b"}, "Error: invalid filter: A filter must be a dict"),
        ({"query": "x", "scope": {}}, "Error: Unknown argument 'scope': knowledge_search takes"),
    ],
)
def test_bad_arguments_give_an_error_text(kb, arguments, expected):
    result = kb.as_tool().call(arguments)
    assert result.is_error and result.text.startswith(expected), result.text
    assert "\n" not in result.text and "Traceback" not in result.text


def test_arguments_as_json_text_and_good_variants(kb):
    tool = kb.as_tool()
    assert tool.call('{"query": "invoices", "k": 1, "mode": "keyword"}').citations[0].id == (
        "chunk-2"
    )
    assert tool.call("{not json").text == "Error: arguments are not valid JSON"
    assert tool.call("[1, 2]").text == "Error: arguments must be an object, got list"
    assert tool.call({"query": "invoices", "k": 2.0, "mode": "SPARSE"}).citations
    assert tool.call({"query": "zzzqqq", "mode": "keyword"}).text == NO_RESULTS
    narrowed = tool.call({"query": "password", "filter": {"source": "/docs/guide.pdf"}})
    assert [c.id for c in narrowed.citations] == ["chunk-1"]


def test_the_tool_never_raises(caplog):
    class Broken:
        def search_with(self, query, options):
            raise RuntimeError("database exploded at /secret/path")

    tool = KnowledgeSearchTool(Broken())
    with caplog.at_level(logging.ERROR, logger="kbcli.tools"):
        text = asyncio.run(tool.run("anything"))
    assert text == "Error: knowledge_search failed unexpectedly (RuntimeError); see the server log"
    assert "exploded" in caplog.text  # the details go to the log, not to the model


def test_as_tool_with_a_filter_cannot_be_widened(kb):
    tool = kb.as_tool(filter={"source": "/docs/billing.md"}, default_k=5)
    for arguments in (
        {"query": "password reset invoices"},
        {"query": "password", "filter": {"$or": [{"source": "/docs/guide.pdf"}, {}]}},
        {"query": "password", "filter": {"source": {"$ne": "/docs/billing.md"}}},
    ):
        result = tool.call({**arguments, "mode": "keyword"})
        assert {c.id for c in result.citations} <= {"chunk-2"}, result.text


def test_knowledge_get_by_id_and_path(kb, tmp_path):
    from kbcli.ingest import SimpleTextChunker

    kb.ingestor._chunker = SimpleTextChunker(120, 30)
    doc = tmp_path / "long.md"
    doc.write_text(" ".join(f"word{n}" for n in range(400)), encoding="utf-8")
    kb.ingest_file(doc)
    get = KnowledgeGetTool(kb)
    chunk = get.call({"id": "chunk-1"})
    assert chunk.text.splitlines() == [
        "[source: /docs/guide.pdf, page 3, heading: Account > Security; id: chunk-1]",
        "Click Reset password on the Security page.",
    ]
    assert get.call({"id": "missing"}).text == NO_CHUNK
    whole = get.call({"path": str(doc)})
    body = whole.text.split("\n", 1)[1]
    assert " ".join(body.split()) == " ".join(f"word{n}" for n in range(400))
    assert whole.text.startswith(f"[source: {doc.resolve()}; lines 1-")
    part = get.call({"path": str(doc), "start_line": 2, "end_line": 3})
    assert "; lines 2-3 of" in part.text and "(more: start_line=4)" in part.text
    assert len(part.text.splitlines()) == 3
    assert get.call({"path": "/docs/none.md"}).text == NO_FILE
    assert get.call({"path": str(doc), "start_line": 5, "end_line": 2}).is_error
    assert get.call({"id": "chunk-1", "start_line": 2}).is_error
    assert get.call({"id": "chunk-1", "path": "x"}).is_error
    assert get.call({"text": "x"}).text.startswith("Error: Unknown argument 'text'")


def test_knowledge_stats(kb):
    text = KnowledgeStatsTool(kb).call({}).text
    assert text.splitlines()[:2] == ["chunks: 3", "sources: 2"]
    assert "embedder: simple/" in text
    scoped = KnowledgeStatsTool(kb.scoped({"source": "/docs/billing.md"})).call({}).text
    assert scoped.splitlines()[:2] == ["chunks: 1", "sources: 1"]
    assert KnowledgeStatsTool(kb).call({"verbose": True}).is_error


def test_in_memory_knowledge_base_works_too():
    kb = KnowledgeBase()
    kb.add("public password reset guide", {"team": "public", "source": "/p.md"})
    kb.add("secret password vault keys", {"team": "secret", "source": "/s.md"})
    search, get, stats = knowledge_tools(kb, filter={"team": "public"})
    for mode in ("keyword", "semantic", "hybrid"):
        text = search.call({"query": "password vault", "k": 5, "mode": mode}).text
        assert "public" in text and "secret" not in text
    assert get.call({"path": "/s.md"}).text == NO_FILE
    assert get.call({"path": "/p.md"}).text.endswith("public password reset guide")
    assert stats.call({}).text.startswith("chunks: 1")
