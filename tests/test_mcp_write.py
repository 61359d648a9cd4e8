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

import pytest

from extras import need
from test_mcp import ClientThread, _env, _http_client, _start_http, _stdio_client, _stop

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
    assert json.loads(metadata) == {"topic": "office", "tenant": "acme"}


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
    from kbcli.mcp_server import load_tokens

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"tokens:\n  - {{token: {ACME_TOKEN}, filter: {{}}, write: 'yes'}}\n")
    with pytest.raises(ConfigError, match="write must be true or false"):
        load_tokens(tokens)


def test_python_tools_write_only_when_asked(tmp_path):
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.tools import knowledge_tools

    kb_ = KnowledgeBase(store=SQLiteStore(tmp_path / "py.db"), embedder=SimpleEmbedder())
    try:
        other = kb_.add("beta secret of initech", {"tenant": "initech"})
        assert not WRITE_TOOLS & {t.name for t in knowledge_tools(kb_, {"tenant": "acme"})}
        tools = {t.name: t for t in knowledge_tools(kb_, {"tenant": "acme"}, allow_write=True)}
        assert WRITE_TOOLS <= set(tools)
        added = tools["knowledge_add"].call({"text": "alpha note of acme"})
        assert not added.is_error, added.text
        new_id = ID.search(added.text)[1]
        assert kb_.store.get([new_id])[0].metadata == {"tenant": "acme"}
        assert new_id in tools["knowledge_search"].run_sync(query="alpha note", mode="keyword")
        refused = tools["knowledge_delete"].call({"id": other})
        assert refused.is_error and kb_.store.get([other])
        assert not tools["knowledge_delete"].call({"id": new_id}).is_error
        assert kb_.store.get([new_id]) == []
    finally:
        kb_.close()


def test_kb_mcp_on_a_readonly_mount_searches_and_says_writes_are_read_only(index, tmp_path):
    """The index's folder mounted read-only in the server's own mount namespace (issue 37):
    the read tools answer; the write tools answer one line naming the read-only file system."""
    import shutil

    from mcp import Client, StdioServerParameters

    from test_cli_reliability import _can_mount

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
