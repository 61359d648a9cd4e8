"""Long-running readers follow changes other processes make (issue 28): a running ``kb mcp``
(the MCP SDK's client over stdio) answers from an index re-ingested, rebuilt
(``kb ingest --rebuild``), repaired (``kb doctor --repair``) and replaced by a copy
(``kb copy --replace``) without a restart and without errors; a running ``kb watch`` goes on
applying changes to the index as rebuilt, repaired or replaced.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from extras import need
from mcp_clients import _env, _stdio_client

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_rebuild_is_seen_without_a_restart(live):
    client = live["client"]
    before = search(client, "topic7", mode="hybrid")
    kb(live["db"], live["home"], "ingest", str(live["notes"]), "--rebuild")
    for mode in ("keyword", "semantic", "hybrid"):
        assert "topic7" in search(client, "topic7", mode=mode)
    assert "n7.md" in before


@pytest.mark.slow
def test_a_repair_is_seen_without_a_restart(live):
    client, db = live["client"], live["db"]
    assert "ocelot" in search(client, "ocelot")
    for derived in ("keyword-pack", "vectors-cache"):  # lost: doctor rebuilds them
        Path(f"{db}.{derived}").unlink()
    kb(db, live["home"], "doctor", "--repair")
    assert "ocelot" in search(client, "ocelot")
    assert "topic3" in search(client, "topic3", mode="hybrid")


@pytest.mark.slow
def test_an_index_replaced_by_a_copy_is_seen_without_a_restart(live, tmp_path):
    client, db, home, notes = live["client"], live["db"], live["home"], live["notes"]
    assert "ocelot" in search(client, "ocelot")
    other = tmp_path / "other.db"  # an index built elsewhere, with other content
    (notes / "a.md").write_text("# A\n\nThe copied index mentions quokkas.\n")
    kb(other, home, "ingest", str(notes))
    kb(other, home, "copy", "--to", "sqlite", "--to-db", str(db), "--replace")
    assert "quokkas" in search(client, "quokkas")
    assert "ocelot" not in search(client, "ocelot")
    assert "quokkas" in search(client, "quokkas", mode="hybrid")
    text, is_error = client.call(
        "knowledge_search",
        {"query": "quokkas", "mode": "semantic", "filter": {"source": str(notes / "a.md")}},
    )
    assert not is_error and "quokkas" in text, text
    # a writer that comes later works on it, and the file stays whole
    (notes / "c.md").write_text("# C\n\nwritten after the swap: lemurs.\n")
    kb(db, home, "ingest", str(notes))
    assert "lemurs" in search(client, "lemurs")
    kb(db, home, "doctor")
    assert sorted(p.name for p in tmp_path.iterdir() if ".kb-copy" in p.name) == []


def test_replace_refuses_what_it_cannot_replace(live, tmp_path):
    db, home = live["db"], live["home"]
    missing = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), "copy", "--to", "sqlite"]
        + ["--to-db", str(tmp_path / "nope.db"), "--replace"],
        env=_env(home),
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("Error: --replace needs --to-db naming an existing index")


@pytest.mark.slow
def test_a_running_watch_follows_a_rebuild_a_repair_and_a_replaced_index(tmp_path):
    from watcher import Watcher, has, wait_for

    home = tmp_path / "home"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nfirst words about ocelots.\n")
    db = tmp_path / "kb.db"
    w = Watcher(db, str(notes))
    try:
        kb(db, home, "ingest", str(notes), "--rebuild")
        (notes / "b.md").write_text("after the rebuild: tapirs.\n")
        wait_for(lambda: has(db, {notes / "b.md": "tapirs"}), w, "a change after a rebuild")
        Path(f"{db}.keyword-pack").unlink()
        kb(db, home, "doctor", "--repair")
        (notes / "c.md").write_text("after the repair: pangolins.\n")
        wait_for(lambda: has(db, {notes / "c.md": "pangolins"}), w, "a change after a repair")
        other = tmp_path / "other.db"
        kb(db, home, "copy", "--to", "sqlite", "--to-db", str(other))
        kb(other, home, "copy", "--to", "sqlite", "--to-db", str(db), "--replace")
        (notes / "d.md").write_text("after the swap: quokkas.\n")
        wait_for(lambda: has(db, {notes / "d.md": "quokkas"}), w, "a change after a swap")
        assert has(db, {notes / "a.md": "ocelots", notes / "c.md": "pangolins"})
    finally:
        assert w.stop() == 0
    assert "Error" not in w.stderr and "Traceback" not in w.stderr
    kb(db, home, "doctor")
