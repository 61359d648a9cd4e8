"""The walker and prune safety: regular files only, symlinks kept inside the root, bounded
reads, torn reads detected, and --prune that never mass-deletes by accident.

Real FIFOs (os.mkfifo), sockets and symlinks; nothing here may hang: each test is guarded by
a thread timer that fails it instead.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

import kbcli.ingest.sync as sync_module
from cli_helpers import run
from kbcli import KnowledgeBase, UnsafePruneError
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.discovery import MASS_DELETE_MIN_INDEXED
from kbcli.ingest.sync import discover, sync

EXT = (".md", ".txt")


@pytest.fixture(autouse=True)
def no_hang():
    """Fail (instead of hanging the suite) when a test blocks, e.g. opening a FIFO."""
    fired = threading.Event()

    def alarm() -> None:
        fired.set()
        # A blocked open() of a FIFO is released by opening its write end.
        for fifo in list(FIFOS):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass

    timer = threading.Timer(20, alarm)
    timer.start()
    yield
    timer.cancel()
    assert not fired.is_set(), "the test blocked (a FIFO was opened?)"


FIFOS: list[Path] = []


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    FIFOS.append(path)
    return path


def note(path: Path, text: str = "hello") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {path.stem}\n\n{text} {path.stem}\n", encoding="utf-8")
    return path


def open_kb(tmp_path: Path, **kwargs) -> KnowledgeBase:
    return KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder(), **kwargs)


def sources(kb: KnowledgeBase) -> set[str]:
    return set(kb.store.file_records())


# --- special files --------------------------------------------------------------------------


def test_fifo_and_socket_are_counted_never_opened(tmp_path):
    docs = tmp_path / "docs"
    note(docs / "good.md")
    fifo(docs / "pipe.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(docs / "sock.md"))
    try:
        kb = open_kb(tmp_path)
        report = sync(kb, [docs])
        assert report.special == 2
        assert report.failed == []
        assert sources(kb) == {str(docs.resolve() / "good.md")}
        assert any("FIFO" in w for w in report.warnings)
        assert "special" in " ".join(
            __import__("kbcli.cli.render", fromlist=["x"]).ingest_summary(report)
        )
    finally:
        sock.close()


def test_fifo_named_on_the_command_line_is_skipped(tmp_path):
    pipe = fifo(tmp_path / "pipe.md")
    found = discover([pipe], EXT)
    assert found.files == [] and found.special == 1


def test_fifo_swapped_in_after_the_walk_is_refused_not_blocking(tmp_path):
    docs = tmp_path / "docs"
    target = note(docs / "a.md")
    kb = open_kb(tmp_path)
    found = discover([docs], EXT)
    target.unlink()
    fifo(target)
    report = sync_module.SyncReport()
    out = sync_module._sync_file(kb, found.files[0], None, "{}", None, False, report)
    assert out is None and "not a regular file" in report.failed[0].error


def test_cli_summary_counts_special_files(tmp_path):
    docs = tmp_path / "docs"
    note(docs / "good.md")
    fifo(docs / "pipe.txt")
    result = run("ingest", str(docs))
    assert result.exit_code == 0, result.stderr
    assert "Skipped 1 special file" in result.stdout


def test_a_page_named_dot_is_indexed_and_every_hidden_entry_is_counted(tmp_path):
    """``..md`` (a page named ".") was passed over as hidden while the summary said nothing
    was skipped. It is a real name; what is hidden (one dot, then a name) is counted."""
    docs = tmp_path / "docs"
    note(docs / "..md", "the page named dot")
    note(docs / "...md", "three dots")
    note(docs / "a.md")
    note(docs / ".draft.md")  # hidden file
    note(docs / ".obsidian" / "workspace.md")  # hidden folder
    note(docs / "node_modules" / "x.md")  # a folder never entered
    (docs / "data.csv").write_text("a,b\n")  # another extension
    found = discover([docs], EXT)
    assert [p.name for p in found.files] == ["...md", "..md", "a.md"]
    assert (found.skipped, found.folders) == (2, 2)
    result = run("ingest", str(docs))
    assert result.exit_code == 0, result.stderr
    assert "Indexed 3 files" in result.stdout
    assert "Skipped 2 files (other extensions or hidden)." in result.stdout
    assert (
        "Skipped 2 folders (hidden, or .git, node_modules, __pycache__; --include-hidden "
        "enters them)." in result.stdout
    )
    every = discover([docs], EXT, include_hidden=True)
    assert len(every.files) == 6 and (every.skipped, every.folders) == (1, 0)


# --- symlinks -------------------------------------------------------------------------------


def tree_with_links(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    secret = tmp_path / "docs-secret"  # a sibling sharing the prefix
    note(docs / "real.md")
    note(docs / "sub" / "inner.md")
    note(secret / "secret.md", "classified")
    note(tmp_path / "outside.md", "outside")
    (docs / "to-secret").symlink_to(secret, target_is_directory=True)
    (docs / "secret-file.md").symlink_to(secret / "secret.md")
    (docs / "outside.md").symlink_to(tmp_path / "outside.md")
    (docs / "etc").symlink_to("/etc", target_is_directory=True)
    (docs / "zero.txt").symlink_to("/dev/zero")
    (docs / "alias.md").symlink_to(docs / "real.md")  # same inode as a real file
    (docs / "inner-link.md").symlink_to(docs / "sub" / "inner.md")
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    (docs / "broken.md").symlink_to(tmp_path / "nowhere.md")
    return docs


def test_symlinks_not_followed_by_default(tmp_path):
    docs = tree_with_links(tmp_path)
    found = discover([docs], EXT)
    names = {p.relative_to(docs.resolve()).as_posix() for p in found.files}
    assert names == {"real.md", "sub/inner.md"}
    assert found.links == 9


def test_follow_symlinks_never_leaves_the_root(tmp_path):
    docs = tree_with_links(tmp_path)
    found = discover([docs], EXT, follow_symlinks=True)
    names = {p.relative_to(docs.resolve()).as_posix() for p in found.files}
    # everything outside docs/ (docs-secret, /etc, /dev/zero, outside.md) is refused, and
    # alias.md / inner-link.md are the same inodes as real files, recorded once
    assert names == {"real.md", "sub/inner.md"}
    assert all("secret" not in str(p) for p in found.files)
    joined = " ".join(found.warnings)
    assert "outside" in joined and "broken" in joined


def test_file_reached_through_a_link_is_recorded_under_the_link_and_pruned_with_it(tmp_path):
    docs = tmp_path / "docs"
    hidden = docs / ".store"  # hidden: not walked directly, only through the link
    note(hidden / "kept.md", "linked content")
    (docs / "shared").symlink_to(hidden, target_is_directory=True)
    note(docs / "a.md")
    note(docs / "b.md")
    kb = open_kb(tmp_path)
    report = sync(kb, [docs], follow_symlinks=True)
    link_path = str(docs.resolve() / "shared" / "kept.md")
    assert link_path in sources(kb), sources(kb)
    assert report.added == 3
    (docs / "shared").unlink()
    report = sync(kb, [docs], follow_symlinks=True, prune=True)
    assert report.removed == 1 and link_path not in sources(kb)


def test_symlink_loop_and_long_chain_end_quickly(tmp_path):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    previous = docs / "a.md"
    for i in range(50):
        link = docs / f"chain{i}.md"
        link.symlink_to(previous)
        previous = link
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    found = discover([docs], EXT, follow_symlinks=True)
    assert [p.name for p in found.files] == ["a.md"]


def test_device_behind_a_link_is_never_read(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "zero.txt").symlink_to("/dev/zero")
    note(docs / "ok.md")
    kb = open_kb(tmp_path)
    report = sync(kb, [docs], follow_symlinks=True)
    assert report.failed == [] and report.added == 1 and report.links == 1


def test_device_inside_the_root_through_a_link_is_special(tmp_path):
    # a character device reached inside the root: refused as not regular, never read
    docs = tmp_path / "docs"
    docs.mkdir()
    null = docs / "null.txt"
    try:
        os.mknod(null, 0o666 | 0o020000, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("mknod needs privileges here")
    found = discover([docs], EXT)
    assert found.files == [] and found.special == 1


# --- bounded reads --------------------------------------------------------------------------


def test_hash_stops_at_the_limit_whatever_stat_says(tmp_path, monkeypatch):
    big = note(tmp_path / "big.md", "x" * 5000)
    from kbcli.ingest.files import read_content

    with pytest.raises(sync_module.LoaderError, match="limit"):
        read_content(big, 1000)
    assert read_content(big, 10_000).sha256


def test_file_over_the_limit_fails_without_being_read(tmp_path, monkeypatch):
    from kbcli.config.lookup import Config, LimitsConfig

    docs = tmp_path / "docs"
    note(docs / "big.md", "y" * 3_000_000)
    note(docs / "small.md")
    config = Config(limits=LimitsConfig(max_file_mb=1))
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder(), config=config)
    read: list[str] = []
    real = sync_module.read_content
    monkeypatch.setattr(
        sync_module, "read_content", lambda p, *a, **k: read.append(p.name) or real(p, *a, **k)
    )
    report = sync(kb, [docs])
    assert [f.path for f in report.failed] == [str(docs.resolve() / "big.md")]
    assert "1 MB limit" in report.failed[0].error
    assert "big.md" not in read


# --- torn reads -----------------------------------------------------------------------------


def test_file_rewritten_while_read_is_read_again(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    f = note(docs / "a.md", "version one")
    kb = open_kb(tmp_path)
    real_load = kb.ingestor.load_content
    calls = []

    def load(path, content):
        calls.append(path)
        loaded = real_load(path, content)
        if len(calls) == 1:
            f.write_text("# a\n\nversion two, longer\n", encoding="utf-8")
        return loaded

    monkeypatch.setattr(kb.ingestor, "load_content", load)
    monkeypatch.setattr(sync_module, "TORN_READ_RETRY_DELAY", 0)
    report = sync(kb, [docs])
    assert report.added == 1 and len(calls) == 2
    texts = " ".join(d.text for d in kb.store.list_all())
    assert "version two" in texts and "version one" not in texts
    import hashlib

    assert (
        kb.store.file_records()[str(f.resolve())].sha256
        == hashlib.sha256(f.read_bytes()).hexdigest()
    )


def test_file_that_keeps_changing_fails_and_keeps_its_old_version(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    f = note(docs / "a.md", "stable version")
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    f.write_text("# a\n\nnew\n", encoding="utf-8")
    real_load = kb.ingestor.load_content
    counter = iter(range(100))

    def load(path, content):
        loaded = real_load(path, content)
        f.write_text(f"# a\n\nwriting {next(counter)}\n" * 3, encoding="utf-8")
        return loaded

    monkeypatch.setattr(kb.ingestor, "load_content", load)
    monkeypatch.setattr(sync_module, "TORN_READ_RETRY_DELAY", 0)
    report = sync(kb, [docs])
    assert len(report.failed) == 1 and "changed while it was being read" in report.failed[0].error
    assert "stable version" in " ".join(d.text for d in kb.store.list_all())


# --- unreadable folders ---------------------------------------------------------------------


def deny(monkeypatch, folder: Path) -> None:
    """Make os.scandir fail with EACCES on ``folder`` (works as root too)."""
    real = os.scandir
    target = str(folder)

    def scandir(path="."):
        if str(path) == target:
            raise PermissionError(13, "Permission denied", target)
        return real(path)

    monkeypatch.setattr(sync_module.os, "scandir", scandir)


@pytest.mark.parametrize("prune", [None, True], ids=["default", "prune"])
def test_unlistable_subfolder_keeps_its_files_on_prune(tmp_path, monkeypatch, prune):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    note(docs / "private" / "p1.md")
    note(docs / "private" / "p2.md")
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    deny(monkeypatch, docs.resolve() / "private")
    report = sync(kb, [docs], prune=prune)
    assert report.removed == 0 and report.stale == 0 and report.unreadable == 1
    assert len(sources(kb)) == 3
    assert any("cannot list folder" in w for w in report.warnings)


@pytest.mark.parametrize("prune", [None, True], ids=["default", "prune"])
def test_unlistable_root_keeps_everything(tmp_path, monkeypatch, prune):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    deny(monkeypatch, docs.resolve())
    report = sync(kb, [docs], prune=prune)
    assert report.removed == 0 and len(sources(kb)) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_real_unreadable_folder_is_one_warning_not_a_traceback(tmp_path):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    locked = docs / "locked"
    note(locked / "b.md")
    result = run("ingest", str(docs))
    assert result.exit_code == 0
    locked.chmod(0)
    try:
        result = run("ingest", str(docs), "--prune")
        assert result.exit_code == 0, result.stderr
        assert "Traceback" not in result.stderr and "cannot" in result.stderr
        assert "Removed" not in result.stdout
    finally:
        locked.chmod(0o755)


def test_root_that_cannot_be_accessed_is_one_line(tmp_path, monkeypatch):
    real = os.stat

    def stat(path, *args, **kwargs):
        if str(path).endswith("forbidden"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sync_module.os, "stat", stat)
    result = run("ingest", str(tmp_path / "forbidden"))
    assert result.exit_code == 2
    assert "Cannot access" in result.stderr and "Permission denied" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- prune safety ---------------------------------------------------------------------------


def indexed_tree(tmp_path: Path, n: int) -> tuple[KnowledgeBase, Path, list[Path]]:
    docs = tmp_path / "docs"
    files = [note(docs / f"n{i}.md") for i in range(n)]
    kb = open_kb(tmp_path)
    sync(kb, [docs])
    return kb, docs, files


def test_emptied_root_is_refused_and_index_untouched(tmp_path):
    kb, docs, files = indexed_tree(tmp_path, 3)
    for f in files:
        f.unlink()
    note(docs / "new.md")  # would be added: must not be, the whole run is refused
    (docs / "new.md").rename(docs / "new.rst")
    before = kb.store.count()
    with pytest.raises(UnsafePruneError, match="no .md,.txt file"):
        sync(kb, [docs], prune=True, extensions=EXT)
    assert kb.store.count() == before and len(sources(kb)) == 3
    report = sync(kb, [docs], prune=True, extensions=EXT, allow_mass_delete=True)
    assert report.removed == 3 and sources(kb) == set()


@pytest.mark.parametrize("prune", [None, True], ids=["default", "prune"])
def test_single_file_root_emptied_is_refused_too(tmp_path, prune):
    kb, docs, files = indexed_tree(tmp_path, 1)
    files[0].unlink()
    with pytest.raises(UnsafePruneError):
        sync(kb, [docs], prune=prune)


@pytest.mark.parametrize("prune", [None, True], ids=["default", "prune"])
def test_more_than_half_gone_is_refused(tmp_path, prune):
    n = MASS_DELETE_MIN_INDEXED + 2
    kb, docs, files = indexed_tree(tmp_path, n)
    gone = n // 2 + 1
    for f in files[:gone]:
        f.unlink()
    note(docs / "n0.md", "changed")  # an update that must not be written either
    (docs / "n0.md").unlink()
    with pytest.raises(UnsafePruneError, match=f"remove {gone} of the {n} files"):
        sync(kb, [docs], prune=prune)
    assert len(sources(kb)) == n
    report = sync(kb, [docs], prune=prune, allow_mass_delete=True)
    assert report.removed == gone


def test_exactly_half_gone_is_allowed(tmp_path):
    n = MASS_DELETE_MIN_INDEXED + 2
    kb, docs, files = indexed_tree(tmp_path, n)
    for f in files[: n // 2]:
        f.unlink()
    assert sync(kb, [docs], prune=True).removed == n // 2


@pytest.mark.parametrize("n,gone", [(2, 1), (3, 2), (MASS_DELETE_MIN_INDEXED - 1, 8)])
def test_small_index_may_lose_most_of_its_files(tmp_path, n, gone):
    kb, docs, files = indexed_tree(tmp_path, n)
    for f in files[:gone]:
        f.unlink()
    assert sync(kb, [docs], prune=True).removed == gone


def test_no_prune_keeps_everything_and_refuses_nothing(tmp_path):
    kb, docs, files = indexed_tree(tmp_path, 3)
    for f in files:
        f.unlink()
    report = sync(kb, [docs], prune=False)
    assert (report.stale, report.missing, report.removed) == (3, 3, 0)
    assert len(sources(kb)) == 3


def test_deletes_are_followed_by_default_under_the_same_guard(tmp_path):
    """Issue 24 item 4: the default removes vanished files, refusing an emptied folder."""
    kb, docs, files = indexed_tree(tmp_path, 3)
    files[0].unlink()
    report = sync(kb, [docs])
    assert (report.removed, report.stale, report.missing) == (1, 0, 0)
    assert sources(kb) == {str(f) for f in files[1:]}
    for f in files[1:]:
        f.unlink()
    with pytest.raises(UnsafePruneError, match="is it empty or not mounted"):
        sync(kb, [docs])
    assert len(sources(kb)) == 2
    assert sync(kb, [docs], allow_mass_delete=True).removed == 2


def test_cli_refusal_is_one_line_exit_2_and_flag_allows(tmp_path):
    docs = tmp_path / "docs"
    files = [note(docs / f"n{i}.md") for i in range(12)]
    assert run("ingest", str(docs)).exit_code == 0
    for f in files[:10]:
        f.unlink()
    result = run("ingest", str(docs), "--prune")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--allow-mass-delete" in result.stderr
    result = run("ingest", str(docs), "--prune", "--allow-mass-delete", "--json")
    assert result.exit_code == 0 and '"removed": 10' in result.stdout


def test_cli_follow_symlinks_option(tmp_path):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    note(docs / ".hidden" / "b.md")
    (docs / "b-link").symlink_to(docs / ".hidden", target_is_directory=True)
    result = run("ingest", str(docs), "--json")
    assert '"added": 1' in result.stdout and '"links": 1' in result.stdout
    result = run("ingest", str(docs), "--follow-symlinks", "--json")
    assert '"added": 1' in result.stdout and '"links": 0' in result.stdout


def test_cli_list_and_delete_find_a_file_recorded_under_its_link(tmp_path):
    docs = tmp_path / "docs"
    note(docs / ".store" / "kept.md", "linked words")
    (docs / "kept-link.md").symlink_to(docs / ".store" / "kept.md")
    note(docs / "a.md")
    assert run("ingest", str(docs), "--follow-symlinks").exit_code == 0
    listed = run("list", "--source", str(docs / "kept-link.md"), "--json")
    assert listed.exit_code == 0 and "linked words" in listed.stdout
    deleted = run("delete", "--source", str(docs / "kept-link.md"))
    assert deleted.exit_code == 0 and "Deleted 1 chunk" in deleted.stdout


def test_cli_unlistable_folder_is_a_warning_and_prune_keeps_its_files(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    note(docs / "a.md")
    note(docs / "private" / "p.md")
    assert run("ingest", str(docs)).exit_code == 0
    deny(monkeypatch, docs.resolve() / "private")
    result = run("ingest", str(docs), "--prune")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert "cannot list folder (Permission denied)" in result.stderr
    assert "Could not read 1 folder" in result.stdout and "Removed" not in result.stdout
