"""Freshness through the real ``kb`` (``python -m kbcli`` subprocesses on a real SQLite
index): the table's markers and note, ``--json``'s states and watermark, ``--stale hide`` and
``--stale fail`` (exit 6, one line), ``kb get --json``, and a held vector fill (the gated
embedder) -> ``vectors_pending`` and ``syncing`` while held, ``current`` once filled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
TESTS = str(Path(__file__).resolve().parents[1])


class Kb:
    def __init__(self, tmp: Path, config: str = ""):
        self.tmp = tmp
        self.env = {
            **os.environ,
            "KB_DB": str(tmp / "kb.db"),
            "PYTHONPATH": os.pathsep.join([SRC, TESTS]),
            "COLUMNS": "160",
        }
        if config:
            (tmp / "kb.yaml").write_text(config)
            self.env["KB_CONFIG"] = str(tmp / "kb.yaml")

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kbcli", *args],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def json(self, *args: str):
        done = self(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def kb(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "alpha.md").write_text("# Alpha\n\nThe alpha reactor runs on heavy water.\n")
    (notes / "beta.md").write_text("# Beta\n\nThe beta reactor runs on molten salt.\n")
    (notes / "gamma.md").write_text("# Gamma\n\nThe gamma reactor runs on thorium.\n")
    run = Kb(tmp_path)
    assert run("ingest", str(notes)).returncode == 0
    assert run("add", "A reactor log kept only in the index").returncode == 0
    return run, notes


def states(hits) -> dict[str, str]:
    return {
        Path(h["metadata"]["source"]).name if "source" in h["metadata"] else "added": h[
            "freshness"
        ]["state"]
        for h in hits
    }


def test_states_reach_json_with_the_watermark(kb):
    run, notes = kb
    (notes / "alpha.md").write_text("# Alpha\n\nThe alpha reactor was shut down, for good.\n")
    (notes / "beta.md").unlink()
    gamma = notes / "gamma.md"
    os.utime(gamma, ns=(gamma.stat().st_atime_ns, gamma.stat().st_mtime_ns + 10**10))
    hits = run.json("search", "reactor", "-k", "10")
    assert isinstance(hits, list)
    assert states(hits) == {
        "alpha.md": "changed",
        "beta.md": "missing",
        "gamma.md": "current",
        "added": "not_a_file",
    }
    index = hits[0]["index"]
    assert set(index) == {"changed_at", "syncing", "vectors_pending"}
    assert index["syncing"] is False and index["vectors_pending"] == 0
    assert all(h["index"] == index for h in hits)
    assert all(h["freshness"]["indexed_at"] for h in hits)


def test_the_table_marks_hits_and_says_what_to_run(kb):
    run, notes = kb
    (notes / "beta.md").unlink()
    done = run("search", "reactor", "-k", "10")
    assert done.returncode == 0, done.stderr
    assert "(missing)" in done.stdout and "(note)" in done.stdout
    assert "(changed)" not in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert "missing = the file is gone" in last and f"Run: kb ingest {notes}" in last


def test_stale_fail_exits_6_with_one_line_and_hide_leaves_them_out(kb):
    run, notes = kb
    (notes / "beta.md").unlink()
    done = run("search", "beta reactor", "--stale", "fail")
    assert done.returncode == 6
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "beta.md (missing)" in lines[0] and "kb ingest" in lines[0]
    hits = run.json("search", "beta reactor", "--stale", "hide", "-k", "3")
    assert len(hits) == 3 and "beta.md" not in states(hits)
    bad = run("search", "reactor", "--stale", "later")
    assert bad.returncode == 2 and "hide, flag, fail" in bad.stderr
    assert run("search", "reactor", "--stale", "flag").returncode == 0


def test_kb_get_says_the_state(kb):
    run, notes = kb
    path = notes / "gamma.md"
    assert run.json("get", str(path))["freshness"]["state"] == "current"
    path.write_text("# Gamma\n\nRewritten after indexing, and longer than before.\n")
    shown = run.json("get", str(path))
    assert shown["freshness"]["state"] == "changed"
    assert shown["origin"] == "chunks"


def test_a_held_vector_fill_is_vectors_pending_then_current(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(12):
        (notes / f"n{i:02}.md").write_text(f"# Note {i}\n\nThe pump {i} needs oil weekly.\n")
    run = Kb(tmp_path, "rag:\n  embedding:\n    provider: 'gated_embedder:GatedEmbedder'\n")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**run.env, "KB_TEST_GATE": str(gate), "KB_TEST_GATE_AFTER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbcli", "ingest", str(notes)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (gate / "waiting").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        hits = run.json("search", "pump oil", "--mode", "keyword", "-k", "12", "--by", "chunk")
        assert "vectors_pending" in set(states(hits).values())
        assert hits[0]["index"]["syncing"] is True
        assert hits[0]["index"]["vectors_pending"] > 0
    finally:
        (gate / "go").touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    hits = run.json("search", "pump oil", "--mode", "keyword", "-k", "12", "--by", "chunk")
    assert set(states(hits).values()) == {"current"}
    assert hits[0]["index"] == {
        "changed_at": hits[0]["index"]["changed_at"],
        "syncing": False,
        "vectors_pending": 0,
    }
