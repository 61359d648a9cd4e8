"""The agent tools: schema forms, citations, argument validation, never raising."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from extras import need
from kbcli import KnowledgeBase, KnowledgeSearchTool, SimpleEmbedder, SQLiteStore
from kbcli.agent.tools.read import (
    MAX_K,
    NO_CHUNK,
    NO_FILE,
    NO_QUERY,
    NO_RESULTS,
    KnowledgeGetTool,
    KnowledgeStatsTool,
    knowledge_tools,
)
from sample_docs import lined_file


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
    jsonschema = need("jsonschema")
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
        "location": "/docs/guide.pdf#page=3",  # a PDF's hit is on a page, as kb search says
        "page": 3,
        "heading": "Account > Security",
        "line": None,
        "line_start": None,
        "line_end": None,
        "note_by": None,
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
    with caplog.at_level(logging.ERROR, logger="kbcli.agent.tools.read"):
        text = asyncio.run(tool.run("anything"))
    assert text == "Error: knowledge_search failed unexpectedly (RuntimeError); see the server log"
    assert "exploded" in caplog.text  # the details go to the log, not to the model


def test_run_has_the_reference_signature(kb):
    """``run(query=None, k: int = 3, mode=None, **kwargs)``, as the reference writes it; the
    schema's default is the same 3."""
    import inspect

    for method in (KnowledgeSearchTool.run, KnowledgeSearchTool.run_sync):
        parameters = inspect.signature(method).parameters
        assert list(parameters)[:4] == ["self", "query", "k", "mode"]
        assert parameters["k"].default == 3 and parameters["k"].annotation in (int, "int")
        assert parameters["query"].default is None and parameters["mode"].default is None
    tool = kb.as_tool()
    assert tool.input_schema["properties"]["k"]["default"] == 3
    for n in range(5):
        kb.add(f"Password rotation note number {n}.", {"source": f"/notes/{n}.md"})
    assert len(asyncio.run(tool.run("password rotation", mode="keyword")).splitlines()) == 3
    assert len(tool.run_sync("password rotation", mode="keyword").splitlines()) == 3
    assert len(asyncio.run(tool.run("password rotation", k=5)).splitlines()) == 5
    assert asyncio.run(tool.run(input="password rotation", k=1)).startswith("1. ")
    assert asyncio.run(tool.run("x", k=0)).startswith("Error: k must be a whole number")


def test_as_tool_with_a_filter_cannot_be_widened(kb):
    tool = kb.as_tool(filter={"source": "/docs/billing.md"}, default_k=5)
    for arguments in (
        {"query": "password reset invoices"},
        {"query": "password", "filter": {"$or": [{"source": "/docs/guide.pdf"}, {}]}},
        {"query": "password", "filter": {"source": {"$ne": "/docs/billing.md"}}},
    ):
        result = tool.call({**arguments, "mode": "keyword"})
        assert {c.id for c in result.citations} <= {"chunk-2"}, result.text


@pytest.fixture
def lined(tmp_path):
    """``lined.md`` indexed by a sync (which records it in the file ledger), small chunks."""
    from kbcli.ingest import StructureAwareChunker
    from kbcli.ingest.sync import sync

    folder = tmp_path / "docs"
    folder.mkdir()
    path, lines = lined_file(folder)
    kb = KnowledgeBase(
        store=SQLiteStore(tmp_path / "lined.db"),
        embedder=SimpleEmbedder(),
        chunker=StructureAwareChunker(160, 30),
    )
    sync(kb, [folder])
    yield kb, path.resolve(), lines
    kb.close()


def _body(text):
    return text.split("\n")[1:]


def test_knowledge_get_numbers_the_files_own_lines(lined):
    kb, path, lines = lined
    get = KnowledgeGetTool(kb)
    whole = get.call({"path": str(path)})
    assert not whole.is_error, whole.text
    assert whole.text.split("\n")[0] == f"[source: {path}; lines 1-33 of 33]"
    assert _body(whole.text) == [f"{n:>2}  {line}" for n, line in enumerate(lines, 1)]
    part = get.call({"path": str(path), "start_line": 18, "end_line": 23})
    assert part.text.split("\n")[0] == f"[source: {path}; lines 18-23 of 33 (more: start_line=24)]"
    assert _body(part.text) == [
        "18  " + lines[17],
        "19  ",
        "20  ",
        "21  ",
        "22  ",
        "23  " + lines[22],
    ]
    assert part.citations[0].line == 18 and part.citations[0].line_end == 23
    past = get.call({"path": str(path), "start_line": 34})
    assert past.is_error and past.text == (
        f"Error: start_line 34 is past the end of {path} (33 lines)"
    )
    assert get.call({"path": "/docs/none.md"}).text == NO_FILE
    assert get.call({"path": str(path), "start_line": 5, "end_line": 2}).is_error
    assert get.call({"id": "x", "start_line": 2}).is_error
    assert get.call({"id": "x", "path": "y"}).is_error
    assert get.call({"text": "x"}).text.startswith("Error: Unknown argument 'text'")


def test_a_hits_line_as_start_line_gives_that_lines_text(lined):
    """What an agent does: search, then read the file from the line the hit cites; the same
    text as ``kb get PATH:LINE``. The hit cites the line holding its word (the file's own
    number, past folded runs of blank lines and CRLF endings), and the lines its passage
    covers."""
    from kbcli.agent.get import read_target

    kb, path, lines = lined
    search, get, _ = knowledge_tools(kb)
    for n in (5, 9, 17, 26, 33):
        answer = search.call({"query": f"marker{n}", "k": 1, "mode": "keyword"})
        (hit,) = answer.citations
        assert hit.source == str(path) and hit.line == n  # the very line holding marker{n}
        start, end = hit.line_start, hit.line_end
        span = f"lines {start}-{end}"
        assert f"(source: {path}, {span if start == n else f'line {n} ({span})'}, " in answer.text
        assert start <= n <= end  # the passage covers the line holding its word
        assert hit.to_dict()["location"] == f"{path}:{n}"
        read = get.call({"path": hit.source, "start_line": n, "end_line": n})
        assert _body(read.text) == [f"{n}  {lines[n - 1]}"]
        read = get.call({"path": hit.source, "start_line": start, "end_line": end})
        assert not read.is_error, read.text
        expected = [(m, lines[m - 1]) for m in range(start, end + 1)]
        width = len(str(end))
        assert _body(read.text) == [f"{m:>{width}}  {t}" for m, t in expected]
        # the chunk's text starts inside the line it says it starts on
        assert " ".join(hit.text.split()[:3]) in lines[start - 1]
        shown = read_target(kb, f"{path}:{start}:{end - start + 1}")
        assert shown.lines == expected


def test_chunk_ids_keep_working(lined):
    kb, path, _ = lined
    doc = next(iter(kb.store.iter_documents(source=str(path))))
    chunk = KnowledgeGetTool(kb).call({"id": doc.id})
    label = chunk.text.split("\n", 1)[0]
    assert label.startswith(f"[source: {path}, line") and label.endswith(f"id: {doc.id}, chunk 0]")
    assert chunk.text.split("\n", 1)[1] == doc.text
    assert KnowledgeGetTool(kb).call({"id": "missing"}).text == NO_CHUNK


def test_long_lines_are_cut_never_wrapped(tmp_path):
    from kbcli.ingest.sync import sync

    folder = tmp_path / "docs"
    folder.mkdir()
    long = "word " * 2000
    (folder / "wide.md").write_text(f"# Wide\n\n{long}\nafter the long line\n", encoding="utf-8")
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=SimpleEmbedder())
    sync(kb, [folder])
    try:
        get = KnowledgeGetTool(kb, line_width=100)
        text = get.call({"path": str(folder / "wide.md")}).text
        rows = _body(text)
        assert len(rows) == 4 and text.split("\n")[0].endswith("; lines 1-4 of 4]")
        assert rows[2] == f"3  {long[:100]} [... {len(long) - 100} more characters cut]"
        assert rows[3] == "4  after the long line"
        # a character budget pages by whole lines, with the line to go on from
        small = KnowledgeGetTool(kb, max_chars=150).call({"path": str(folder / "wide.md")})
        assert small.text.split("\n")[0].endswith("lines 1-2 of 4 (more: start_line=3)]")
        assert len(small.text) < 300
        few = KnowledgeGetTool(kb, max_lines=3).call({"path": str(folder / "wide.md")})
        assert few.text.split("\n")[0].endswith("lines 1-3 of 4 (more: start_line=4)]")
    finally:
        kb.close()


def test_paging_through_a_pdf_parses_it_once(tmp_path):
    """A PDF's lines are those its parse gives (as ``kb get`` shows them); reading it page by
    page reuses that parse while the file's bytes stay the same."""
    from cli_helpers import minimal_pdf
    from kbcli.agent.get import LinesCache
    from kbcli.ingest.sync import sync

    folder = tmp_path / "docs"
    folder.mkdir()
    pdf = folder / "manual.pdf"
    pdf.write_bytes(minimal_pdf("Reset the password from the manual."))
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=SimpleEmbedder())
    sync(kb, [folder])
    loader = kb.ingestor.loader
    parses = []
    parse = loader.load
    loader.load = lambda path: parses.append(path) or parse(path)
    try:
        get = KnowledgeGetTool(kb, cache=LinesCache())
        texts = [get.call({"path": str(pdf), "start_line": 1, "end_line": n}).text for n in (1, 2)]
        assert all("Reset the password from the manual." in text for text in texts), texts
        assert texts[0].startswith(f"[source: {pdf.resolve()}; lines 1-1 of ")
        assert len(parses) == 1
        pdf.write_bytes(minimal_pdf("Another text now."))  # other bytes: not the kept parse
        assert "indexed chunks" in get.call({"path": str(pdf)}).text.split("\n")[0]
        assert len(parses) == 1
    finally:
        kb.close()


def test_a_changed_file_gives_its_indexed_chunks(lined):
    kb, path, lines = lined
    get = KnowledgeGetTool(kb)
    assert get.call({"path": str(path)}).text.startswith(f"[source: {path}; lines 1-33 of 33]")
    path.write_text("rewritten since\n", encoding="utf-8")  # what was read is not served again
    text = get.call({"path": str(path), "start_line": 17}).text
    header, first = text.split("\n")[:2]
    assert header.startswith(f"[source: {path}; indexed chunks covering lines ")
    assert "the file's own lines are not available" in header
    assert first.startswith("[line ") and "; id: " in first
    assert "marker17" in text and "marker1 " not in text  # chunks from line 17 on
    assert "rewritten" not in text


def test_a_scope_that_hides_part_of_a_file_never_reads_it_from_disk(lined):
    """The file is unchanged, but the scope shows only its first chunk: the answer holds that
    chunk alone, with the same header as for a changed file; a scope showing none of it
    answers like an unknown path."""
    kb, path, lines = lined
    part = KnowledgeGetTool(kb.scoped({"chunk_index": 0})).call({"path": str(path)})
    assert not part.is_error
    assert "indexed chunks covering lines 1-" in part.text.split("\n")[0]
    (first,) = [
        d for d in kb.store.iter_documents(source=str(path)) if d.metadata["chunk_index"] == 0
    ]
    assert part.text.split("\n", 2)[2] == first.text
    assert "marker33" not in part.text
    hidden = KnowledgeGetTool(kb.scoped({"chunk_index": 999})).call({"path": str(path)})
    assert hidden.text == NO_FILE
    whole = KnowledgeGetTool(kb.scoped({"source": str(path)})).call({"path": str(path)})
    assert whole.text.startswith(f"[source: {path}; lines 1-33 of 33]")


def test_chunks_without_lines_are_numbered_by_their_place(kb):
    kb.add("first fact about /notes", {"source": "/notes"}, id="n1")
    kb.add("second fact about /notes", {"source": "/notes"}, id="n2")
    text = KnowledgeGetTool(kb).call({"path": "/notes"}).text
    assert text.split("\n")[1:] == [
        "[line 1; id: n1]",
        "first fact about /notes",
        "[line 2; id: n2]",
        "second fact about /notes",
    ]
    get = KnowledgeGetTool(kb)
    assert get.call({"path": "/notes", "start_line": 2}).text.endswith("second fact about /notes")
    first = get.call({"path": "/notes", "end_line": 1}).text
    header = "[source: /notes; indexed chunks covering lines 1-1 (more: start_line=2); "
    assert first.startswith(header) and "second" not in first
    bounded = KnowledgeGetTool(kb, max_lines=1).call({"path": "/notes"}).text
    assert bounded.startswith(header) and "second" not in bounded


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
