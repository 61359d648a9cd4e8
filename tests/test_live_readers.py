"""Long-running readers follow changes other processes make (issue 28): a running ``kb mcp``
(the MCP SDK's client over stdio) answers from an index re-ingested, rebuilt
(``kb ingest --rebuild``), repaired (``kb doctor --repair``) and replaced by a copy
(``kb copy`` into a new file, moved over the old one) without a restart and without errors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from extras import need
from test_mcp import _env, _stdio_client

need("mcp")


def kb(db: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), *args],
        env=_env(home),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def live(tmp_path):
    home = tmp_path / "home"  # (conftest made it)
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(30):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nfiller words about topic{i} here.\n")
    (notes / "a.md").write_text("# A\n\nThe first version mentions ocelot.\n")
    db = tmp_path / "kb.db"
    kb(db, home, "ingest", str(notes))
    client = _stdio_client(db, home)
    yield {"db": db, "home": home, "notes": notes, "client": client}
    client.close()


def search(client, query: str, mode: str = "keyword") -> str:
    text, is_error = client.call("knowledge_search", {"query": query, "mode": mode, "k": 5})
    assert not is_error, text
    return text


def stats(client) -> dict[str, str]:
    text, is_error = client.call("knowledge_stats", {})
    assert not is_error, text
    return dict(re.findall(r"^(\w[\w ]*): (.*)$", text, re.M))


def test_a_reingest_is_seen_without_a_restart(live):
    client, notes = live["client"], live["notes"]
    assert "ocelot" in search(client, "ocelot")
    (notes / "a.md").write_text("# A\n\nThe second version mentions pangolin.\n")
    (notes / "b.md").write_text("# B\n\nA new note about tapirs.\n")
    kb(live["db"], live["home"], "ingest", str(notes))
    assert "pangolin" in search(client, "pangolin")
    assert "ocelot" not in search(client, "ocelot")
    assert "tapirs" in search(client, "tapirs", mode="hybrid")
    assert stats(client)["sources"] == "32"


def test_a_rebuild_is_seen_without_a_restart(live):
    client = live["client"]
    before = search(client, "topic7", mode="hybrid")
    kb(live["db"], live["home"], "ingest", str(live["notes"]), "--rebuild")
    for mode in ("keyword", "semantic", "hybrid"):
        assert "topic7" in search(client, "topic7", mode=mode)
    assert "n7.md" in before


def test_a_repair_is_seen_without_a_restart(live):
    client, db = live["client"], live["db"]
    assert "ocelot" in search(client, "ocelot")
    for derived in ("keyword-pack", "vectors-cache"):  # lost: doctor rebuilds them
        Path(f"{db}.{derived}").unlink()
    kb(db, live["home"], "doctor", "--repair")
    assert "ocelot" in search(client, "ocelot")
    assert "topic3" in search(client, "topic3", mode="hybrid")


def test_an_index_replaced_by_a_copy_is_seen_without_a_restart(live, tmp_path):
    client, db, home, notes = live["client"], live["db"], live["home"], live["notes"]
    assert "ocelot" in search(client, "ocelot")
    new = tmp_path / "new.db"
    kb(db, home, "copy", "--to", "sqlite", "--to-db", str(new))
    (notes / "a.md").write_text("# A\n\nThe copied index mentions quokkas.\n")
    kb(new, home, "ingest", str(notes))
    os.replace(new, db)  # the new index takes the old one's place
    assert "quokkas" in search(client, "quokkas")
    assert "ocelot" not in search(client, "ocelot")
    assert "quokkas" in search(client, "quokkas", mode="hybrid")
    text, is_error = client.call(
        "knowledge_search",
        {"query": "quokkas", "mode": "semantic", "filter": {"source": str(notes / "a.md")}},
    )
    assert not is_error and "quokkas" in text, text
    # and a writer that comes later works on the new file, whole
    (notes / "c.md").write_text("# C\n\nwritten after the swap: lemurs.\n")
    kb(db, home, "ingest", str(notes))
    assert "lemurs" in search(client, "lemurs")
    done = kb(db, home, "doctor")
    assert "Traceback" not in done.stderr
