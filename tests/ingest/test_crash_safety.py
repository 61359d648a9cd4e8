"""kill -9 at random moments of ``kb ingest`` (issue 17, matrix item 1).

A 300-file mixed corpus (markdown, text, HTML, real PDFs and DOCX) changes between trials
(edits, deletions, additions, renames); each trial runs the real ``kb`` entry point in a
subprocess with the built-in embedder and kills it with SIGKILL at a moment drawn uniformly
from a measured run's duration (re-measured by the runs that finish before their kill, as the
machine's load changes). Before the kill the process is stopped (SIGSTOP) and its locks
read from ``/proc/locks``: holding the SQLite WAL write lock means the kill lands inside a write
transaction. Uniform moments rarely fall inside the short write transactions, so a fifth as
many extra kills wait until the process is seen holding that lock.

After every kill: ``PRAGMA integrity_check`` is ok, the store's own integrity check is clean,
and every file is wholly at one version it had (its record's hash is that version's bytes) or
absent. Every ``CONVERGE_EVERY`` trials and at the end, a normal run converges to exactly the
chunks (texts, metadata, vectors; ids consistent) of a fresh database that ingested the same
tree, and ``kb doctor`` finds no drift.

50 trials (+10 timed into a transaction) in CI, about 3 minutes on 2 cores; ``KB_STRESS=1``
runs 200 (+40); ``KB_CRASH_TRIALS=N`` and ``KB_CRASH_SEED=N`` override. The figures print
with ``pytest -s``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kbcli.ingest.writes as writes_module
from hostile import make_docx, make_pdf
from kbcli import KnowledgeBase, SQLiteStore, StoreError
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.sync import sync

SRC = str(Path(__file__).resolve().parents[2] / "src")
STRESS = os.environ.get("KB_STRESS") == "1"
TRIALS = int(os.environ.get("KB_CRASH_TRIALS", "200" if STRESS else "50"))
TARGETED = TRIALS // 5  # extra kills timed to land inside a write transaction
SEED = int(os.environ.get("KB_CRASH_SEED", "1234"))
N_FILES = 300
KINDS = (".md", ".txt", ".html", ".pdf", ".docx")
EXT = ",".join(KINDS)
CONVERGE_EVERY = 25
TAG = re.compile(r"\bver(\d+)x\b")


# --- the corpus -------------------------------------------------------------------------------


def paragraphs(name: str, version: int, rng: random.Random) -> list[str]:
    """Text of one version of a file: every paragraph carries the version tag."""
    topics = ["invoices", "travel", "passwords", "gardening", "backups", "vpn", "onboarding"]
    out = []
    for j in range(rng.randint(2, 5)):
        words = " ".join(rng.choice(topics) + f"{rng.randrange(50)}" for _ in range(25))
        out.append(f"ver{version}x {name} part{j} {words} ver{version}x.")
    return out


def render(path: Path, version: int, rng: random.Random) -> bytes:
    """The bytes of ``path`` at ``version`` in its format (a real PDF or DOCX for those)."""
    name = path.stem
    paras = paragraphs(name, version, rng)
    kind = path.suffix
    if kind == ".md":
        body = "\n\n".join(f"## Section {i} ver{version}x\n\n{p}" for i, p in enumerate(paras))
        return f"# {name} ver{version}x\n\n{body}\n".encode()
    if kind == ".txt":
        return ("\n\n".join(paras) + "\n").encode()
    if kind == ".html":
        items = "".join(f"<h2>Part {i} ver{version}x</h2><p>{p}</p>" for i, p in enumerate(paras))
        return f"<html><head><title>t</title></head><body>{items}</body></html>".encode()
    if kind == ".pdf":
        return make_pdf(paras)  # one page per paragraph
    tmp = path.with_name(f".{name}.tmp.docx")
    make_docx(tmp, [("h1", f"{name} ver{version}x")] + [("p", p) for p in paras])
    data = tmp.read_bytes()
    tmp.unlink()
    return data


@dataclass
class Tree:
    """The folder on disk and what every (path, version) looked like."""

    root: Path
    rng: random.Random
    files: dict[str, int] = field(default_factory=dict)  # path -> version on disk
    shas: dict[tuple[str, int], str] = field(default_factory=dict)
    next_id: int = 0

    def write(self, path: Path, version: int) -> None:
        data = render(path, version, self.rng)
        path.write_bytes(data)
        self.files[str(path)] = version
        self.shas[(str(path), version)] = hashlib.sha256(data).hexdigest()

    def new_path(self) -> Path:
        self.next_id += 1
        return self.root / f"doc{self.next_id:04d}{KINDS[self.next_id % len(KINDS)]}"

    def populate(self, n: int) -> None:
        self.root.mkdir()
        for _ in range(n):
            self.write(self.new_path(), 0)

    def mutate(self, version: int) -> dict[str, int]:
        """Edit about a quarter of the files, delete, add and rename a few; returns counts."""
        rng = self.rng
        paths = sorted(self.files)
        counts = {"edited": 0, "deleted": 0, "added": 0, "renamed": 0}
        for p in rng.sample(paths, k=len(paths) // 4):
            self.write(Path(p), version)
            counts["edited"] += 1
        for p in rng.sample(sorted(self.files), k=4):
            Path(p).unlink()
            del self.files[p]
            counts["deleted"] += 1
        for p in rng.sample(sorted(self.files), k=4):
            old = Path(p)
            new = self.new_path().with_suffix(old.suffix)
            old.rename(new)
            v = self.files.pop(p)
            self.files[str(new)] = v
            self.shas[(str(new), v)] = self.shas[(p, v)]
            counts["renamed"] += 1
        while len(self.files) < N_FILES:
            self.write(self.new_path(), version)
            counts["added"] += 1
        return counts


# --- running kb -------------------------------------------------------------------------------


def kb_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("KB_TEST_CRASH_AT", None)
    return env


def kb_command(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "kbcli", "--db", str(db), *args]


INGEST_ARGS = ("--ext", EXT, "--prune", "--allow-mass-delete")


def ingest(db: Path, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        kb_command(db, "ingest", str(root), *INGEST_ARGS, "--json"),
        capture_output=True,
        text=True,
        env=kb_env(),
        timeout=600,
    )


def wal_write_lock_holder(db: Path) -> set[int]:
    """Pids holding SQLite's WAL write lock (byte 120 of ``<db>-shm``), from /proc/locks."""
    try:
        st = os.stat(f"{db}-shm")
    except FileNotFoundError:
        return set()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "->" in parts:  # a waiter, not a holder
            continue
        if len(parts) >= 8 and parts[1] == "POSIX" and parts[3] == "WRITE" and parts[5] == dev:
            start, end = parts[6], parts[7]
            if int(start) <= 120 and (end == "EOF" or int(end) >= 120):
                holders.add(int(parts[4]))
    return holders


def killed_run(db: Path, root: Path, delay: float | None) -> tuple[str, float | None]:
    """Start ``kb ingest`` and SIGKILL it ``delay`` seconds later (None: as soon as it is seen
    inside a write transaction); where the kill landed (``mid-transaction``, ``elsewhere`` or
    ``after-exit``: the run had finished) and, for a run that finished, how long it took."""
    err = db.with_name("killed-run.err")
    with err.open("wb") as fh:
        proc = subprocess.Popen(
            kb_command(db, "ingest", str(root), *INGEST_ARGS),
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=kb_env(),
        )
    started = time.monotonic()
    while delay is not None and time.monotonic() - started < delay and proc.poll() is None:
        time.sleep(0.005)
    while proc.poll() is None:
        if delay is None and proc.pid not in wal_write_lock_holder(db):
            time.sleep(0.002)
            continue
        proc.send_signal(signal.SIGSTOP)  # frozen: the lock read is the one held when killed
        _wait_stopped(proc.pid)
        inside = proc.pid in wal_write_lock_holder(db)
        if delay is None and not inside:
            proc.send_signal(signal.SIGCONT)  # the transaction ended meanwhile: wait for one
            continue
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        return ("mid-transaction" if inside else "elsewhere"), None
    took = time.monotonic() - started
    assert proc.wait() == 0, err.read_text()[-2000:]
    return "after-exit", took


def _wait_stopped(pid: int) -> None:
    for _ in range(1000):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)


# --- checks -----------------------------------------------------------------------------------


def check_after_kill(db: Path, tree: Tree, allowed: dict[str, set[int]]) -> dict[str, int]:
    """The invariants after a crash; returns the version of each indexed file."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    state: dict[str, int] = {}
    with SQLiteStore(db, create=False) as store:
        assert store.integrity_check() == []
        records = store.file_records()
        by_source: dict[str, list] = {}
        for doc in store.iter_documents():
            by_source.setdefault(doc.metadata["source"], []).append(doc)
        assert set(by_source) <= set(records), "chunks without a file record"
        for path, record in records.items():
            docs = by_source.get(path, [])
            assert sorted(record.chunk_ids) == sorted(d.id for d in docs), path
            versions = {int(v) for d in docs for v in TAG.findall(d.text)}
            assert len(versions) == 1, (path, versions)  # never a mix of two versions
            assert all(TAG.search(d.text) for d in docs), path
            (version,) = versions
            assert version in allowed.get(path, set()), (path, version, allowed.get(path))
            assert record.sha256 == tree.shas[(path, version)], f"{path}: hash of neither version"
            state[path] = version
    return state


def snapshot(db: Path) -> dict[str, list[tuple]]:
    """Per file: its chunks in order as (chunk_index, text, metadata, vector); the ids are
    checked to be unique and to be the ones the file record lists."""
    with SQLiteStore(db, create=False) as store:
        records = store.file_records()
        out: dict[str, list[tuple]] = {}
        ids: dict[str, set[str]] = {}
        for doc in store.iter_documents(with_embeddings=True):
            source = doc.metadata["source"]
            ids.setdefault(source, set()).add(doc.id)
            meta = json.dumps(doc.metadata, sort_keys=True)
            vector = tuple(round(x, 6) for x in doc.embedding)
            out.setdefault(source, []).append((doc.metadata["chunk_index"], doc.text, meta, vector))
        assert set(out) <= set(records)
        for source, got in ids.items():
            assert got == set(records[source].chunk_ids), source
    return {source: sorted(chunks) for source, chunks in out.items()}


def check_converges(db: Path, tree: Tree, reference_db: Path) -> None:
    """A normal run, then exactly the chunks of a fresh database ingesting the same tree."""
    done = ingest(db, tree.root)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["failed"] == []
    for suffix in ("", "-wal", "-shm", ".vectors-cache", ".keyword-pack", ".ingest-lock"):
        Path(f"{reference_db}{suffix}").unlink(missing_ok=True)
    fresh = ingest(reference_db, tree.root)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    got, want = snapshot(db), snapshot(reference_db)
    assert set(got) == set(want) == set(tree.files)
    for source in want:
        assert got[source] == want[source], source
    doctor = subprocess.run(
        kb_command(db, "doctor", "--json"), capture_output=True, text=True, env=kb_env()
    )
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["ok"], doctor.stdout


# --- the test ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads /proc/locks (Linux)")
def test_kill_minus_nine_at_random_moments_of_kb_ingest(tmp_path):
    rng = random.Random(SEED)
    tree = Tree(tmp_path / "docs", rng)
    tree.populate(N_FILES)
    db, reference = tmp_path / "kb.db", tmp_path / "reference.db"
    started = time.monotonic()
    full = ingest(db, tree.root)
    full_seconds = time.monotonic() - started
    assert full.returncode == 0 and json.loads(full.stdout)["added"] == N_FILES, full.stderr
    state = check_after_kill(db, tree, {p: {0} for p in tree.files})
    # A trial's run re-reads the changed files: its duration, measured once on a normal run.
    tree.mutate(1)
    started = time.monotonic()
    assert ingest(db, tree.root).returncode == 0
    run_seconds = measured = time.monotonic() - started
    state = check_after_kill(db, tree, {p: {v} for p, v in tree.files.items()})
    landed = {"mid-transaction": 0, "elsewhere": 0, "after-exit": 0}
    targeted = {"mid-transaction": 0, "elsewhere": 0, "after-exit": 0}
    changes = {"edited": 0, "deleted": 0, "added": 0, "renamed": 0}
    kinds = ["uniform"] * TRIALS + ["targeted"] * TARGETED
    rng.shuffle(kinds)
    converged = 0
    spent = dict.fromkeys(("changing files", "killed runs", "checks", "converging"), 0.0)
    clock = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.monotonic()
        spent[phase] += now - clock
        clock = now

    for trial, kind in enumerate(kinds):
        version = trial + 2
        for key, n in tree.mutate(version).items():
            changes[key] += n
        allowed = {p: {v} for p, v in state.items()}
        for p, v in tree.files.items():
            allowed.setdefault(p, set()).add(v)
        lap("changing files")
        if kind == "uniform":
            where, took = killed_run(db, tree.root, rng.uniform(0, run_seconds))
            landed[where] += 1
        else:
            where, took = killed_run(db, tree.root, None)
            targeted[where] += 1
        if took is not None:
            # The machine's load changes: follow the runs that finished (a little beyond them,
            # so the end of a run is reached too).
            run_seconds = 0.7 * run_seconds + 0.3 * 1.1 * took
        lap("killed runs")
        state = check_after_kill(db, tree, allowed)
        lap("checks")
        if (trial + 1) % CONVERGE_EVERY == 0 or trial == len(kinds) - 1:
            check_converges(db, tree, reference)
            converged += 1
            state = dict(tree.files)
            lap("converging")
    print(
        f"\nkill -9 matrix: {TRIALS} trials over {N_FILES} files ({EXT}); full run "
        f"{full_seconds:.1f} s, trial run {measured:.1f} s (at the end {run_seconds:.1f} s); "
        f"kills mid-transaction {landed['mid-transaction']}, elsewhere {landed['elsewhere']}, "
        f"after the run ended {landed['after-exit']}; plus {TARGETED} kills timed into a write "
        f"transaction ({targeted['mid-transaction']} landed there); changes {changes}; {converged} "
        "convergence checks, all equal to a fresh ingest; seconds spent: "
        + ", ".join(f"{phase} {seconds:.0f}" for phase, seconds in spent.items())
    )
    assert landed["mid-transaction"] + landed["elsewhere"] >= TRIALS // 4  # inside runs
    assert targeted["mid-transaction"] >= TARGETED // 2


def test_a_big_file_written_in_slices_is_still_all_or_nothing(tmp_path, monkeypatch):
    """A file of more chunks than WRITE_BATCH_CHUNKS goes to the store in slices inside its
    one transaction: a failure in a later slice leaves the old version whole."""
    monkeypatch.setattr(writes_module, "WRITE_BATCH_CHUNKS", 3)
    docs = tmp_path / "docs"
    docs.mkdir()
    big = docs / "big.md"

    def version(n: int) -> str:
        return "\n\n".join(f"## Part {i}\n\nver{n}x part {i} " + "word " * 40 for i in range(10))

    def chunks(kb: KnowledgeBase) -> list[tuple[int, str]]:
        return sorted((d.metadata["chunk_index"], d.text) for d in kb.store.iter_documents())

    big.write_text(version(1), encoding="utf-8")
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    sync(kb, [docs])
    old = chunks(kb)
    assert len(old) >= 9  # three slices or more
    big.write_text(version(2), encoding="utf-8")
    store_type = type(kb.store)
    real_add = store_type.add
    calls = []

    def add_failing_on_the_second_slice(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(store_type, "add", add_failing_on_the_second_slice)
    with pytest.raises(StoreError, match="No space left"):
        sync(kb, [docs])
    assert chunks(kb) == old and kb.store.integrity_check() == []
    monkeypatch.setattr(store_type, "add", real_add)
    sync(kb, [docs])
    fresh = KnowledgeBase.open(tmp_path / "fresh.db", embedder=SimpleEmbedder())
    sync(fresh, [docs])
    assert chunks(kb) == chunks(fresh) and TAG.findall(chunks(kb)[-1][1]) == ["2"]
    record = kb.store.file_records()[str(big.resolve())]
    assert sorted(record.chunk_ids) == sorted(d.id for d in kb.store.iter_documents())
    assert kb.store.integrity_check() == []
