"""kill -9 at random moments of an ingest: every file stays at its old version, its new version,
or absent, and the next run finishes the work."""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.sync import sync

SRC = str(Path(__file__).resolve().parents[1] / "src")

INGEST_SCRIPT = """
import sys, time
from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.sync import sync

class SlowEmbedder(SimpleEmbedder):
    def _embed_batch(self, texts):
        time.sleep(0.004 * len(texts))  # stretch the run so the kill lands mid-way
        return super()._embed_batch(texts)

kb = KnowledgeBase.open(sys.argv[1], embedder=SlowEmbedder())
print("started", flush=True)
sync(kb, [sys.argv[2]], prune=True)
print("finished", flush=True)
"""

N_FILES = 40


def write_version(docs: Path, version: int, rng: random.Random) -> None:
    for i in range(N_FILES):
        path = docs / f"f{i:02d}.md"
        if version > 0 and i % 7 == version % 7:
            path.unlink(missing_ok=True)  # some files vanish, come back later
            continue
        paragraphs = [
            f"v{version} file{i} paragraph{j} " + f"v{version}word " * rng.randint(20, 60)
            for j in range(6)
        ]
        path.write_text("\n\n".join(paragraphs))


def check_consistent(db: Path, allowed_versions: dict[str, set[int]]) -> dict[str, int]:
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    kb = KnowledgeBase.open(db, embedder=SimpleEmbedder())
    assert kb.store.integrity_check() == []
    records = kb.store.file_records()
    by_source: dict[str, list] = {}
    for doc in kb.store.list_all():
        by_source.setdefault(doc.metadata["source"], []).append(doc)
    assert set(by_source) <= set(records)  # no chunk without a file record
    state = {}
    for path, record in records.items():
        docs = by_source.get(path, [])
        assert sorted(record.chunk_ids) == sorted(d.id for d in docs), path
        versions = {int(v) for d in docs for v in re.findall(r"\bv(\d+)", d.text)}
        assert len(versions) == 1, (path, versions)  # never a mix of two versions
        version = versions.pop()
        assert version in allowed_versions.get(path, {version}), (path, version)
        state[path] = version
    kb.close()
    return state


@pytest.mark.slow
def test_kill_minus_nine_at_random_moments(tmp_path):
    rng = random.Random(int(os.environ.get("KB_CRASH_SEED", "1234")))
    docs = tmp_path / "docs"
    docs.mkdir()
    db = tmp_path / "kb.db"
    write_version(docs, 0, rng)
    sync(KnowledgeBase.open(db, embedder=SimpleEmbedder()), [docs])
    state = check_consistent(db, {})
    env = {**os.environ, "PYTHONPATH": SRC}
    kills = 0
    for version in range(1, 6):
        write_version(docs, version, rng)
        proc = subprocess.Popen(
            [sys.executable, "-c", INGEST_SCRIPT, str(db), str(docs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout.readline().strip() == b"started"
        time.sleep(rng.uniform(0.02, 0.8))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(30)
        allowed = {path: {old, version} for path, old in state.items()}
        new_state = check_consistent(db, allowed)
        for path, v in new_state.items():
            assert v in allowed.get(path, {version})
        state = new_state
    assert kills >= 3  # the moments really fell inside runs
    # The next run finishes the work: every present file at the last version, vanished ones pruned.
    report = sync(KnowledgeBase.open(db, embedder=SimpleEmbedder()), [docs], prune=True)
    assert report.failed == []
    final = check_consistent(db, {})
    present = {str(p.resolve()) for p in docs.glob("*.md")}
    assert set(final) == present and set(final.values()) == {5}
