"""``kb mcp --allow-write``: ``knowledge_add`` and ``knowledge_delete`` through the MCP SDK's
own client, over stdio (``kb mcp`` as a subprocess) and streamable HTTP with per-token
``write: true``; and the same tools in Python behind ``allow_write=True`` (issue 28).

The index: a folder ingested with ``kb ingest --meta tenant=acme`` (chunks of indexed files),
and notes added with ``kb add`` for acme and for globex.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from extras import need
from kbcli.agent.tools.read import NO_FILE
from mcp_clients import ClientThread, _env, _http_client, _start_http, _stdio_client, _stop

need("mcp")

WRITE_TOOLS = {"knowledge_add", "knowledge_delete"}
ACME_TOKEN = "acme-writer-token-9a8b7c6d"
GLOBEX_TOKEN = "globex-reader-token-1f2e3d4c"
ID = re.compile(r"Added note (\S+) ")


def kb(db: Path, home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), *args],
        env=_env(home),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp-write")
    home = root / "home"
    home.mkdir()
    files = root / "files"
    files.mkdir()
    (files / "handbook.md").write_text("# Handbook\n\nThe gateway is vpn.acme.example.\n")
    db = root / "kb.db"
    kb(db, home, "ingest", str(files), "--meta", "tenant=acme")
    globex = kb(db, home, "add", "globex zebracanary plans", "--meta", "tenant=globex")
    return {
        "db": db,
        "home": home,
        "file": str((files / "handbook.md").resolve()),
        "globex": globex,
    }


def names(client: ClientThread) -> set[str]:
    return {tool.name for tool in client.run(client.client.list_tools()).tools}


def search(client: ClientThread, query: str) -> str:
    text, is_error = client.call("knowledge_search", {"query": query, "mode": "keyword", "k": 10})
    assert not is_error, text
    return text


def chunk_ids(client: ClientThread, query: str) -> list[str]:
    return re.findall(r"\b[0-9a-f]{32}\b", search(client, query))


@pytest.fixture(scope="module")
def reader(index):
    client = _stdio_client(index["db"], index["home"], "--filter", "tenant=acme")
    yield client
    client.close()


@pytest.fixture(scope="module")
def writer(index):
    client = _stdio_client(index["db"], index["home"], "--filter", "tenant=acme", "--allow-write")
    yield client
    client.close()


def test_without_the_flag_no_write_tool_is_listed_or_callable(reader):
    assert names(reader) == {"knowledge_search", "knowledge_get", "knowledge_stats"}
    text, is_error = reader.call("knowledge_add", {"text": "sneaky note"})
    assert is_error and text.startswith("Error: Unknown tool 'knowledge_add'")


def test_a_note_added_is_found_by_the_next_search_with_the_scope_forced_on(writer, index):
    assert WRITE_TOOLS <= names(writer)
    text, is_error = writer.call(
        "knowledge_add", {"text": "The printer code is quetzal42.", "metadata": {"topic": "office"}}
    )
    assert not is_error, text
    new_id = ID.search(text)[1]
    assert new_id in search(writer, "quetzal42")
    got, _ = writer.call("knowledge_get", {"id": new_id})
    assert "quetzal42" in got
    # the scope's metadata was forced onto it
    con = sqlite3.connect(index["db"])
    try:
        (metadata,) = con.execute("SELECT metadata FROM chunks WHERE id = ?", (new_id,)).fetchone()
    finally:
        con.close()
    # the scope's metadata was forced onto it, and it is marked as a note of its writer
    assert json.loads(metadata) == {"topic": "office", "tenant": "acme", "note_by": "stdio"}


def test_writing_outside_the_scope_is_refused(writer):
    text, is_error = writer.call(
        "knowledge_add", {"text": "planted by acme", "metadata": {"tenant": "globex"}}
    )
    assert is_error
    assert "outside your scope" in text and "tenant" in text
    assert "planted" not in search(writer, "planted")
    for bad in ({"text": ""}, {"text": "x", "metadata": {"k": {"nested": 1}}}, {"note": "x"}):
        text, is_error = writer.call("knowledge_add", bad)
        assert is_error and text.startswith("Error: "), (bad, text)


def test_delete_only_a_visible_note(writer, index):
    # a globex note: invisible in acme's scope, so reported as unknown and kept
    text, is_error = writer.call("knowledge_delete", {"id": index["globex"]})
    assert is_error and text.startswith("Error: No note with that id")
    assert kb(index["db"], index["home"], "get", index["globex"])  # still there
    # a chunk of an indexed file: refused (it leaves with its file)
    (file_chunk,) = chunk_ids(writer, "gateway")
    text, is_error = writer.call("knowledge_delete", {"id": file_chunk})
    assert is_error and "indexed file" in text
    # its own note: deleted, and the next search no longer finds it
    added, _ = writer.call("knowledge_add", {"text": "Temporary wombat7 note."})
    note = ID.search(added)[1]
    assert note in search(writer, "wombat7")
    text, is_error = writer.call("knowledge_delete", {"id": note})
    assert not is_error and note in text
    assert note not in search(writer, "wombat7")


def test_http_tokens_write_only_with_write_true_and_the_flag(index, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{token: {ACME_TOKEN}, name: acme, filter: {{tenant: acme}}, write: true}}\n"
        f"  - {{token: {GLOBEX_TOKEN}, name: globex, filter: {{tenant: globex}}}}\n"
    )
    audit = tmp_path / "audit.jsonl"
    process, port = _start_http(
        index["db"], index["home"], tokens, "--allow-write", "--audit", str(audit)
    )
    url = f"http://127.0.0.1:{port}/mcp"
    acme = ClientThread(_http_client(url, ACME_TOKEN))
    globex = ClientThread(_http_client(url, GLOBEX_TOKEN))
    try:
        assert WRITE_TOOLS <= names(acme)
        assert not WRITE_TOOLS & names(globex)
        text, is_error = globex.call("knowledge_add", {"text": "globex tries"})
        assert is_error and "Unknown tool" in text
        added, is_error = acme.call("knowledge_add", {"text": "HTTP note about capybara9."})
        assert not is_error, added
        note = ID.search(added)[1]
        assert note in search(acme, "capybara9")
        assert note not in search(globex, "capybara9")  # forced tenant=acme: not globex's
        text, is_error = acme.call("knowledge_delete", {"id": index["globex"]})
        assert is_error and "No note" in text
    finally:
        acme.close()
        globex.close()
        err = _stop(process)
    assert "Traceback" not in err, err
    # the writes are audited like the reads: who and which tool, never the note's text
    calls = [json.loads(line) for line in audit.read_text().splitlines()]
    writes = [(c["token"], c["tool"]) for c in calls if c.get("tool") in WRITE_TOOLS]
    assert writes == [("globex", "knowledge_add"), ("acme", "knowledge_add"),
                      ("acme", "knowledge_delete")]  # fmt: skip
    assert "capybara9" not in audit.read_text()


def test_write_true_without_the_flag_lists_no_write_tool_and_says_so(index, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        f"tokens:\n  - {{token: {ACME_TOKEN}, name: acme, filter: {{tenant: acme}}, write: true}}\n"
    )
    process, port = _start_http(index["db"], index["home"], tokens)
    acme = ClientThread(_http_client(f"http://127.0.0.1:{port}/mcp", ACME_TOKEN))
    try:
        assert not WRITE_TOOLS & names(acme)
    finally:
        acme.close()
        err = _stop(process)
    assert "1 token in" in err and "--allow-write" in err


def test_write_must_be_true_or_false(tmp_path):
    from kbcli.errors import ConfigError
    from kbcli.serve.tokens import load_tokens

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"tokens:\n  - {{token: {ACME_TOKEN}, filter: {{}}, write: 'yes'}}\n")
    with pytest.raises(ConfigError, match="write must be true or false"):
        load_tokens(tokens)


def test_python_tools_write_only_when_asked(tmp_path):
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.tools.read import knowledge_tools

    kb_ = KnowledgeBase(store=SQLiteStore(tmp_path / "py.db"), embedder=SimpleEmbedder())
    try:
        other = kb_.add("beta secret of initech", {"tenant": "initech"})
        assert not WRITE_TOOLS & {t.name for t in knowledge_tools(kb_, {"tenant": "acme"})}
        tools = {t.name: t for t in knowledge_tools(kb_, {"tenant": "acme"}, allow_write=True)}
        assert WRITE_TOOLS <= set(tools)
        added = tools["knowledge_add"].call({"text": "alpha note of acme"})
        assert not added.is_error, added.text
        new_id = ID.search(added.text)[1]
        assert kb_.store.get([new_id])[0].metadata == {"tenant": "acme", "note_by": "agent"}
        assert new_id in tools["knowledge_search"].run_sync(query="alpha note", mode="keyword")
        refused = tools["knowledge_delete"].call({"id": other})
        assert refused.is_error and kb_.store.get([other])
        assert not tools["knowledge_delete"].call({"id": new_id}).is_error
        assert kb_.store.get([new_id]) == []
    finally:
        kb_.close()


# --- notes cannot pose as files (issue 37) --------------------------------------------------

ALL_TOKEN = "all-writer-token-5e6f7a8b9c"
ALPHA_TOKEN = "alpha-writer-token-0d1e2f3a4b"
B2_TEXT = "# Beta two\n\nSetup steps.\n\nThe beta gateway is gw.beta.example.\n"


def chunk_count(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    finally:
        con.close()


def metadata_of(db: Path, chunk_id: str) -> dict:
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT metadata FROM chunks WHERE id = ?", (chunk_id,)).fetchone()
    finally:
        con.close()
    return json.loads(row[0])


def run_kb(db: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), *args],
        env=_env(home),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``docs/alpha/a1.md`` and ``docs/beta/b2.md`` indexed with ``kb ingest`` (file ledger
    records), served over HTTP to a writer of the whole index (``all``) and to one whose
    scope is the alpha folder, written with a ``./`` step in the token file."""
    root = tmp_path_factory.mktemp("posing")
    home = root / "home"
    home.mkdir()
    docs = root / "docs"
    (docs / "alpha").mkdir(parents=True)
    (docs / "beta").mkdir()
    (docs / "alpha" / "a1.md").write_text("# Alpha one\n\nThe alpha gateway is gw.alpha.example.\n")
    (docs / "beta" / "b2.md").write_text(B2_TEXT)
    db = root / "kb.db"
    kb(db, home, "ingest", str(docs))
    docs = docs.resolve()
    tokens = root / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{token: {ALL_TOKEN}, name: all, filter: {{}}, write: true}}\n"
        f"  - token: {ALPHA_TOKEN}\n"
        "    name: alpha\n"
        f"    filter: {{source: {{$prefix: '{docs}/./alpha/'}}}}\n"
        "    write: true\n"
    )
    process, port = _start_http(db, home, tokens, "--allow-write")
    url = f"http://127.0.0.1:{port}/mcp"
    clients = {
        "all": ClientThread(_http_client(url, ALL_TOKEN)),
        "alpha": ClientThread(_http_client(url, ALPHA_TOKEN)),
    }
    yield {"db": db, "home": home, "docs": docs, **clients}
    for client in clients.values():
        client.close()
    err = _stop(process)
    assert "Traceback" not in err, err


def test_a_note_cannot_claim_an_indexed_files_source_or_location(folders):
    """``/docs/beta/./b2.md`` used to pass the exact-string check, and the note, with its own
    ``line`` and ``title``, was shown as ``docs/beta/b2.md:3`` above the real file."""
    writer, db, docs = folders["all"], folders["db"], folders["docs"]
    before = chunk_count(db)
    b2 = f"{docs}/beta/b2.md"
    for source in (f"{docs}/beta/./b2.md", f"{docs}/alpha/../beta/b2.md", f"{docs}//beta/b2.md",
                   b2):  # fmt: skip
        text, is_error = writer.call(
            "knowledge_add",
            {"text": "The beta gateway is gw.evil.example.", "metadata": {"source": source}},
        )
        assert is_error and text == (
            f"Error: metadata source {b2!r} is an indexed file: a note cannot pose as a "
            "file's chunk; leave source out or name another path"
        ), text
    for key, value in (("line", 3), ("title", "Beta two"), ("page", 1), ("heading", "Setup"),
                       ("chunk_index", 0), ("char_start", 0), ("note_by", "admin")):  # fmt: skip
        text, is_error = writer.call(
            "knowledge_add", {"text": "gateway note", "metadata": {key: value}}
        )
        assert is_error and text.startswith(f"Error: metadata {key!r} is set by kb"), text
    assert chunk_count(db) == before  # nothing was written


def test_a_note_is_marked_as_a_note_on_every_surface(folders):
    writer, db, home, docs = folders["all"], folders["db"], folders["home"], folders["docs"]
    text, is_error = writer.call(
        "knowledge_add",
        {"text": "Beta gateway gw.beta.example is being replaced by gw2.beta.example.",
         "metadata": {"source": f"{docs}/beta/./plans/../ideas.md"}},
    )  # fmt: skip
    assert not is_error, text
    note = ID.search(text)[1]
    assert metadata_of(db, note) == {"source": f"{docs}/beta/ideas.md", "note_by": "all"}
    # MCP: the hit is labelled a note, the file's chunk keeps its place in the file
    found, _ = writer.call("knowledge_search", {"query": "beta gateway", "mode": "keyword"})
    assert f"(note by all, source: {docs}/beta/ideas.md; id: {note})" in found
    assert f"(source: {b2_path(docs)}, line" in found  # "line L (lines A-B)" or "lines A-B"
    got, _ = writer.call("knowledge_get", {"id": note})
    assert got.startswith(f"[note by all, source: {docs}/beta/ideas.md; id: {note}]")
    # a note's source is not an indexed file: knowledge_get by path does not read notes
    assert writer.call("knowledge_get", {"path": f"{docs}/beta/ideas.md"}) == (NO_FILE, True)
    text, is_error = writer.call("knowledge_get", {"path": f"{docs}/beta/./b2.md"})
    assert not is_error and "gw.beta.example" in text
    # the command line: table, JSON, list, get
    table = run_kb(db, home, "search", "beta gateway", "--mode", "keyword")
    assert table.returncode == 0, table.stderr
    assert "note by all: " in table.stdout and "ideas.md" in table.stdout
    hits = json.loads(run_kb(db, home, "search", "beta gateway", "--mode", "keyword",
                             "--json").stdout)  # fmt: skip
    (noted,) = [h for h in hits if h["id"] == note]
    assert noted["note_by"] == "all" and noted["line"] is None
    assert noted["location"] == f"note by all: {docs}/beta/ideas.md"
    assert all(h["note_by"] is None for h in hits if h["id"] != note)
    files = run_kb(db, home, "search", "beta gateway", "--mode", "keyword", "--format", "files")
    assert b2_path(docs) in files.stdout.split() and "ideas.md" not in files.stdout
    shown = run_kb(db, home, "get", note)
    assert shown.stdout.startswith(f"note by all: {docs}/beta/ideas.md (note, id {note})")
    listed = run_kb(db, home, "list", "--format", "md")
    assert f"`note by all: {docs}/beta/ideas.md`" in listed.stdout
    assert writer.call("knowledge_delete", {"id": note})[1] is False


def b2_path(docs: Path) -> str:
    return f"{docs}/beta/b2.md"


def test_dotdot_in_a_note_cannot_climb_out_of_the_scope(folders):
    """The alpha writer's scope (``docs/./alpha/`` in the token file) reads as ``docs/alpha/``;
    a note's ``..`` that leaves it is refused, one that stays is kept in canonical form."""
    alpha, db, docs = folders["alpha"], folders["db"], folders["docs"]
    found, _ = alpha.call("knowledge_search", {"query": "gateway", "mode": "keyword"})
    assert f"{docs}/alpha/a1.md" in found and "beta" not in found
    before = chunk_count(db)
    given, meant = f"{docs}/alpha/../beta/plant.md", f"{docs}/beta/plant.md"
    text, is_error = alpha.call("knowledge_add", {"text": "planted", "metadata": {"source": given}})
    assert is_error and text == (
        f"Error: metadata source {given!r} is {meant!r}, which is outside your scope"
    ), text
    assert chunk_count(db) == before
    text, is_error = alpha.call(
        "knowledge_add",
        {"text": "alpha plans", "metadata": {"source": f"{docs}/alpha/sub/../plans.md"}},
    )
    assert not is_error, text
    note = ID.search(text)[1]
    assert metadata_of(db, note)["source"] == f"{docs}/alpha/plans.md"
    # a caller's filter is read in canonical form too
    found, _ = alpha.call(
        "knowledge_search",
        {"query": "gateway", "mode": "keyword", "filter": {"source": f"{docs}/alpha/./a1.md"}},
    )
    assert f"source: {docs}/alpha/a1.md" in found
    alpha.call("knowledge_delete", {"id": note})


def test_kb_add_is_the_users_text_but_not_a_files_chunk_nor_a_note(folders):
    db, home, docs = folders["db"], folders["home"], folders["docs"]
    before = chunk_count(db)
    done = run_kb(db, home, "add", "posing", "--meta", f"source={docs}/beta/./b2.md")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"Error: --meta source={docs}/beta/./b2.md is the indexed file {docs}/beta/b2.md: kb "
        "add cannot add to a file's chunks (kb ingest indexes files); give another source"
    )
    done = run_kb(db, home, "add", "forged", "--meta", "note_by=all")
    assert done.returncode == 2 and done.stderr.strip().startswith("Error: --meta note_by marks")
    assert chunk_count(db) == before
    # the user's own text may say where it belongs, lines included
    done = run_kb(db, home, "add", "my own", "--meta", f"source={docs}/beta/./mine.md",
                  "--meta", "line=3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert metadata_of(db, done.stdout.strip()) == {"source": f"{docs}/beta/mine.md", "line": 3}
    run_kb(db, home, "delete", done.stdout.strip())


# --- write limits (issue 37) ----------------------------------------------------------------

RATE_TOKEN = "rate-writer-token-1a2b3c4d5e"
TOTAL_TOKEN = "total-writer-token-6f7a8b9c0d"
PLAIN_TOKEN = "plain-writer-token-2c3d4e5f6a"


def _limits_tokens(path: Path) -> Path:
    path.write_text(
        "tokens:\n"
        f"  - {{token: {RATE_TOKEN}, name: rate, filter: {{}}, write: true,\n"
        "      write_limits: {notes_per_minute: 2}}\n"
        f"  - {{token: {TOTAL_TOKEN}, name: total, filter: {{}}, write: true,\n"
        "      write_limits: {total_bytes: 700, notes_per_minute: 100}}\n"
        f"  - {{token: {PLAIN_TOKEN}, name: plain, filter: {{}}, write: true}}\n"
    )
    return path


@pytest.mark.slow
def test_write_limits_over_http_name_the_limit_and_outlive_a_restart(tmp_path):
    """One write token grew a database by 119 MB in 92 s. Each writer now has a limit per
    minute, per note and in all; a refusal names the limit and its value and writes nothing;
    the total is what the writer's notes hold in the index, so a restart keeps it."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    db = tmp_path / "kb.db"
    kb(db, home, "add", "seed text", "--meta", "topic=seed")
    tokens = _limits_tokens(tmp_path / "tokens.yaml")
    note = "x" * 250  # with its metadata about 270 bytes

    def serve() -> tuple[Any, dict[str, ClientThread]]:
        process, port = _start_http(db, home, tokens, "--allow-write")
        url = f"http://127.0.0.1:{port}/mcp"
        names = {"rate": RATE_TOKEN, "total": TOTAL_TOKEN, "plain": PLAIN_TOKEN}
        return process, {n: ClientThread(_http_client(url, t)) for n, t in names.items()}

    def stop(process: Any, clients: dict[str, ClientThread]) -> None:
        for client in clients.values():
            client.close()
        err = _stop(process)
        assert "Traceback" not in err, err

    process, clients = serve()
    try:
        for _ in range(2):
            assert not clients["rate"].call("knowledge_add", {"text": "rate note"})[1]
        before = chunk_count(db)
        text, is_error = clients["rate"].call("knowledge_add", {"text": "one too many"})
        assert chunk_count(db) == before
        assert is_error and text.startswith(
            "Error: write limit notes_per_minute (2) reached: rate added 2 notes in the last "
            "minute; the next is allowed in "
        ), text
        added = []
        for _ in range(2):
            text, is_error = clients["total"].call("knowledge_add", {"text": note})
            assert not is_error, text
            added.append(ID.search(text)[1])
        assert chunk_count(db) == before + 2
        before = chunk_count(db)
        text, is_error = clients["total"].call("knowledge_add", {"text": note})
        assert is_error and text.startswith(
            "Error: write limit total_bytes (700) reached: the notes of total hold 538 bytes "
            "and this one is 269; delete notes (knowledge_delete) or ask for a larger "
            "total_bytes"
        ), text
        # a note the writer deletes frees its bytes at once
        assert not clients["total"].call("knowledge_delete", {"id": added.pop()})[1]
        text, is_error = clients["total"].call("knowledge_add", {"text": note})
        assert not is_error, text
        added.append(ID.search(text)[1])
        text, is_error = clients["plain"].call("knowledge_add", {"text": "y" * 40_000})
        assert is_error and text == (
            "Error: write limit note_bytes (32,768) reached: this note is 40,019 bytes (its "
            "text and metadata in UTF-8); shorten it"
        ), text
        assert chunk_count(db) == before  # the refusals wrote nothing
    finally:
        stop(process, clients)

    process, clients = serve()  # a restart: the total is counted from the index
    try:
        text, is_error = clients["total"].call("knowledge_add", {"text": note})
        assert is_error and "write limit total_bytes (700) reached" in text
        assert not clients["total"].call("knowledge_delete", {"id": added[0]})[1]
        assert not clients["total"].call("knowledge_add", {"text": note})[1]  # room again
        # the per-minute window is the server's own: a restart starts a new one
        assert not clients["rate"].call("knowledge_add", {"text": "after restart"})[1]
    finally:
        stop(process, clients)


def test_stdio_writes_under_the_defaults_or_the_write_limit_option(index):
    client = _stdio_client(
        index["db"], index["home"], "--filter", "tenant=acme", "--allow-write",
        "--write-limit", "notes_per_minute=1",
    )  # fmt: skip
    try:
        text, is_error = client.call("knowledge_add", {"text": "z" * 40_000})
        assert is_error and "write limit note_bytes (32,768) reached" in text
        added, is_error = client.call("knowledge_add", {"text": "first stdio note"})
        assert not is_error, added
        text, is_error = client.call("knowledge_add", {"text": "second stdio note"})
        assert is_error and "write limit notes_per_minute (1) reached: stdio added 1 " in text
        client.call("knowledge_delete", {"id": ID.search(added)[1]})
    finally:
        client.close()


def test_the_per_minute_limit_is_a_sliding_window(tmp_path):
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.tools.write import NoteWriter, WriteLimitError, WriteLimits
    from kbcli.views import as_view

    now = [1000.0]
    writer = NoteWriter("w", WriteLimits(notes_per_minute=3), clock=lambda: now[0])
    kb_ = KnowledgeBase(store=SQLiteStore(tmp_path / "w.db"), embedder=SimpleEmbedder())
    view = as_view(kb_)
    try:
        for at in (0, 10, 20):
            now[0] = 1000.0 + at
            writer.add(view, f"note at {at}", {})
        now[0] = 1030.0
        with pytest.raises(WriteLimitError, match=r"the next is allowed in 30 s$"):
            writer.add(view, "too soon", {})
        now[0] = 1060.5  # the note of 1000 has left the window
        writer.add(view, "in time", {})
        with pytest.raises(WriteLimitError, match=r"allowed in 10 s$"):
            writer.add(view, "too soon again", {})
        assert kb_.store.count() == 4
        assert writer.held(view) == sum(
            len(t) + len('{"note_by":"w"}')
            for t in ("note at 0", "note at 10", "note at 20", "in time")  # fmt: skip
        )
    finally:
        kb_.close()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("write_limits: {notes_per_mintue: 5}", "unknown write limit 'notes_per_mintue'"),
        ("write_limits: {note_bytes: 0}", "note_bytes must be a whole number from 1 to"),
        ("write_limits: {total_bytes: lots}", "total_bytes must be a whole number"),
        ("write_limits: 5", "write_limits must be a mapping"),
        ("name: '" + "n" * 65 + "'", "name must be printable text of 1 to 64 characters"),
    ],
)
def test_token_file_write_limit_errors(tmp_path, entry, message):
    from kbcli.errors import ConfigError
    from kbcli.serve.tokens import load_tokens

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"tokens:\n  - token: {ACME_TOKEN}\n    filter: {{}}\n    {entry}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_tokens(tokens)


def test_entries_of_one_name_share_their_write_limits(tmp_path):
    from kbcli.errors import ConfigError
    from kbcli.serve.tokens import load_tokens

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{token: {ACME_TOKEN}, name: ci, filter: {{}}, write_limits: {{note_bytes: 9}}}}\n"
        f"  - {{token: {GLOBEX_TOKEN}, name: ci, filter: {{}}, write_limits: {{note_bytes: 9}}}}\n"
    )
    loaded = load_tokens(tokens)  # a token being rotated: the same name, the same limits
    assert {i.limits.note_bytes for i in loaded.values()} == {9}
    tokens.write_text(tokens.read_text().replace("note_bytes: 9}", "note_bytes: 8}", 1))
    with pytest.raises(ConfigError, match="another entry named 'ci' has other write_limits"):
        load_tokens(tokens)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--write-limit", "notes_per_minute=5"], "--write-limit goes with --allow-write"),
        (["--allow-write", "--write-limit", "bogus=1"], "--write-limit: unknown write limit"),
        (["--allow-write", "--write-limit", "note_bytes"], "--write-limit needs KEY=VALUE"),
        (["--allow-write", "--write-limit", "total_bytes=-1"], "total_bytes must be a whole"),
    ],
)
def test_write_limit_option_errors(args, message):
    from cli_helpers import run

    result = run("mcp", *args)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_total_is_counted_in_the_index_at_least_once_a_minute(tmp_path):
    """Between counts a writer adds its own notes to its count; a note of it deleted
    elsewhere (``kb delete``, another server) frees its bytes at the next count, within a
    minute."""
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.tools.write import RECOUNT_EVERY, NoteWriter, WriteLimitError, WriteLimits
    from kbcli.views import as_view

    now = [0.0]
    writer = NoteWriter("w", WriteLimits(total_bytes=100), clock=lambda: now[0])
    kb_ = KnowledgeBase(store=SQLiteStore(tmp_path / "w.db"), embedder=SimpleEmbedder())
    view = as_view(kb_)
    try:
        first = writer.add(view, "a" * 40, {})  # 40 + 15 bytes of metadata
        with pytest.raises(WriteLimitError, match=r"hold 55 bytes and this one is 55;"):
            writer.add(view, "b" * 40, {})
        kb_.delete([first])  # not through the writer
        now[0] = RECOUNT_EVERY - 1
        with pytest.raises(WriteLimitError, match="hold 55 bytes"):
            writer.add(view, "b" * 40, {})
        now[0] = RECOUNT_EVERY
        writer.add(view, "b" * 40, {})
        assert writer.held(view) == 55
    finally:
        kb_.close()


def test_kb_ask_cites_a_note_as_a_note(tmp_path):
    """The passages ``kb ask`` gives the model, and the citations it prints, mark a note."""
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.tools.read import knowledge_tools
    from kbcli.cli.render.answers import cited_location

    kb_ = KnowledgeBase(store=SQLiteStore(tmp_path / "ask.db"), embedder=SimpleEmbedder())
    try:
        tools = {t.name: t for t in knowledge_tools(kb_, allow_write=True)}
        added = tools["knowledge_add"].call(
            {"text": "The staging database moved to pg-staging-2 on Monday.",
             "metadata": {"source": "/ops/./db.md"}}
        )  # fmt: skip
        assert not added.is_error, added.text
        answer = kb_.ask("Where did the staging database move?", mode="keyword", dry_run=True)
        (evidence,) = answer.evidence
        assert evidence.note_by == "agent" and evidence.line is None
        assert "[1] source: note by agent: /ops/db.md\n" in answer.messages[-1]["content"]
        assert cited_location(evidence) == ("note by agent: /ops/db.md", "")
        assert evidence.to_dict()["note_by"] == "agent"
    finally:
        kb_.close()


@pytest.mark.slow
def test_kb_mcp_on_a_readonly_mount_searches_and_says_writes_are_read_only(index, tmp_path):
    """The index's folder mounted read-only in the server's own mount namespace (issue 37):
    the read tools answer; the write tools answer one line naming the read-only file system."""
    import shutil

    from mcp import Client, StdioServerParameters

    from cli_helpers import _can_mount

    why = _can_mount()
    if why is not None:
        pytest.skip(f"a read-only bind mount: {why}")
    folder, mount = tmp_path / "index", tmp_path / "mnt"
    folder.mkdir()
    mount.mkdir()
    shutil.copy(index["db"], folder / "kb.db")
    before = sorted(p.name for p in folder.iterdir())
    script = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
    params = StdioServerParameters(
        command="unshare",
        args=["-m", "sh", "-c", script, "sh", str(folder), str(mount), sys.executable, "-m"]
        + ["kbcli", "--db", str(mount / "kb.db"), "mcp", "--allow-write"],
        env=_env(index["home"]),
        cwd=str(index["home"]),
    )
    client = ClientThread(lambda: Client(params, read_timeout_seconds=60))
    try:
        assert "vpn.acme.example" in search(client, "gateway")
        stats, is_error = client.call("knowledge_stats", {})
        assert not is_error and "chunks" in stats.lower()
        for tool, arguments in (
            ("knowledge_add", {"text": "a note on a read-only index"}),
            ("knowledge_delete", {"id": index["globex"]}),
        ):
            text, is_error = client.call(tool, arguments)
            assert is_error and text == (
                f"Error: {mount / 'kb.db'} is on a read-only file system: copy it elsewhere, "
                "or mount it writable"
            ), text
    finally:
        client.close()
    assert sorted(p.name for p in folder.iterdir()) == before
