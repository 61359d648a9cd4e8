"""``kb status`` as a user runs it: the real ``kb`` in subprocesses on real files and a real
SQLite index. A folder edited behind the index's back reports the exact new / changed / gone
counts and exits 6; after ``kb ingest`` it exits 0; touched files are unchanged, ignored
files are not new; ``--json`` is one object; a running ``kb watch`` is seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

KB = [sys.executable, "-m", "kbcli"]


@pytest.fixture
def notes(tmp_path) -> dict:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    for i in range(6):
        where = folder / ("sub" if i % 2 else "")
        (where / f"n{i}.md").write_text(f"# Note {i}\n\nThe text of note {i}.\n")
    db = tmp_path / "kb.db"
    env = {k: v for k, v in os.environ.items() if k != "KB_CONFIG"}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"), KB_DB=str(db))
    done = subprocess.run([*KB, "ingest", str(folder), "-q"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    return {"folder": folder, "db": db, "env": env, "tmp": tmp_path}


def kb(notes: dict, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KB, *args], env=notes["env"], capture_output=True, text=True, timeout=120
    )


def test_current_then_behind_then_current_again(notes):
    folder = notes["folder"]
    done = kb(notes, "status")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "Index current: 6 files indexed, nothing new, changed or gone."
    )

    (folder / "n0.md").write_text("# Note 0\n\nRewritten, and longer than it was.\n")
    (folder / "sub" / "n1.md").unlink()
    (folder / "n2.md").unlink()
    st = os.stat(folder / "n4.md")  # touched: same bytes, a later mtime
    os.utime(folder / "n4.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))
    (folder / "fresh.md").write_text("# Fresh\n\nNew here.\n")
    (folder / "sub" / "fresh.txt").write_text("new too\n")
    (folder / ".kbignore").write_text("drafts/\n")
    (folder / "drafts").mkdir()
    (folder / "drafts" / "d.md").write_text("# ignored draft\n")
    (folder / ".hidden.md").write_text("# hidden\n")
    (folder / "image.png").write_bytes(b"\x89PNG not an extension kb ingest picks")

    done = kb(notes, "status")
    assert done.returncode == 6, (done.stdout, done.stderr)
    assert done.stdout.strip().splitlines()[-1] == (
        "Index behind: 2 new, 1 changed, 2 gone (kb ingest brings it up to date)."
    )
    assert done.stderr == ""

    data = json.loads(kb(notes, "status", "--json").stdout)
    assert data["state"] == "behind"
    assert (data["new"], data["changed"], data["gone"], data["touched"]) == (2, 1, 2, 1)
    [root] = data["roots"]
    assert root["path"] == str(folder.resolve()) and root["synced_at"] == data["last_ingest"]
    assert sorted(root["examples"]["gone"]) == sorted(
        [str((folder / "n2.md").resolve()), str((folder / "sub" / "n1.md").resolve())]
    )
    assert set(data["index"]) == {"changed_at", "syncing", "vectors_pending"}
    assert data["watch"] == {"running": False, "pid": None}

    assert kb(notes, "ingest", str(folder), "-q").returncode == 0
    done = kb(notes, "status", "--json")
    assert done.returncode == 0, done.stdout
    after = json.loads(done.stdout)
    assert after["state"] == "current" and after["indexed"] == 6  # 6 - 2 gone + 2 new


def test_quiet_prints_only_when_behind_and_a_path_narrows(notes):
    folder = notes["folder"]
    done = kb(notes, "-q", "status")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    (folder / "sub" / "more.md").write_text("# More\n")
    done = kb(notes, "-q", "status")
    assert done.returncode == 6 and "1 new" in done.stderr and done.stdout == ""
    assert kb(notes, "status", str(folder / "sub")).returncode == 6
    top = json.loads(kb(notes, "status", str(folder / "n0.md"), "--json").stdout)
    assert top["state"] == "current" and top["indexed"] == 1


def test_a_path_not_ingested_is_one_line_and_exit_2(notes):
    other = notes["tmp"] / "elsewhere"
    other.mkdir()
    done = kb(notes, "status", str(other))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "is not ingested" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_running_watch_is_seen(notes):
    watch = subprocess.Popen(
        [*KB, "watch", str(notes["folder"]), "--scan-every", "0.2", "-q"],
        env=notes["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        data: dict = {}
        while time.monotonic() < deadline:
            data = json.loads(kb(notes, "status", "--json").stdout)
            if data["watch"]["running"]:
                break
            time.sleep(0.2)
        assert data["watch"] == {"running": True, "pid": watch.pid}
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    data = json.loads(kb(notes, "status", "--json").stdout)
    assert data["watch"] == {"running": False, "pid": None}
    assert not Path(f"{notes['db']}.watching").exists()
