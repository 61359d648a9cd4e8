"""A store built with its reference defaults and no path is its own: it writes nowhere it was
not pointed (not the user's ``paths.knowledge_db``, not the working folder), two of them never
share documents, and its temporary folder is gone after ``close`` — or at exit when the script
never closes it. Each case runs as a user runs it: a script file, ``python script.py``, no
``__main__`` guard, in a fresh ``HOME`` and a fresh working folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kbcli
from extras import need

SRC = str(Path(kbcli.__file__).resolve().parents[1])  # the kbcli under test, for the scripts

STORES = """
from kbcli import InMemoryStore, KnowledgeBase, SQLiteStore
from kbcli.types import Document
import importlib.util, json, sys

def exercise(make, close=True):
    a, b = make(), make()
    a.add([Document("x", "hello world", {"source": "s.md"})], [[1.0, 0.0, 0.0, 0.0]])
    got = [len(a.search([1.0, 0.0, 0.0, 0.0], k=3)), len(a.keyword_search("hello", k=3)),
           len(b.list_all()), len(a.list_all())]
    b.add([Document("y", "other words", {"source": "t.md"})], [[0.0, 1.0, 0.0, 0.0]])
    got.append(sorted(d.id for d in a.list_all()))
    if close:
        a.close(); b.close()
    else:
        keep.extend([a, b])  # left open until the interpreter exits
    return got

keep = []
close = sys.argv[1] == "close"
out = {
    "SQLiteStore()": exercise(lambda: SQLiteStore(), close),
    "InMemoryStore()": exercise(lambda: InMemoryStore(), close),
}
if importlib.util.find_spec("faiss"):
    from kbcli.stores import FaissStore
    reference = lambda: FaissStore(4, "Flat", True, "ip")  # dim, index_factory, normalize, metric
    out["FaissStore(4, 'Flat', True, 'ip')"] = exercise(reference, close)
    out["FaissStore(dim=4)"] = exercise(lambda: FaissStore(dim=4), close)
if importlib.util.find_spec("chromadb"):
    from kbcli.stores import ChromaStore
    out["ChromaStore()"] = exercise(lambda: ChromaStore(), close)
kb = KnowledgeBase()
kb.add("Llamas hum when they are content", {"source": "llamas.txt"})
out["KnowledgeBase()"] = [h.document.text for h in kb.search("llamas hum", k=3)]
print(json.dumps(out))
"""


def _env(home: Path, tmp: Path) -> dict[str, str]:
    """The environment of a user: a fresh HOME, no kb settings, a temporary folder to watch."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KB_", "XDG_")) and k not in ("PYTHONPATH", "TMPDIR")
    }
    return {**env, "HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": SRC}


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def user(tmp_path):
    """(home, cwd, tmp): three empty folders."""
    folders = tuple(tmp_path / name for name in ("user-home", "user-cwd", "user-tmp"))
    for folder in folders:
        folder.mkdir()
    return folders


def _run_script(user, text: str, *args: str) -> dict:
    home, cwd, tmp = user
    script = cwd.parent / "script.py"
    script.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=_env(home, tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["close", "exit"])
def test_default_stores_are_private_and_leave_nothing_behind(user, how):
    home, cwd, tmp = user
    out = _run_script(user, STORES, how)
    expected = {"SQLiteStore()", "InMemoryStore()", "KnowledgeBase()"}
    assert expected <= set(out)
    for name, got in out.items():
        if name == "KnowledgeBase()":
            assert got == ["Llamas hum when they are content"]
            continue
        hits, keyword_hits, seen_by_other, own, after = got
        # searches find the document; the second default instance never sees it (nor the
        # first the second's)
        assert (hits, keyword_hits, own) == (1, 1, 1), name
        assert seen_by_other == 0 and after == ["x"], name
    assert _files(home) == []  # not ~/.local/share/kbcli/knowledge.db, nothing
    assert _files(cwd) == []  # not ./.chroma, nothing
    assert _files(tmp) == []  # the temporary folders went with close() or at exit


@pytest.mark.slow
def test_every_default_store_class_ran(user):
    """The script above covers FAISS and Chroma whenever they are installed (CI installs
    every extra): make sure they did not silently drop out here."""
    need("faiss")
    need("chromadb")
    out = _run_script(user, STORES, "close")
    assert {"FaissStore(4, 'Flat', True, 'ip')", "FaissStore(dim=4)", "ChromaStore()"} <= set(out)


def test_knowledge_base_open_is_what_reaches_the_users_database(user):
    """``KnowledgeBase.open()`` (README, "The library") opens ``paths.knowledge_db``: the one
    default that writes into HOME, as documented; ``KnowledgeBase()`` stays in memory."""
    home, cwd, tmp = user
    out = _run_script(
        user,
        "from kbcli import KnowledgeBase\nimport json\n"
        "kb = KnowledgeBase.open()\nkb.add('Llamas hum', {'source': 'l.txt'})\n"
        "print(json.dumps(str(kb.store.path)))\nkb.close()\n",
    )
    db = home / ".local" / "share" / "kbcli" / "knowledge.db"
    assert out == str(db) and db.exists()
    assert _files(cwd) == [] and _files(tmp) == []


def test_a_closed_default_store_removed_its_folder_and_a_path_is_kept(tmp_path):
    from kbcli import SQLiteStore

    scratch = SQLiteStore()
    folder = scratch.path.parent
    assert folder.is_dir() and folder != tmp_path
    scratch.close()
    assert not folder.exists()
    kept = SQLiteStore(tmp_path / "kb.db")
    kept.close()
    assert (tmp_path / "kb.db").exists()  # an explicit path is the user's: never removed


def test_a_default_store_that_is_dropped_removes_its_folder():
    import gc

    from kbcli import SQLiteStore

    store = SQLiteStore()
    folder = store.path.parent
    del store
    gc.collect()
    assert not folder.exists()
