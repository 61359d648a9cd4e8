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

from cli_helpers import run, run_json
from kbcli import KnowledgeBase, StoreError
from kbcli.embedders import SimpleEmbedder
from kbcli.stores.sqlite import SQLiteStore
from kbcli.sync import sync


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

    real = SQLiteStore.replace_file

    def full(self, *args, **kwargs):
        real(self, *args, **kwargs)  # the rows are written, then the disk fills up
        raise error

    monkeypatch.setattr(SQLiteStore, "replace_file", full)
    result = run("ingest", str(docs))
    assert result.exit_code == 1
    line = one_line(result)
    assert "Writing to" in line and ("space" in line or "full" in line)
    monkeypatch.setattr(SQLiteStore, "replace_file", real)
    after = run_json("list", "--limit", "0", "--json")[0]
    assert sorted(d["text"] for d in after) == sorted(d["text"] for d in before)
    assert run("search", "alpha", "--mode", "keyword").exit_code == 0


def test_a_run_stopped_by_an_error_still_prints_its_json_summary(tmp_path):
    """kb ingest --json: the summary line comes even when an error ends the run (here the
    lock of another ingest), with the error that stderr shows."""
    from kbcli.sync import ingest_lock

    docs = docs_folder(tmp_path)
    with ingest_lock(Path(os.environ["KB_DB"]), 0.0):
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
        "replace_file",
        lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")),
    )
    with pytest.raises(StoreError, match="No space left on device"):
        sync(kb, [docs])
    assert kb.store.count() == 0


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
    from kbcli.filters import validate_filter

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
