"""PostgresStore reading from a streaming-replication hot standby (``store.read_dsn``), on two
real PostgreSQL servers started here (``tests/pg_server.ReplicaPair``: a primary and a
``pg_basebackup -R`` standby of it). Searches and reads go to the standby, writes, the writer
lock, the ledger and ``kb stats`` to the primary; a process reads its own writes; a standby that
is down is one line naming ``store.read_dsn``; and a search loop on the standby while
``kb ingest`` rewrites files on the primary never sees part of a file or two versions of one.

Which server answered is proven by pausing the standby's replay (``pg_wal_replay_pause``): what
the primary commits afterwards is on the primary only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest

from extras import need
from kbcli import Document

need("psycopg")

import psycopg  # noqa: E402

from kbcli.stores.postgres import PostgresStore  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
MARK = re.compile(r"file(\d+) version(\d+) part(\d+) of(\d+)")


@pytest.fixture
def pair(pg_pair):
    """The session's primary and standby, left replaying and caught up by every test."""
    yield pg_pair
    if not (pg_pair.standby / "postmaster.pid").exists():
        pg_pair.start_standby()
    with psycopg.connect(pg_pair.read_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_resume()")
    pg_pair.caught_up()


@contextmanager
def replay_paused(pair):
    """The standby stops replaying (what the primary commits meanwhile is there only)."""
    with psycopg.connect(pair.read_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != "paused":
            time.sleep(0.01)
        try:
            yield
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")


def doc(i: str, text: str, source: str = "/notes/a.md") -> Document:
    return Document(i, text, {"source": source})


def ids(hits) -> list[str]:
    return sorted(h.document.id for h in hits)


@pytest.mark.slow
def test_searches_and_reads_go_to_the_standby(pair, pg_table):
    writer = PostgresStore(pair.dsn, pg_table)
    first = [doc("a", "restart the vpn client"), doc("b", "vpn tokens expire", "/b.md")]
    writer.add(first, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    pair.caught_up()
    reader = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    try:
        with replay_paused(pair):
            later = [doc("c", "vpn on the new laptop", "/c.md"), doc("d", "vpn", "/d.md")]
            writer.add(later, [[1.0, 0.1, 0.0], [0.9, 0.0, 0.1]])
            writer.remove(["a"])
            # every read of the reader: the standby's (c and d missing, a still there)
            assert ids(reader.keyword_search("vpn", k=10)) == ["a", "b"]
            assert ids(reader.search([1.0, 0.0, 0.0], k=10)) == ["a", "b"]
            assert [d.id for d in reader.get(["a", "c"])] == ["a"]
            assert sorted(d.id for d in reader.iter_documents()) == ["a", "b"]
            assert reader.count() == 2
            assert [s for s, _ in reader.sources()] == ["/b.md", "/notes/a.md"]
            assert reader.stats()["chunks"] == 3  # the figures: the primary's (b, c, d)
        pair.caught_up()
        assert ids(reader.keyword_search("vpn", k=10)) == ["b", "c", "d"]
        assert reader.read_location is not None and "standby" in reader.read_location
    finally:
        reader.close()
        writer.close()


def test_a_process_reads_its_own_writes(pair, pg_table):
    """After the store commits, its reads stay on the primary until the standby has replayed
    that commit; another process's reader sees the standby meanwhile."""
    store = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    store.add([doc("a", "printer jam on floor two")])
    pair.caught_up()
    other = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    try:
        assert ids(other.keyword_search("printer")) == ["a"]
        with replay_paused(pair):
            store.add([doc("b", "printer toner", "/b.md")])
            assert ids(store.keyword_search("printer")) == ["a", "b"]  # its own write
            assert ids(other.keyword_search("printer")) == ["a"]  # the standby's view
            assert store._db.unreplayed is not None  # still waiting for the standby
        pair.caught_up()
        assert ids(store.keyword_search("printer")) == ["a", "b"]
        assert store._db.unreplayed is None  # the standby caught up: reads went back to it
        assert ids(other.keyword_search("printer")) == ["a", "b"]
    finally:
        other.close()
        store.close()


def test_an_index_created_while_the_standby_lags_is_searchable_at_once(pair, pg_table):
    """A store never reads older than the primary was when it opened."""
    with replay_paused(pair):
        writer = PostgresStore(pair.dsn, pg_table)
        writer.add([doc("a", "badge office hours")])
        reader = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn, create=False)
        try:
            assert ids(reader.keyword_search("badge")) == ["a"]  # from the primary
        finally:
            reader.close()
            writer.close()


def test_the_writer_lock_ledger_and_cache_read_the_primary(pair, pg_table):
    from kbcli.embedders.base import EmbedderInfo
    from kbcli.types import FileRecord

    writer = PostgresStore(pair.dsn, pg_table)
    writer.add([doc("a", "wifi password rotation")])
    pair.caught_up()
    reader = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    info = EmbedderInfo("simple", "hash", 3)
    try:
        with replay_paused(pair):
            record = FileRecord("/w.md", 1.0, 10, "abc", ["w1"])
            writer.replace_file(record, [doc("w1", "wifi guest network", "/w.md")], None)
            writer.cache_embeddings(info, {"wifi": [1.0, 0.0, 0.0]})
            assert ids(reader.keyword_search("wifi")) == ["a"]  # the standby
            assert set(reader.file_records()) == {"/w.md"}  # the ledger: the primary
            assert reader.cached_embeddings(info, ["wifi"]) == {"wifi": [1.0, 0.0, 0.0]}
            with reader.writer_lock(5.0):  # a writer reads what is on the primary
                assert ids(reader.keyword_search("wifi")) == ["a", "w1"]
            assert ids(reader.keyword_search("wifi")) == ["a"]
            assert reader.doctor() and all(f.ok for f in reader.doctor())
    finally:
        reader.close()
        writer.close()


def test_stats_report_the_standby_replay(pair, pg_table):
    store = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    try:
        store.add([doc("a", "mail quota")])
        pair.caught_up()
        standby = store.stats()["read_server"]
        assert standby["in_recovery"] is True and standby["behind_bytes"] == 0
        assert standby["replay_delay_seconds"] == 0 and standby["path"].endswith("/postgres")
        with replay_paused(pair):
            store.add([doc("b", "mail filters " * 200, "/b.md")])
            paused = store.stats()["read_server"]
            assert paused["behind_bytes"] > 0 and paused["replay_lsn"] == standby["replay_lsn"]
            assert store.stats()["chunks"] == 2  # the primary's count
        assert PostgresStore(pair.dsn, pg_table).stats().get("read_server") is None
    finally:
        store.close()


def test_read_dsn_from_the_environment_and_empty_to_turn_it_off(pair, pg_table, monkeypatch):
    PostgresStore(pair.dsn, pg_table).close()
    monkeypatch.setenv("KB_PG_READ_DSN", pair.read_dsn)
    with PostgresStore(pair.dsn, pg_table) as store:
        assert store.read_location is not None
    with PostgresStore(pair.dsn, pg_table, read_dsn="") as store:
        assert store.read_location is None and "read_server" not in store.stats()


def test_a_server_that_is_not_a_replica_is_refused(pair, pg_table, pg_dsn):
    """The session's other server holds its own index of that name: searching it would serve
    another database's data; its system identifier differs, so it is one line instead."""
    PostgresStore(pg_dsn, pg_table).close()
    store = PostgresStore(pair.dsn, pg_table, read_dsn=pg_dsn)
    try:
        with pytest.raises(Exception) as info:
            store.keyword_search("anything")
        message = str(info.value)
        assert type(info.value).__name__ == "StoreError" and "\n" not in message
        assert "is not a replica of store.dsn" in message and "store.read_dsn" in message
    finally:
        store.close()


def test_an_unreachable_read_server_is_one_line_and_redacted(pair, pg_table):
    PostgresStore(pair.dsn, pg_table).close()
    nowhere = f"host={pair.folder}/nowhere dbname=postgres user=postgres password=s3cretpw"
    store = PostgresStore(pair.dsn, pg_table, read_dsn=nowhere)
    try:
        with pytest.raises(Exception) as info:
            store.count()
        message = str(info.value)
        assert message.startswith("Cannot connect to the read server (store.read_dsn) at ")
        assert "remove both to search the primary" in message and "s3cretpw" not in message
        assert "error" in store.stats()["read_server"]  # kb stats still answers
        store.add([doc("a", "writes never need the standby")])
    finally:
        store.close()


def test_a_long_lived_store_recovers_when_the_standby_is_back(pair, pg_table):
    """kb mcp, a library user: the search that meets a stopped standby is one error naming
    store.read_dsn; the next one after it is back opens a new connection."""
    store = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn)
    try:
        store.add([doc("a", "payroll dates")])
        pair.caught_up()
        assert ids(store.keyword_search("payroll")) == ["a"]
        pair.stop_standby()
        with pytest.raises(Exception) as info:
            store.keyword_search("payroll")
        message = str(info.value)
        assert message.startswith("Lost the connection to the read server (store.read_dsn)")
        assert "\n" not in message and "then search again" in message
        pair.start_standby()
        assert ids(store.keyword_search("payroll")) == ["a"]
    finally:
        store.close()


class Kb:
    """``kb`` in a subprocess with a config naming the pair (``store.read_dsn``)."""

    def __init__(self, tmp_path: Path, pair, table: str):
        self.tmp = tmp_path
        self.config = tmp_path / "cfg" / "jianmu.yaml"
        self.config.parent.mkdir(exist_ok=True)
        self.config.write_text(
            f"store:\n  backend: postgres\n  table: {table}\n  hnsw: false\n"
            f"  dsn: '{pair.dsn}'\n  read_dsn: '{pair.read_dsn}'\n"
            "rag:\n  embedding:\n    provider: simple\n"
        )

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "KB_CONFIG": str(self.config), "PYTHONPATH": SRC}
        env.pop("KB_PG_DSN", None)
        return subprocess.run(
            [sys.executable, "-m", "kbcli", *args], env=env, cwd=self.tmp,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip


@pytest.mark.slow
def test_kb_with_the_standby_down(pair, pg_table, tmp_path):
    """kb ingest writes with the standby down; kb search is one line naming store.read_dsn;
    kb stats says where the read server stands; all is well once it is back."""
    kb = Kb(tmp_path, pair, pg_table)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "vpn.md").write_text("# VPN\n\nRestart the vpn client after an update.\n")
    pair.stop_standby()
    done = kb("-q", "ingest", str(notes))
    assert done.returncode == 0, done.stderr
    down = kb("search", "vpn", "--mode", "keyword")
    assert down.returncode == 1 and "Traceback" not in down.stderr
    lines = down.stderr.strip().splitlines()
    assert len(lines) == 1, down.stderr
    assert lines[0].startswith("Error: Cannot connect to the read server (store.read_dsn) at ")
    stats = kb("stats")
    assert stats.returncode == 0 and "Read server" in stats.stdout, stats.stderr
    assert "Cannot connect to the read server" in stats.stdout
    pair.start_standby()
    pair.caught_up()
    for mode in ("keyword", "semantic", "hybrid"):
        up = kb("search", "vpn client", "--mode", mode, "--json")
        assert up.returncode == 0 and "vpn.md" in up.stdout, (mode, up.stderr)
    stats = kb("stats", "--json")
    assert '"behind_bytes": 0' in stats.stdout and '"read_server"' in stats.stdout


def _write_version(folder: Path, files: int, version: int, skip: int | None) -> None:
    """Every file at ``version``: a title (part 0) and 2-5 parts (the count changes with the
    version), each naming its file, version, number and the count; file ``skip`` deleted."""
    for f in range(files):
        path = folder / f"f{f}.md"
        if f == skip:
            path.unlink(missing_ok=True)
            continue
        n = 2 + (f + version) % 4
        parts = "\n\n".join(
            f"## Part {i}\n\nzebra crossing notes: file{f} version{version} part{i} of{n}. "
            + "Each paragraph is long enough to stand as a chunk of its own here. " * 6
            for i in range(1, n + 1)
        )
        path.write_text(f"# zebra file{f} version{version} part0 of{n}\n\n{parts}\n")


class FileCheck:
    """Checks result sets of the files :func:`_write_version` writes: every chunk of a file
    from one version and, for a result set that holds every chunk (``whole``), every part of
    that version present and as many chunks as each time that version was seen before."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.versions: set[int] = set()
        self.chunks: dict[tuple[str, int, int], int] = {}

    def check(self, kind: str, docs: list[Document], whole: bool) -> None:
        by_file: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        count: dict[str, int] = defaultdict(int)
        for d in docs:
            count[d.metadata["source"]] += 1
            by_file[d.metadata["source"]] += [tuple(map(int, m)) for m in MARK.findall(d.text)]
        for source, marks in by_file.items():
            versions = {(f, v, n) for f, v, _, n in marks}
            if len(versions) != 1:
                self.problems.append(f"{kind}: {source} mixes versions {sorted(versions)}")
                continue
            ((f, v, n),) = versions
            self.versions.add(v)
            if not whole:
                continue
            if sorted(i for _, _, i, _ in marks) != list(range(n + 1)):
                self.problems.append(f"{kind}: {source} v{v} has parts {sorted(marks)}")
            seen, now = self.chunks.setdefault((kind, f, v), count[source]), count[source]
            if seen != now:
                self.problems.append(f"{kind}: {source} v{v} had {seen} chunks, now {now}")


def test_the_file_check_sees_partial_and_mixed_files(tmp_path):
    """The check the standby test relies on fails where it should (no server needed)."""
    folder = tmp_path / "v"
    folder.mkdir()

    def chunks(version: int) -> list[Document]:
        _write_version(folder, 2, version, None)
        text = (folder / "f0.md").read_text()
        parts = text.split("\n\n## ")
        return [doc(f"{version}-{i}", p, "/f0.md") for i, p in enumerate(parts)]

    old, new = chunks(0), chunks(1)  # f0: title and 2 parts at version 0, 3 at 1
    good = FileCheck()
    good.check("keyword", old, whole=True)
    good.check("keyword", new, whole=True)
    assert good.problems == [] and good.versions == {0, 1}
    partial = FileCheck()
    partial.check("keyword", new[:-1], whole=True)
    assert "has parts" in partial.problems[0]
    mixed = FileCheck()
    mixed.check("dense", old[:1] + new[1:], whole=False)
    assert "mixes versions" in mixed.problems[0]
    counted = FileCheck()
    counted.check("listing", old, whole=True)
    counted.check("listing", [*old, doc("x", "zebra", "/f0.md")], whole=True)  # a chunk more
    assert "had 3 chunks, now 4" in counted.problems[0]


class StandbyReader(threading.Thread):
    """Searches the standby in a loop (keyword and a listing, which return every chunk, and
    dense, whose vectors are filled in after the files) and checks each result set
    (:class:`FileCheck`)."""

    def __init__(self, dsn: str, read_dsn: str, table: str):
        super().__init__(daemon=True)
        self.store = PostgresStore(dsn, table, read_dsn=read_dsn, create=False, hnsw=False)
        self.stop = threading.Event()
        self.files = FileCheck()
        self.errors: list[BaseException] = []
        self.rounds = self.dense = 0

    def run(self) -> None:
        probe = None
        check = self.files.check
        try:
            while not self.stop.is_set():
                hits = self.store.keyword_search("zebra", k=10_000)
                check("keyword", [h.document for h in hits], whole=True)
                check("listing", list(self.store.iter_documents()), whole=True)
                if probe is None:
                    found = self.store.get([d.id for d in self.store.iter_documents(limit=1)],
                                           with_embeddings=True)  # fmt: skip
                    probe = found[0].embedding if found and found[0].embedding else None
                if probe is not None:
                    dense = [h.document for h in self.store.search(probe, k=10_000)]
                    check("dense", dense, whole=False)
                    self.dense += 1
                self.rounds += 1
        except BaseException as exc:  # reported to the test
            self.errors.append(exc)
        finally:
            self.store.close()


@pytest.mark.slow
def test_a_search_on_the_standby_never_sees_a_half_applied_file(pair, pg_table, tmp_path):
    kb = Kb(tmp_path, pair, pg_table)
    folder = tmp_path / "docs"
    folder.mkdir()
    files, rounds = 6, 5
    _write_version(folder, files, 0, None)
    first = kb("-q", "ingest", str(folder))
    assert first.returncode == 0, first.stderr
    pair.caught_up()
    reader = StandbyReader(pair.dsn, pair.read_dsn, pg_table)
    reader.start()
    try:
        for version in range(1, rounds + 1):
            # round 2 deletes a file, round 3 brings it back
            _write_version(folder, files, version, 1 if version == 2 else None)
            done = kb("-q", "ingest", str(folder))
            assert done.returncode == 0, done.stderr
    finally:
        reader.stop.set()
        reader.join(60)
    problems = reader.files.problems
    assert reader.errors == [] and problems == [], (reader.errors, problems[:5])
    assert reader.rounds > rounds and len(reader.files.versions) > 2  # it saw the files change
    assert reader.dense > 0
    assert reader.store._db.replica.checked  # the reads went to the standby
    pair.caught_up()
    primary = PostgresStore(pair.dsn, pg_table, create=False)
    standby = PostgresStore(pair.dsn, pg_table, read_dsn=pair.read_dsn, create=False)
    try:
        want = sorted((d.id, d.text) for d in primary.iter_documents())
        assert sorted((d.id, d.text) for d in standby.iter_documents()) == want
        assert {int(v) for _, t in want for v in re.findall(r"version(\d+)", t)} == {rounds}
    finally:
        primary.close()
        standby.close()
