"""One clear line instead of a traceback (disk full, out-of-range numbers), and metadata
values that keep their type so range filters match what users wrote."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import _can_mount, run, run_json
from kbcli import KnowledgeBase, StoreError
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.sync import sync
from kbcli.stores.sqlite import SQLiteStore


def one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def docs_folder(tmp_path: Path, n: int = 3, word: str = "alpha") -> Path:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    for i in range(n):
        (docs / f"d{i}.md").write_text(f"# Doc {i}\n\n{word} text number {i}.\n", encoding="utf-8")
    return docs


# --- disk full --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        sqlite3.OperationalError("database or disk is full"),
    ],
    ids=["ENOSPC", "SQLITE_FULL"],
)
def test_disk_full_during_ingest_is_one_line_and_the_index_is_unchanged(
    tmp_path, monkeypatch, error
):
    docs = docs_folder(tmp_path)
    assert run("ingest", str(docs)).exit_code == 0
    before = run_json("list", "--limit", "0", "--json")[0]
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# Doc {i}\n\nbeta rewritten {i}.\n", encoding="utf-8")

    real = SQLiteStore.replace_files  # what kb ingest writes each batch of files with

    def full(self, *args, **kwargs):
        real(self, *args, **kwargs)  # the rows are written, then the disk fills up
        raise error

    monkeypatch.setattr(SQLiteStore, "replace_files", full)
    result = run("ingest", str(docs))
    assert result.exit_code == 1
    line = one_line(result)
    assert "Writing to" in line and ("space" in line or "full" in line)
    monkeypatch.setattr(SQLiteStore, "replace_files", real)
    after = run_json("list", "--limit", "0", "--json")[0]
    assert sorted(d["text"] for d in after) == sorted(d["text"] for d in before)
    assert run("search", "alpha", "--mode", "keyword").exit_code == 0


def test_a_run_stopped_by_an_error_still_prints_its_json_summary(tmp_path):
    """kb ingest --json: the summary line comes even when an error ends the run (here the
    lock of another ingest), with the error that stderr shows."""
    from kbcli.system.locking import lock_file

    docs = docs_folder(tmp_path)
    with lock_file(Path(f"{os.environ['KB_DB']}.ingest-lock"), 0.0, os.environ["KB_DB"]):
        result = run("ingest", str(docs), "--wait", "0", "--json")
    assert result.exit_code == 3
    summary = json.loads(result.stdout)
    assert summary["added"] == 0 and one_line(result) == f"Error: {summary['error']}"
    assert "Another kb ingest" in summary["error"]


def test_library_sync_raises_store_error_on_enospc(tmp_path, monkeypatch):
    docs = docs_folder(tmp_path)
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    monkeypatch.setattr(
        SQLiteStore,
        "replace_files",
        lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")),
    )
    with pytest.raises(StoreError, match="No space left on device"):
        sync(kb, [docs])
    assert kb.store.count() == 0


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as on Linux")
def test_real_write_failure_in_a_child_process_is_one_line(tmp_path):
    """RLIMIT_FSIZE makes every write past 64 KB fail (EFBIG), as a full disk would."""
    docs = docs_folder(tmp_path, 2)
    db = tmp_path / "kb.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "KB_DB": str(db)}
    kb = [sys.executable, "-m", "kbcli"]
    assert subprocess.run([*kb, "ingest", str(docs)], env=env, capture_output=True).returncode == 0
    big = tmp_path / "big"
    big.mkdir()
    for i in range(40):
        (big / f"b{i}.md").write_text(f"# Big {i}\n\n" + f"gamma words {i} " * 2000, "utf-8")
    limit = (
        "import resource, signal, sys, runpy; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY)); "
        "sys.argv = ['kb', 'ingest', sys.argv[1]]; runpy.run_module('kbcli', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", limit, str(big)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
    found = subprocess.run(
        [*kb, "search", "alpha", "--mode", "keyword", "--json"], env=env, capture_output=True
    )
    assert found.returncode == 0 and len(json.loads(found.stdout)) == 2


# --- numbers beyond 64 bits -------------------------------------------------------------------


HUGE = "9" * 30


@pytest.mark.parametrize(
    "args",
    [
        ["search", "x", "-k", HUGE],
        ["search", "x", "-k", str(2**63)],
        ["list", "--limit", HUGE],
        ["search", "x", "--mode", "keyword", "--filter", f"year>={HUGE}"],
        ["list", "--filter", f"n<-{HUGE}"],
    ],
)
def test_numbers_beyond_64_bits_are_one_line(args):
    from cli_helpers import SAMPLE, seed

    seed(SAMPLE)
    result = run(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stderr and result.stderr.strip()


def test_huge_equality_filter_matches_text_literally():
    from cli_helpers import seed

    seed([("a long id", {"ref": HUGE})])
    docs, _ = run_json("list", "--filter", f"ref={HUGE}", "--json")
    assert [d["metadata"]["ref"] for d in docs] == [HUGE]


def test_largest_limit_and_k_work():
    from cli_helpers import SAMPLE, seed

    seed(SAMPLE)
    assert run("list", "--limit", str(2**63 - 1)).exit_code == 0
    assert run("search", "password", "--mode", "keyword", "-k", "1000000").exit_code == 0


def test_library_filter_refuses_unbindable_numbers(tmp_path):
    from kbcli import FilterError
    from kbcli.filters.model import validate_filter

    for bad in ({"n": 2**64}, {"n": {"$gt": -(2**70)}}, {"n": {"$in": [1, 2**63]}}):
        with pytest.raises(FilterError, match="64-bit"):
            validate_filter(bad)
    with pytest.raises(FilterError, match="finite"):
        validate_filter({"n": {"$lt": float("inf")}})


# --- typed metadata ---------------------------------------------------------------------------


def test_readme_filter_example_matches_typed_meta(tmp_path):
    docs = docs_folder(tmp_path, 1, "reset password")
    old = tmp_path / "old"
    old.mkdir()
    (old / "o.md").write_text("# Old\n\nreset password long ago\n", encoding="utf-8")
    assert run("ingest", str(docs), "--meta", "year=2024", "--meta", "team=ops").exit_code == 0
    assert run("ingest", str(old), "--meta", "year=2019", "--meta", "team=ops").exit_code == 0
    hits, _ = run_json(
        "search",
        "reset password",
        "--mode",
        "keyword",
        "--filter",
        "team=ops",
        "--filter",
        "year>=2024",
        "--json",
    )
    assert hits and {h["metadata"]["year"] for h in hits} == {2024}
    hits, _ = run_json(
        "search", "reset password", "--mode", "keyword", "--filter", "year=2019", "--json"
    )
    assert {h["metadata"]["source"].endswith("o.md") for h in hits} == {True}


def test_quoted_meta_stays_text(tmp_path):
    out = run("add", "a note", "--meta", 'code="2024"', "--meta", "draft=true")
    assert out.exit_code == 0
    docs, _ = run_json("list", "--json")
    assert docs[0]["metadata"]["code"] == "2024" and docs[0]["metadata"]["draft"] is True
    hits, _ = run_json("list", "--filter", "code>=2000", "--json")
    assert hits == []  # a text value is not compared as a number


# --- a kb-shaped file of no known format version (issue 25, item 8) -------------------------


def file_state(db: Path) -> tuple[bytes, list[str]]:
    """The database's bytes and the files beside it (nothing may be written or left)."""
    return db.read_bytes(), sorted(p.name for p in db.parent.iterdir() if p.name != "docs")


@pytest.mark.parametrize("version", [0, -1, -(2**31)])
@pytest.mark.parametrize(
    "command", [["stats"], ["search", "alpha", "--mode", "keyword"], ["ingest", "docs"]]
)
def test_unknown_format_version_is_one_line_exit_2_and_the_file_untouched(
    tmp_path, monkeypatch, version, command
):
    monkeypatch.chdir(tmp_path)
    docs_folder(tmp_path)
    db = tmp_path / "kb.db"
    assert run("ingest", "docs").exit_code == 0
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("PRAGMA journal_mode = DELETE")  # no -wal / -shm left to compare
    conn.close()
    before = file_state(db)
    result = run(*command)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    line = one_line(result)
    assert f"{db} is not a kb database: unknown format version {version}" in line, line
    assert file_state(db) == before


def test_unknown_format_version_of_a_postgres_index_is_one_line(pg_dsn, pg_table):
    import psycopg

    from kbcli.errors import NotAKnowledgeBaseError
    from kbcli.stores.postgres import PostgresStore

    PostgresStore(pg_dsn, pg_table).close()
    for value in ("0", "-3", "x"):
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{pg_table}_meta" SET value = %s WHERE key = %s', (value, "schema_version")
            )
        with pytest.raises(NotAKnowledgeBaseError, match="unknown format version"):
            PostgresStore(pg_dsn, pg_table)


# --- a read-only <db>-shm (issue 25, item 7) --------------------------------------------------
#
# SQLite opens a -shm it may not write read-only and then refuses every write ("attempt to write
# a readonly database"), whatever the database file allows. A reader of a 0444 database leaves
# such a -shm (SQLite creates it with the database's mode), and so does a killed writer whose
# -shm is then made read-only or given to another user. Root ignores permissions, so as root
# each kb child runs without CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and CAP_CHOWN
# (dropped from its bounding set before exec): the kernel then checks file permissions for it
# as for any user, and SQLite, which as euid 0 hands the -shm to the database's owner, cannot.
# As another user nothing needs dropping.

PR_CAPBSET_DROP = 24
FILE_POWERS = (0, 1, 2, 3)  # CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _as_plain_user() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in FILE_POWERS:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def kb_child(db: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "KB_DB": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_as_plain_user if os.geteuid() == 0 else None,
    )


def child_error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def readonly_shm_fails_then_converges(tmp_path: Path, docs: Path, db: Path) -> None:
    shm = Path(f"{db}-shm")
    (docs / "d0.md").write_text("# Doc 0\n\nbeta rewritten text.\n", encoding="utf-8")
    for command in (["ingest", str(docs), "--json"], ["add", "one more note"]):
        done = kb_child(db, *command)
        assert done.returncode == 1, (done.stdout, done.stderr)
        if "--json" in command:  # the summary of what was written (nothing), with the error
            summary = json.loads(done.stdout)
            assert summary["added"] == summary["updated"] == 0 and "-shm" in summary["error"]
        else:
            assert done.stdout == ""
        line = child_error(done)
        assert f"{shm} is read-only" in line and "remove it while no kb process" in line, line
        assert "disk" not in line
    found = json.loads(kb_child(db, "search", "alpha", "--mode", "keyword", "--json").stdout)
    assert len(found) == 3  # nothing lost: the old version is still searched
    shm.unlink()  # the fix the message gives (no kb process is running)
    done = kb_child(db, "ingest", str(docs), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["updated"] == 1
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
    hits = json.loads(kb_child(db, "search", "rewritten", "--mode", "keyword", "--json").stdout)
    assert [Path(h["metadata"]["source"]).name for h in hits] == ["d0.md"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="capabilities and SQLite's -shm as on Linux")
def test_a_readonly_shm_left_by_a_reader_of_a_0444_database_is_named_with_the_fix(tmp_path):
    docs, db = docs_folder(tmp_path), tmp_path / "kb.db"
    assert kb_child(db, "ingest", str(docs)).returncode == 0
    db.chmod(0o444)
    assert kb_child(db, "search", "alpha", "--mode", "keyword").returncode == 0
    shm = Path(f"{db}-shm")
    assert shm.exists() and shm.stat().st_mode & 0o777 == 0o444  # what the reader left
    db.chmod(0o644)
    readonly_shm_fails_then_converges(tmp_path, docs, db)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="capabilities and SQLite's -shm as on Linux")
@pytest.mark.parametrize("made", ["mode-0444", "owned-by-nobody"])
def test_a_shm_nobody_may_write_beside_a_killed_writers_wal_is_named_with_the_fix(tmp_path, made):
    if made == "owned-by-nobody" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    docs, db = docs_folder(tmp_path), tmp_path / "kb.db"
    assert kb_child(db, "ingest", str(docs)).returncode == 0
    killed = (  # a writer killed after a commit: its -wal (with the commit) and -shm stay
        "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute(\"INSERT INTO meta VALUES ('marker', 'kept')\"); os._exit(9)"
    )
    subprocess.run([sys.executable, "-c", killed, str(db)], check=False)
    shm = Path(f"{db}-shm")
    assert shm.exists() and Path(f"{db}-wal").stat().st_size > 0
    if made == "mode-0444":
        shm.chmod(0o444)
    else:
        os.chown(shm, 65534, 65534)  # nobody
    readonly_shm_fails_then_converges(tmp_path, docs, db)
    check = sqlite3.connect(db)  # the killed writer's commit survived the removed -shm
    assert check.execute("SELECT value FROM meta WHERE key = 'marker'").fetchone() == ("kept",)
    check.close()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="capabilities as on Linux")
@pytest.mark.parametrize("part", ["database", "folder"])
def test_a_readonly_database_or_folder_is_named_not_a_full_disk(tmp_path, part):
    folder = tmp_path / "dbdir"
    folder.mkdir()
    docs, db = docs_folder(tmp_path), folder / "kb.db"
    assert kb_child(db, "ingest", str(docs)).returncode == 0
    (docs / "d0.md").write_text("# Doc 0\n\nbeta rewritten text.\n", encoding="utf-8")
    target = db if part == "database" else folder
    mode = target.stat().st_mode & 0o777
    target.chmod(0o444 if part == "database" else 0o555)
    try:
        for command in (["ingest", str(docs)], ["add", "one more note"]):
            done = kb_child(db, *command)
            assert done.returncode == 1, done.stderr
            line = child_error(done)
            expected = f"{db} is read-only" if part == "database" else f"folder {folder} is not"
            assert expected in line and "disk" not in line, line
    finally:
        target.chmod(mode)
    if part == "database":  # those runs left a -shm with the database's mode: 0444
        assert "kb.db-shm is read-only" in child_error(kb_child(db, "ingest", str(docs)))
        Path(f"{db}-shm").unlink()
    done = kb_child(db, "ingest", str(docs), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["updated"] == 1, done.stderr


# --- an index that can only be read here (issue 37, item 6) -----------------------------------
#
# A read-only bind mount is made in a mount namespace of the kb child alone (`unshare -m`, then
# `mount --bind -o ro`): it goes when the child exits, and nothing outside sees it. Where the
# machine does not allow that (no root, no user namespaces), those tests are skipped. The
# permission cases run the child without its file powers, as above.

MUTATIONS = (
    ["ingest", "DOCS"],
    ["add", "one more note about zebras"],
    ["delete", "--source", "DOCS/d0.md"],
)


needs_mount = pytest.mark.skipif(
    _can_mount() is not None, reason=f"a read-only bind mount: {_can_mount()}"
)


def kb_on_readonly_mount(folder: Path, mount: Path, *args: str) -> subprocess.CompletedProcess:
    """``kb ARGS`` with ``folder`` mounted read-only at ``mount`` (KB_DB: ``mount/kb.db``)."""
    script = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "KB_DB": str(mount / "kb.db")}
    command = [sys.executable, "-m", "kbcli", *args]
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(folder), str(mount), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file of ``folder``: size, modification time and bytes."""
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def readonly_index(tmp_path: Path, store: str = "sqlite", wal: str = "none") -> tuple[Path, Path]:
    """An index of docs_folder in ``tmp_path/index`` (its derived files removed, so a search
    would write them), and ``wal``: ``none`` (closed cleanly), ``pending`` (a writer killed
    right after committing a note: its -wal and -shm stay) or ``pending-no-shm``."""
    docs, folder = docs_folder(tmp_path), tmp_path / "index"
    folder.mkdir()
    db = folder / "kb.db"
    assert kb_child(db, "--store", store, "ingest", str(docs)).returncode == 0
    for derived in folder.iterdir():
        if derived.name not in ("kb.db", "kb.db.ingest-lock", "kb.db.chroma"):
            derived.unlink()  # the keyword pack, the matrix cache, the FAISS file
    if wal != "none":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "KB_DB": str(db)}
        env["KB_TEST_CRASH_AT"] = "after-commit"
        note = ["--store", store, "add", "pending zebra note"]
        done = subprocess.run([sys.executable, "-m", "kbcli", *note], env=env, timeout=120)
        assert done.returncode == 137 and Path(f"{db}-wal").stat().st_size > 0
        if wal == "pending-no-shm":
            Path(f"{db}-shm").unlink()
    return docs, folder


def hits(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [Path(h["metadata"].get("source") or h["id"]).name for h in json.loads(done.stdout)]


@pytest.mark.slow
@needs_mount
@pytest.mark.parametrize("wal", ["none", "pending"])
def test_an_index_on_a_readonly_mount_is_searched_and_writes_say_read_only(tmp_path, wal):
    docs, folder = readonly_index(tmp_path, wal=wal)
    mount = tmp_path / "mnt"
    mount.mkdir()
    before = snapshot(folder)

    def kb(*args: str) -> subprocess.CompletedProcess:
        return kb_on_readonly_mount(folder, mount, *args)

    for mode in ("keyword", "semantic", "hybrid"):
        found = hits(kb("search", "alpha text number 1", "--mode", mode, "--json"))
        assert "d1.md" in found, (mode, found)
    if wal == "pending":  # the commit still in the -wal is read through its -shm
        assert hits(kb("search", "zebra", "--mode", "keyword", "--json"))
    listed = kb("list", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 3 + (wal == "pending")
    got = kb("get", str(docs / "d1.md"), "--json")
    assert got.returncode == 0 and "alpha text number 1" in got.stdout, got.stderr
    stats = kb("stats", "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["read_only"] is True
    shown = kb("stats").stdout
    assert "Read-only     yes: searches work here, writes are refused" in shown
    for command in MUTATIONS:
        done = kb(*[part.replace("DOCS", str(docs)) for part in command])
        assert done.returncode == 1 and done.stdout == "", (command, done.stdout)
        assert child_error(done) == (
            f"Error: {mount / 'kb.db'} is on a read-only file system: copy it elsewhere, or "
            "mount it writable"
        )
    new = kb("--db", str(mount / "new.db"), "ingest", str(docs))
    assert new.returncode == 1 and child_error(new) == (
        f"Error: Cannot create {mount / 'new.db'}: its folder is read-only (a read-only file "
        "system): choose another --db path"
    )
    assert snapshot(folder) == before  # nothing written: no pack, no cache, no lock file


@needs_mount
def test_a_pending_wal_without_its_shm_on_a_readonly_mount_names_the_fix(tmp_path):
    _, folder = readonly_index(tmp_path, wal="pending-no-shm")
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = kb_on_readonly_mount(folder, mount, "search", "alpha", "--json")
    assert done.returncode == 1 and done.stdout == ""
    line = child_error(done)
    assert "kb.db-wal beside it holds writes not yet in the database" in line
    assert "open the index once where it can be written" in line
    assert "not a kb database" not in line
    assert kb_child(folder / "kb.db", "search", "zebra", "--json").returncode == 0  # writable


@pytest.mark.slow
@needs_mount
@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_faiss_and_chroma_indexes_on_a_readonly_mount_are_searched(tmp_path, store):
    from extras import need

    need("faiss" if store == "faiss" else "chromadb")
    docs, folder = readonly_index(tmp_path, store=store)
    mount = tmp_path / "mnt"
    mount.mkdir()
    before = snapshot(folder)
    chroma = folder / "kb.db.chroma"
    chroma_before = snapshot(chroma) if chroma.exists() else {}
    for mode in ("semantic", "hybrid"):
        done = kb_on_readonly_mount(
            folder, mount, "--store", store, "search", "alpha text number 2", "--mode", mode,
            "--json",
        )  # fmt: skip
        assert "d2.md" in hits(done)
    done = kb_on_readonly_mount(folder, mount, "--store", store, "add", "a note")
    assert done.returncode == 1 and "read-only file system" in child_error(done)
    assert snapshot(folder) == before
    assert (snapshot(chroma) if chroma.exists() else {}) == chroma_before


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="capabilities and SQLite's -shm as on Linux")
@pytest.mark.parametrize("part", ["folder", "database"])
def test_an_index_in_a_readonly_folder_or_file_is_searched_and_writes_say_read_only(tmp_path, part):
    docs, folder = readonly_index(tmp_path)
    db = folder / "kb.db"
    target = folder if part == "folder" else db
    mode = target.stat().st_mode & 0o777
    target.chmod(0o555 if part == "folder" else 0o444)
    try:
        assert "d1.md" in hits(kb_child(db, "search", "alpha text number 1", "--json"))
        stats = kb_child(db, "stats", "--json")
        assert json.loads(stats.stdout)["read_only"] is True
        for command in MUTATIONS:
            done = kb_child(db, *[p.replace("DOCS", str(docs)) for p in command])
            assert done.returncode == 1 and "read-only" in child_error(done), done.stderr
    finally:
        target.chmod(mode)
    for leftover in (Path(f"{db}-shm"), Path(f"{db}-wal")):  # a reader of a 0444 file's
        leftover.unlink(missing_ok=True)  # (SQLite gives them the file's mode; see above)
    assert kb_child(db, "add", "writable again").returncode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="capabilities as on Linux")
def test_a_readonly_folder_someone_may_still_write_is_not_read_without_locks(tmp_path):
    """A folder only its owner may write (0755, another owner): a writer may appear, so the
    index is not opened immutable; without a -shm to lock through, the line says what to do."""
    if os.geteuid() != 0:
        pytest.skip("giving the folder to another user needs root")
    _, folder = readonly_index(tmp_path)
    db = folder / "kb.db"
    os.chown(folder, 65534, 65534)  # nobody's folder, 0755: the child cannot create a -shm
    try:
        done = kb_child(db, "search", "alpha", "--json")
    finally:
        os.chown(folder, 0, 0)
    assert done.returncode == 1
    line = child_error(done)
    assert "SQLite cannot create kb.db-shm beside it" in line
    assert f"chmod a-w {folder}" in line and "not a kb database" not in line
