"""``kb watch``: a real ``kb watch --json`` subprocess on a temporary folder (issue 28).

Each test changes the folder as a user or an editor does, then polls the database (another
connection, read-only) until the index holds the expected state or a deadline passes; the
``--json`` lines say how many batches applied what. Nothing is mocked, except where noted: the
inotify watch limit cannot be reached here without root.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from watcher import DEADLINE, SRC, Watcher, env_for, has, indexed, wait_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def kb(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        env=env_for(db),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def watch(tmp_path):
    started: list[Watcher] = []

    def start(*args: str, **kw: Any) -> Watcher:
        w = Watcher(tmp_path / "kb.db", *args, **kw)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def files_consistent(db: Path) -> None:
    """The ledger and the chunks agree: every recorded file has exactly its chunks."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for path, chunk_ids in con.execute("SELECT path, chunk_ids FROM files"):
            ids = set(json.loads(chunk_ids))
            rows = {r[0] for r in con.execute("SELECT id FROM chunks WHERE source = ?", (path,))}
            assert rows == ids, path
    finally:
        con.close()


@pytest.fixture
def notes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n\nalpha apples\n")
    return folder


@pytest.mark.slow
def test_new_edit_delete_rename_file(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    assert has(db, {notes / "first.md": "alpha apples"})
    (notes / "second.md").write_text("bravo bananas\n")
    wait_for(lambda: has(db, {notes / "second.md": "bravo bananas"}), w, "a new file")
    (notes / "second.md").write_text("bravo blueberries\n")
    wait_for(lambda: has(db, {notes / "second.md": "blueberries"}), w, "an edit")
    assert "bananas" not in indexed(db)[str(notes / "second.md")]
    (notes / "first.md").unlink()
    wait_for(lambda: has(db, {notes / "first.md": None}), w, "a deletion")
    (notes / "second.md").rename(notes / "third.md")
    wait_for(
        lambda: has(db, {notes / "second.md": None, notes / "third.md": "blueberries"}), w, "rename"
    )
    assert w.stop() == 0
    assert "Applied:" in w.stderr and "Traceback" not in w.stderr
    files_consistent(db)


@pytest.mark.slow
def test_folders_created_moved_and_removed(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "moved.md").write_text("moved in from outside\n")
    w = watch(str(notes))
    made = notes / "made" / "inner"
    made.mkdir(parents=True)
    (made / "x.md").write_text("created inside a new folder\n")
    wait_for(lambda: has(db, {made / "x.md": "new folder"}), w, "a created folder")
    shutil.move(str(outside), str(notes / "arrived"))
    arrived = notes / "arrived" / "deep" / "moved.md"
    wait_for(lambda: has(db, {arrived: "from outside"}), w, "a folder moved in")
    (notes / "arrived").rename(notes / "renamed")
    renamed = notes / "renamed" / "deep" / "moved.md"
    wait_for(lambda: has(db, {arrived: None, renamed: "from outside"}), w, "a folder renamed")
    shutil.move(str(notes / "renamed"), str(tmp_path / "away"))
    wait_for(lambda: has(db, {renamed: None}), w, "a folder moved out")
    shutil.rmtree(notes / "made")
    wait_for(lambda: has(db, {made / "x.md": None}), w, "a folder removed")
    assert has(db, {notes / "first.md": "alpha"})
    assert w.stop() == 0
    files_consistent(db)


@pytest.mark.slow
def test_kbignore_ext_and_hidden_rules_hold(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    (notes / ".kbignore").write_text("private/\n")
    w = watch(str(notes), "--ext", ".md,.txt", "--prune")
    (notes / "private").mkdir()
    (notes / "private" / "secret.md").write_text("secret words\n")
    (notes / ".hidden").mkdir()
    (notes / ".hidden" / "h.md").write_text("hidden words\n")
    (notes / "other.rst").write_text("restructured words\n")
    (notes / "plain.txt").write_text("plain words\n")
    wait_for(lambda: has(db, {notes / "plain.txt": "plain words"}), w, "a .txt file")
    # the batch that indexed plain.txt saw the others too (or an earlier one did)
    wait_for(lambda: w.batches, w, "a batch line")
    now = indexed(db)
    assert not any("secret" in t or "hidden" in t or "restructured" in t for t in now.values())
    # a .kbignore rule added later: with --prune the file it now excludes leaves the index
    (notes / ".kbignore").write_text("private/\nfirst.md\n")
    wait_for(lambda: has(db, {notes / "first.md": None}), w, "a .kbignore rule applied")
    (notes / ".kbignore").write_text("")
    wait_for(
        lambda: has(db, {notes / "first.md": "alpha", notes / "private" / "secret.md": "secret"}),
        w,
        "the rules lifted",
    )
    assert w.stop() == 0


def test_save_via_rename_and_two_step_write_are_indexed_once_whole(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    body = "".join(f"line {i} of the saved version with words w{i}\n" for i in range(400))
    # an editor's save: write a temporary file beside it, then rename it over the original
    tmp = notes / ".first.md.swp"
    tmp.write_text(body)
    os.replace(tmp, notes / "first.md")
    wait_for(lambda: has(db, {notes / "first.md": "w399"}), w, "the saved file")
    # a two-step write: half, a pause shorter than the quiet period, the rest
    with open(notes / "two.md", "w") as fh:
        fh.write("beginning of two\n")
        fh.flush()
        time.sleep(0.2)
        fh.write("end of two\n")
    wait_for(lambda: has(db, {notes / "two.md": "end of two"}), w, "the two-step write")
    assert "beginning of two" in indexed(db)[str(notes / "two.md")]
    assert w.stop() == 0
    touched = [p["path"] for b in w.batches for p in b["slowest"]]
    assert touched.count(str(notes / "first.md")) == 1, w.batches
    assert touched.count(str(notes / "two.md")) == 1, w.batches
    assert sum(b["updated"] + b["added"] for b in w.batches) == 2


@pytest.mark.slow
def test_database_inside_the_watched_folder_does_not_feed_itself(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("alpha\n")
    db = folder / "kb.db"
    w = Watcher(db, str(folder))
    try:
        (folder / "b.md").write_text("bravo\n")
        wait_for(lambda: has(db, {folder / "b.md": "bravo"}), w, "b.md")
        (folder / "c.md").write_text("charlie\n")
        wait_for(lambda: has(db, {folder / "c.md": "charlie"}), w, "c.md")
        wait_for(lambda: len(w.batches) >= 2, w, "two batch lines")
    finally:
        assert w.stop() == 0
    # had its own writes (kb.db-wal, the lock file) been events, batches would come between
    assert [b["added"] for b in w.batches] == [1, 1], w.batches


def test_concurrent_ingest_of_the_same_folder_succeeds(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    for i in range(300):
        (notes / f"n{i}.md").write_text(f"note {i} about concurrency{i}\n")
    # while the watch applies that burst, a cron kb ingest of the same folder runs
    done = kb(db, "ingest", str(notes), "--json")
    assert done.returncode == 0, done.stderr
    assert "locked" not in done.stderr.lower()
    wait_for(lambda: len(indexed(db)) == 301, w, "all 301 files")
    (notes / "late.md").write_text("written after the ingest\n")
    wait_for(lambda: has(db, {notes / "late.md": "after the ingest"}), w, "a later change")
    assert w.stop() == 0
    files_consistent(db)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_finish_the_batch_and_exit_0(watch, notes, tmp_path, signum):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    for i in range(400):
        (notes / f"s{i}.md").write_text(f"version one of {i}\n")
    wait_for(lambda: w.batches or "Applied" in w.stderr, w, "a batch under way")
    for i in range(400):
        (notes / f"s{i}.md").write_text(f"version two of {i}\n")
    assert w.stop(signum) == 0, w.stderr
    assert "Traceback" not in w.stderr
    assert w.lines[-1]["event"] == "stopped"
    assert w.lines[-1]["signal"] == signal.Signals(signum).name
    files_consistent(db)
    # each file is at a version it had, whole; the next ingest brings the rest in
    for source, text in indexed(db).items():
        assert text.startswith(("# First", "version one", "version two")), (source, text)
    again = kb(db, "ingest", str(notes))
    assert again.returncode == 0, again.stderr
    assert sum(1 for t in indexed(db).values() if t.startswith("version two")) == 400


@pytest.mark.slow
def test_a_burst_of_2000_files_is_applied_in_few_batches(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    staged = tmp_path / "staged"
    staged.mkdir()
    for i in range(2000):
        (staged / f"b{i:04d}.md").write_text(f"burst file {i} word{i}\n")
    w = watch(str(notes))
    for path in staged.iterdir():  # copied in one by one, as cp -r does
        shutil.copy2(path, notes / path.name)
    wait_for(lambda: len(indexed(db)) == 2001, w, "2001 files", limit=240)
    wait_for(lambda: sum(b["added"] for b in w.batches) == 2000, w, "the batch lines")
    assert w.stop() == 0
    assert len(w.batches) <= 10, [b["added"] for b in w.batches]


def test_scan_mode_follows_changes(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes), "--scan-every", "0.2")
    assert "a scan every 0.2 s" in w.stderr
    (notes / "sub").mkdir()
    (notes / "sub" / "s.md").write_text("scanned words\n")
    wait_for(lambda: has(db, {notes / "sub" / "s.md": "scanned"}), w, "a new file by scan")
    (notes / "first.md").write_text("alpha edited by scan\n")
    wait_for(lambda: has(db, {notes / "first.md": "edited by scan"}), w, "an edit by scan")
    shutil.rmtree(notes / "sub")
    wait_for(lambda: has(db, {notes / "sub" / "s.md": None}), w, "a folder removed by scan")
    assert w.stop() == 0
    assert {b["mode"] for b in w.batches} == {"scans"}


@pytest.mark.slow
def test_without_watchfiles_it_says_so_once_and_scans(tmp_path, notes):
    # a package that cannot be imported stands in for watchfiles not being installed
    shim = tmp_path / "shim" / "watchfiles"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('watchfiles is not installed')\n")
    db = tmp_path / "kb.db"
    w = Watcher(db, str(notes), pythonpath=f"{tmp_path / 'shim'}{os.pathsep}{SRC}")
    try:
        (notes / "later.md").write_text("found by a scan\n")
        wait_for(lambda: has(db, {notes / "later.md": "by a scan"}), w, "a scan")
    finally:
        assert w.stop() == 0
    notes_lines = [line for line in w.stderr.splitlines() if "watchfiles" in line]
    assert notes_lines == [
        "Note: watchfiles, which kbcli installs for file-system events, cannot be imported "
        "here (no wheel for this platform, or a broken install: pip install watchfiles); "
        "scanning every 2 s instead."
    ]


def test_watchfiles_comes_with_kbcli_and_the_watch_extra_still_installs():
    # what pip installs: watchfiles with every install, no extra needed; [watch] still exists
    # (an empty extra) so the install line of earlier READMEs keeps working
    from importlib.metadata import metadata, requires

    required = requires("kbcli") or []
    core = [r for r in required if "extra ==" not in r]
    assert any(r.replace(" ", "").startswith("watchfiles>=") for r in core), required
    assert "watch" in (metadata("kbcli").get_all("Provides-Extra") or [])


@pytest.mark.slow
def test_inotify_limit_is_named_once_with_the_sysctl(tmp_path, notes, monkeypatch, capsys):
    # The kernel's watch limit cannot be reached here without root (it is a sysctl): the
    # notifier is replaced by one raising what watchfiles raises then (ENOSPC).
    from kbcli.ingest import watch as watch_module
    from kbcli.pipeline import KnowledgeBase

    class Full:
        def __init__(self, paths, recursive):
            raise OSError(errno.ENOSPC, "OS file watch limit reached.")

    monkeypatch.setattr(watch_module, "_Events", Full)
    said: list[str] = []
    kb_ = KnowledgeBase.from_config(db=tmp_path / "kb.db", create=True)
    try:
        w = watch_module.Watch(kb_, [notes], note=said.append)
        assert w.mode == "scans"
        assert said == [
            "Note: the inotify watch limit is reached (raise it with: sudo sysctl "
            "fs.inotify.max_user_watches=524288 (and in /etc/sysctl.conf to keep it)); "
            "scanning every 2 s instead."
        ]
        w.index()
        (notes / "n.md").write_text("noticed by a scan\n")
        stop = threading.Event()
        batches: list = []

        def on_batch(batch):
            batches.append(batch)
            stop.set()

        w.follow(stop, on_batch)
        assert batches[0].report.added == 1 and batches[0].mode == "scans"
    finally:
        kb_.close()


def test_missing_path_is_one_line(tmp_path):
    done = kb(tmp_path / "kb.db", "watch", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("Error: Path not found")
    assert "Traceback" not in done.stderr


def test_a_signal_during_the_first_index_keeps_each_file_whole_and_exits_0(tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(3000):  # the built-in embedder writes its first group after 1024 chunks
        (folder / f"f{i}.md").write_text(f"# File {i}\n\nwords of file {i}.\n")
    db = tmp_path / "kb.db"
    err = open(tmp_path / "stderr", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbcli", "watch", str(folder), "--json"],
        env=env_for(db),
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        wait_for(lambda: indexed(db) or proc.poll() is not None, None, "a first commit")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()
    first = json.loads(out.splitlines()[0])
    assert first["event"] == "indexed"
    if first["interrupted"]:  # (a fast machine may have finished the index first)
        assert first["signal"] == "SIGTERM"
        assert "Interrupted (SIGTERM)" in (tmp_path / "stderr").read_text()
    files_consistent(db)


def test_the_watched_folder_removed_ends_the_watch_and_keeps_the_index(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    shutil.rmtree(notes)  # an unmounted share looks the same: nothing is removed
    assert w.proc.wait(timeout=DEADLINE) == 2
    last = w.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Path not found") and "Traceback" not in w.stderr
    assert has(db, {notes / "first.md": "alpha apples"})


def test_sync_only_touches_the_paths_it_is_given(tmp_path):
    # the library call each batch makes: sync(..., only=paths)
    from kbcli.ingest.sync import sync
    from kbcli.pipeline import KnowledgeBase

    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    for name in ("a.md", "b.md", "sub/c.md", "sub/d.md"):
        (root / name).write_text(f"first {name}\n")
    (root / "sub" / ".kbignore").write_text("d2.md\n")
    kb_ = KnowledgeBase.from_config(db=tmp_path / "only.db", create=True)
    try:
        assert sync(kb_, [root]).added == 4
        (root / "a.md").write_text("second a\n")  # changed, but not in the batch
        (root / "b.md").unlink()  # gone, but not in the batch
        (root / "sub" / "c.md").write_text("second c\n")
        (root / "sub" / "d.md").rename(root / "sub" / "d2.md")  # .kbignore'd new name
        batch = {(root / "sub" / p).resolve() for p in ("c.md", "d.md", "d2.md")}
        report = sync(kb_, [root], only=batch)
        assert (report.updated, report.removed, report.added) == (1, 1, 0)
        texts = {d.metadata["source"]: d.text for d in kb_.store.list_all()}
        assert texts[str((root / "a.md").resolve())] == "first a.md"  # untouched
        assert str((root / "b.md").resolve()) in texts  # kept until a batch names it
        assert texts[str((root / "sub" / "c.md").resolve())] == "second c"
        assert not any(s.endswith(("d.md", "d2.md")) for s in texts)
        full = sync(kb_, [root])
        assert (full.updated, full.removed) == (1, 1)
    finally:
        kb_.close()


# --- the watched folder replaced: renamed away, a link or another folder in its place --------


def swap_for_link(folder: Path, target: Path) -> Path:
    """Rename ``folder`` away and put a symbolic link to ``target`` in its place."""
    away = folder.with_name(folder.name + ".old")
    folder.rename(away)
    folder.symlink_to(target)
    return away


@pytest.fixture
def other(tmp_path):
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "first.md").write_text("# Other first\n\nanother alpha\n")
    (folder / "second.md").write_text("# Second\n\nbravo bananas\n")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--scan-every", "0.2"]], ids=["events", "scans"])
def test_a_watched_folder_replaced_by_a_link_stops_the_watch_naming_it(
    watch, notes, other, tmp_path, mode
):
    db = tmp_path / "kb.db"
    w = watch(str(notes), *mode)
    before = indexed(db)
    swap_for_link(notes, other)
    try:
        code = w.proc.wait(timeout=DEADLINE)  # it used to go on, applying nothing
    except subprocess.TimeoutExpired:
        pytest.fail(f"kb watch kept running after its folder became a link: {w.stderr}")
    assert code == 2  # as "Path not found" for a folder moved away: not quieter
    last = w.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: The watched folder {notes} now leads to {other}")
    assert "--follow-symlinks" in last and "Traceback" not in w.stderr
    assert indexed(db) == before  # the index as it was
    # The next run converges: a watch that follows links indexes where the path leads and
    # lets the old folder's files go.
    w2 = watch(str(notes), "--follow-symlinks")
    assert set(indexed(db)) == {str(other / "first.md"), str(other / "second.md")}
    assert w2.stop() == 0
    files_consistent(db)


def test_the_folder_moved_away_ends_the_watch_even_without_events(watch, notes, tmp_path):
    """Renamed away (no link in its place): the periodic check ends the watch although the
    old folder's events keep coming under its old name."""
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    away = notes.rename(tmp_path / "elsewhere")
    (away / "late.md").write_text("written after the move\n")
    assert w.proc.wait(timeout=DEADLINE) == 2
    assert w.stderr.strip().splitlines()[-1] == (
        f"Error: Path not found: {notes} (check the path and try again)"
    )
    assert has(db, {notes / "first.md": "alpha apples", notes / "late.md": None})


@pytest.mark.slow
def test_a_watched_folder_replaced_by_another_folder_is_indexed_again(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    made = tmp_path / "made"
    made.mkdir()
    (made / "fresh.md").write_text("foxtrot figs\n")
    notes.rename(tmp_path / "notes.old")  # renamed away, and another folder in its place
    made.rename(notes)
    wait_for(
        lambda: has(db, {notes / "fresh.md": "foxtrot", notes / "first.md": None}),
        w,
        "the new folder indexed",
    )
    (notes / "later.md").write_text("golf grapes\n")  # events of the new folder reach it
    wait_for(lambda: has(db, {notes / "later.md": "golf"}), w, "a file in the new folder")
    assert "is another folder now: indexing it again" in w.stderr
    (tmp_path / "notes.old" / "first.md").write_text("edited in the old folder\n")
    assert w.stop() == 0
    assert set(indexed(db)) == {str(notes / "fresh.md"), str(notes / "later.md")}
    files_consistent(db)


@pytest.mark.slow
def test_a_watched_folder_renamed_away_and_made_again_is_watched_again(watch, notes, tmp_path):
    """rename away + mkdir: the new, empty folder is noticed; the empty-folder guard keeps the
    indexed file (an unmounted share looks the same), and the new folder's events arrive."""
    db = tmp_path / "kb.db"
    w = watch(str(notes))
    notes.rename(tmp_path / "notes.old")
    notes.mkdir()
    wait_for(lambda: any("refused" in b for b in w.batches), w, "the empty folder noticed")
    assert has(db, {notes / "first.md": "alpha apples"})
    (notes / "fresh.md").write_text("foxtrot figs\n")
    wait_for(lambda: has(db, {notes / "fresh.md": "foxtrot"}), w, "a file in the new folder")
    assert "is another folder now" in w.stderr and "the files were kept" in w.stderr
    assert w.stop() == 0
    files_consistent(db)


@pytest.mark.slow
def test_with_follow_symlinks_the_watch_follows_the_link(watch, notes, other, tmp_path):
    db = tmp_path / "kb.db"
    (notes / "third.md").write_text("charlie cherries\n")
    w = watch(str(notes), "--follow-symlinks")
    away = swap_for_link(notes, other)
    wanted = {other / "first.md": "another alpha", other / "second.md": "bravo"}
    gone = {notes / "first.md": None, notes / "third.md": None}
    wait_for(lambda: has(db, {**wanted, **gone}), w, "the link's folder indexed")
    (other / "fourth.md").write_text("delta dates\n")  # the new folder's events reach it
    wait_for(lambda: has(db, {other / "fourth.md": "delta"}), w, "a file in the new folder")
    (away / "first.md").write_text("an edit in the folder left behind\n")
    (away / "fifth.md").write_text("echo in the folder left behind\n")
    assert w.stop() == 0
    assert set(indexed(db)) == {str(other / n) for n in ("first.md", "second.md", "fourth.md")}
    followed = [b for b in w.batches if "followed" in b]
    assert followed[0]["followed"] == [{"path": str(notes), "from": str(notes), "to": str(other)}]
    assert followed[0]["removed"] == 2 and followed[0]["added"] == 2
    assert "now leads to" in w.stderr and "Traceback" not in w.stderr
    files_consistent(db)


def test_following_a_link_to_an_empty_folder_keeps_the_files(watch, notes, tmp_path):
    """The mass-delete guard holds when the path now leads to an empty (or not yet mounted)
    folder: the files indexed from the old one are kept, said once, and the watch goes on."""
    db = tmp_path / "kb.db"
    for i in range(11):
        (notes / f"n{i}.md").write_text(f"note number {i}\n")
    empty = tmp_path / "mount"
    empty.mkdir()
    w = watch(str(notes), "--follow-symlinks")
    before = indexed(db)
    swap_for_link(notes, empty)
    wait_for(lambda: any("refused" in b for b in w.batches), w, "the refusal")
    assert indexed(db) == before
    assert "Removing indexed files refused" in w.stderr and "--allow-mass-delete" in w.stderr
    (empty / "mounted.md").write_text("hotel honey\n")
    wait_for(lambda: has(db, {empty / "mounted.md": "hotel"}), w, "a file in the new folder")
    assert w.stop() == 0


def test_a_link_to_the_folder_above_is_not_followed(watch, notes, tmp_path):
    db = tmp_path / "kb.db"
    w = watch(str(notes), "--follow-symlinks")
    swap_for_link(notes, tmp_path)  # would index the whole tree holding the link
    assert w.proc.wait(timeout=DEADLINE) == 2
    last = w.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: The watched folder {notes} now leads to {tmp_path}")
    assert "holds the folder" in last
    assert has(db, {notes / "first.md": "alpha apples"})


@pytest.mark.slow
def test_a_watched_folder_replaced_by_a_file_stops_the_watch(watch, notes, tmp_path):
    w = watch(str(notes))
    notes.rename(tmp_path / "notes.old")
    notes.write_text("a file now\n")
    assert w.proc.wait(timeout=DEADLINE) == 2
    last = w.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: The watched folder {notes} is a file now: kb watch stopped")
