"""An agent's note is searchable by keyword when ``knowledge_add`` returns, and the reply says
whether its vector is still pending (issue 39): the real MCP SDK client against ``kb mcp
--allow-write`` in a subprocess, whose embedder (tests/gated_embedder.py) blocks until the
test lets it go; then ``knowledge_status`` follows the vector from pending to stored."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from extras import need
from mcp_clients import ClientThread, _env

need("mcp")

TESTS = Path(__file__).resolve().parents[1]
ID = re.compile(r"Added note (\S+) ")


def gated_env(home: Path, gate: Path | None) -> dict[str, str]:
    env = _env(home)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TESTS)])
    if gate is not None:
        env["KB_TEST_GATE"] = str(gate)
        env["KB_TEST_GATE_AFTER"] = "0"  # the first texts embedded wait for the gate
    return env


@pytest.fixture
def setup(tmp_path):
    home = tmp_path / "home"
    config = home / ".config" / "kbcli"
    config.mkdir(parents=True)
    (config / "jianmu.yaml").write_text(
        "rag:\n  embedding:\n    provider: 'gated_embedder:GatedEmbedder'\n"
    )
    files = tmp_path / "files"
    files.mkdir()
    (files / "handbook.md").write_text("# Handbook\n\nThe gateway is vpn.example.\n")
    db = tmp_path / "kb.db"
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), "ingest", str(files)],
        env=gated_env(home, None),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    gate = tmp_path / "gate"
    gate.mkdir()
    return {"db": db, "home": home, "gate": gate}


def client(setup) -> ClientThread:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kbcli", "--db", str(setup["db"]), "mcp", "--allow-write"],
        env=gated_env(setup["home"], setup["gate"]),
        cwd=str(setup["home"]),
    )
    return ClientThread(lambda: Client(params, read_timeout_seconds=60))


def vector_of(db: Path, note_id: str) -> bool:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM vectors v JOIN chunks c ON c.rowid = v.doc WHERE c.id = ?",
            (note_id,),
        ).fetchone()
    return bool(row[0])


def test_a_note_is_searchable_at_once_and_its_vector_pending_then_filled(setup):
    mcp = client(setup)
    try:
        started = time.monotonic()
        reply = mcp.run(
            mcp.client.call_tool(
                "knowledge_add", {"text": "The zebracanary rollout starts on Monday."}
            )
        )
        text, is_error = reply.content[0].text, reply.is_error
        assert not is_error, text
        assert reply.structured_content["index"]["vectors_pending"] == 1  # the watermark
        assert time.monotonic() - started < 30  # the blocked embedder did not hold it back
        assert (setup["gate"] / "waiting").exists()  # the embedder was called and is held
        assert "searchable by keyword now; its vector is pending" in text
        note_id = ID.search(text).group(1)

        found, is_error = mcp.call(
            "knowledge_search", {"query": "zebracanary", "mode": "keyword", "k": 5}
        )
        assert not is_error and note_id in found, found
        status, is_error = mcp.call("knowledge_status", {})
        assert not is_error, status
        assert "chunks without vectors: 1" in status
        assert status.splitlines()[0].startswith("Index behind")
        assert not vector_of(setup["db"], note_id)

        (setup["gate"] / "go").touch()
        deadline = time.monotonic() + 30
        while "chunks without vectors: 0" not in status and time.monotonic() < deadline:
            time.sleep(0.1)
            status, _ = mcp.call("knowledge_status", {})
        assert "chunks without vectors: 0" in status, status
        assert status.splitlines()[0].startswith("Index current"), status
        assert vector_of(setup["db"], note_id)

        # the embedder answers at once now: the next note's reply says its vector is stored
        text, is_error = mcp.call("knowledge_add", {"text": "A second note, quickly embedded."})
        assert not is_error and "by keyword and by meaning" in text, text
        assert vector_of(setup["db"], ID.search(text).group(1))
    finally:
        (setup["gate"] / "go").touch()
        mcp.close()
