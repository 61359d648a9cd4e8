"""What the benchmark scripts share: percentiles, latency loops, a child-process runner that
measures the child's peak memory, and a description of the machine and the versions.

Import it from a script in this folder as ``from common import ...`` (each script puts its own
folder on ``sys.path`` when run as ``python benchmarks/NAME.py``).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
# Child processes cache bytecode here: an installed kb has its .pyc files, and without them
# (PYTHONDONTWRITEBYTECODE, as this machine's shell sets) every command compiles ~80 modules
# from source, ~60-100 ms of each whole-command figure.
PYCACHE = Path(tempfile.gettempdir()) / "kb-bench-pycache"
VERSIONED = ("kbcli", "numpy", "bm25s", "faiss-cpu", "onnxruntime", "tokenizers", "typer")


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (nearest rank on the sorted values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def timings(
    fn: Callable[[Any], Any], items: Sequence[Any], *, repeat: int = 1, warm: bool = False
) -> list[float]:
    """Milliseconds of ``fn(item)`` per item: the best of ``repeat`` runs each (on a shared
    machine the best of a few runs filters out the moments another process held the CPU),
    after one untimed call on the first item when ``warm``."""
    if warm and items:
        fn(items[0])
    out = []
    for item in items:
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            fn(item)
            best = min(best, time.perf_counter() - started)
        out.append(best * 1000)
    return out


def p50_p95(ms: Sequence[float]) -> dict[str, float]:
    """``{"p50": ..., "p95": ...}`` of ``ms``, rounded to the microsecond."""
    return {"p50": round(statistics.median(ms), 3), "p95": round(percentile(ms, 95), 3)}


def latency(fn: Callable[[Any], Any], items: Sequence[Any], repeat: int = 3) -> dict[str, float]:
    """:func:`once_in_turns` of one function: ``items[0]`` is the warm-up, every other item
    timed once (p50 / p95 ms), the best of ``repeat`` as ``best_p50``."""
    return once_in_turns({"fn": fn}, items[1:], items[0], repeat=repeat)["fn"]


def paired_latency(
    fns: dict[str, Callable[[Any], Any]], items: Sequence[Any], repeat: int = 3
) -> dict[str, dict[str, float]]:
    """:func:`once_in_turns` of several functions (``items[0]`` the warm-up): each item timed
    once per function, the functions in turns, so every one meets the same moments of a shared
    machine."""
    return once_in_turns(fns, items[1:], items[0], repeat=repeat)


@dataclass
class ChildRun:
    """One finished child process: wall and CPU seconds, peak resident memory, its output."""

    argv: list[str]
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str

    def check(self) -> ChildRun:
        """Raise ``SystemExit`` with the child's stderr when it failed."""
        if self.returncode != 0:
            tail = self.stderr.strip().splitlines()[-5:]
            raise SystemExit(f"{' '.join(self.argv)} exited {self.returncode}: {' | '.join(tail)}")
        return self


def run_child(
    argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None
) -> ChildRun:
    """Run ``argv`` to completion; its peak RSS comes from ``os.wait4`` (this child's own
    ``ru_maxrss``, not the maximum over every child so far as ``RUSAGE_CHILDREN`` gives)."""
    argv = [str(a) for a in argv]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildRun(
            argv,
            child.returncode,
            wall,
            usage.ru_utime + usage.ru_stime,
            round(usage.ru_maxrss / 1024, 1),  # kilobytes on Linux
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def whole_process(
    argv: Sequence[str], env: dict[str, str] | None, cwd: str | os.PathLike | None, runs: int
) -> dict[str, float]:
    """Wall and CPU milliseconds (min / median / max, CPU median) of ``runs`` runs of ``argv``
    after one untimed run that warms the file cache, and the largest peak RSS (MB) of a run."""
    run_child(argv, env, cwd).check()
    done = [run_child(argv, env, cwd).check() for _ in range(runs)]
    wall = [d.wall_s * 1000 for d in done]
    return {
        "min_ms": round(min(wall), 1),
        "median_ms": round(statistics.median(wall), 1),
        "max_ms": round(max(wall), 1),
        "cpu_median_ms": round(statistics.median(d.cpu_s * 1000 for d in done), 1),
        "peak_rss_mb": max(d.peak_rss_mb for d in done),
    }


def self_peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def find_kb(explicit: str | None = None) -> Path:
    """The ``kb`` command: ``explicit``, else the one beside this Python, else the one on PATH."""
    if explicit:
        return Path(explicit)
    beside = Path(sys.executable).parent / "kb"
    if beside.exists():
        return beside
    found = shutil.which("kb")
    if not found:
        raise SystemExit("No kb command found: pip install -e . or pass --kb PATH")
    return Path(found)


def tree_env(**extra: str) -> dict[str, str]:
    """This environment with this checkout's ``src`` first on ``PYTHONPATH`` (so a child ``kb``
    runs these sources, not whatever the venv's editable install points at), bytecode cached
    in :data:`PYCACHE`, API keys removed (no provider is contacted) and ``extra`` set."""
    keys = ("OPENAI_API_KEY", "API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "LLM_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in (*keys, "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def files_size_mb(paths: Iterable[Path]) -> float:
    """Total size in MB of the files among ``paths`` that exist."""
    return round(sum(p.stat().st_size for p in paths if p.is_file()) / 1e6, 1)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, and the versions of Python, SQLite and the libraries measured
    (read from package metadata: nothing is imported)."""
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gb": _ram_gb(),
        "platform": platform.platform(),
        "versions": versions,
    }


# --- keyword search as a user meets it: each query once, engines in turns ------------------


def once_in_turns(
    fns: dict[str, Callable[[Any], Any]],
    items: Sequence[Any],
    warmup: Any,
    *,
    repeat: int = 3,
) -> dict[str, dict[str, float]]:
    """Each of ``fns`` called on each item, the functions taken in turns item by item (each
    meets the same moments of a shared machine; the first of a turn rotates), after one untimed
    call of each on ``warmup`` (not one of ``items``: no query is timed warm from an earlier
    run of it). ``p50`` / ``p95`` are of each item's *first and only* timed call, the way a
    user asks a query; ``best_p50`` is the median of each item's best of ``repeat`` calls
    (the first and ``repeat - 1`` more right after it), kept as an extra column."""
    names = list(fns)
    for name in names:
        fns[name](warmup)
    first: dict[str, list[float]] = {name: [] for name in names}
    best: dict[str, list[float]] = {name: [] for name in names}
    for i, item in enumerate(items):
        turn = names[i % len(names) :] + names[: i % len(names)]
        for name in turn:
            started = time.perf_counter()
            fns[name](item)
            first[name].append((time.perf_counter() - started) * 1000)
        for name in turn:
            ms = first[name][-1]
            for _ in range(repeat - 1):
                started = time.perf_counter()
                fns[name](item)
                ms = min(ms, (time.perf_counter() - started) * 1000)
            best[name].append(ms)
    return {
        name: {**p50_p95(first[name]), "best_p50": round(statistics.median(best[name]), 3)}
        for name in names
    }


def chunk_queries(
    texts: Sequence[str], n: int, common: Iterable[str] = (), seed: int = 13
) -> list[str]:
    """``n`` queries of 2-5 distinct content words drawn from random chunks of ``texts`` (the
    words a user copies from a passage: their postings are what real queries meet, unlike words
    drawn from the vocabulary's middle); words of ``common`` are left out."""
    import random

    rng = random.Random(seed)
    skip = set(common)
    out: list[str] = []
    while len(out) < n:
        words = sorted(set(rng.choice(texts).split()) - skip)
        if len(words) >= 2:
            out.append(" ".join(rng.sample(words, min(len(words), rng.randint(2, 5)))))
    return out


class Peers:
    """The keyword engines kb is measured against, built from the same texts (chunk ``i`` is
    line ``i``; its group is ``i % 10``), each with a ``search(query, group)`` giving its top
    ``k`` (ranked ids): SQLite FTS5 (in memory), bm25s (top-k by ``np.argpartition`` on the
    negated scores: bm25s's own ``retrieve`` spends most of a content-word query partitioning a
    mostly-zero array on recent numpy) and tantivy (its files in a temporary folder, merged)."""

    def __init__(self, texts: Sequence[str], k: int = 10, engines: Iterable[str] = ()):
        self.k = k
        self.n = len(texts)
        self.build_s: dict[str, float] = {}
        self.size_mb: dict[str, float] = {}
        self._dir = tempfile.TemporaryDirectory(prefix="kb-peers-")  # tantivy's files
        self.search: dict[str, Callable[[str, int | None], Any]] = {}
        for name in engines or ("fts5", "bm25s", "tantivy"):
            started = time.perf_counter()
            self.search[name] = getattr(self, f"_build_{name}")(texts)
            self.build_s[name] = round(time.perf_counter() - started, 2)

    def _build_fts5(self, texts: Sequence[str]) -> Callable[[str, int | None], Any]:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, grp UNINDEXED)")
        conn.executemany(
            "INSERT INTO fts VALUES (?, ?)", ((t, i % 10) for i, t in enumerate(texts))
        )
        conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
        conn.commit()
        ((pages,),), ((page,),) = (
            conn.execute("PRAGMA page_count"),
            conn.execute("PRAGMA page_size"),
        )
        self.size_mb["fts5"] = round(pages * page / 1e6, 1)
        plain = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?"
        grouped = "SELECT rowid FROM fts WHERE fts MATCH ? AND grp = ? ORDER BY bm25(fts) LIMIT ?"
        k = self.k

        def search(q: str, group: int | None = None) -> list:
            match = " OR ".join(q.split())
            if group is None:
                return conn.execute(plain, (match, k)).fetchall()
            return conn.execute(grouped, (match, group, k)).fetchall()

        return search

    def _build_bm25s(self, texts: Sequence[str]) -> Callable[[str, int | None], Any]:
        import bm25s
        import numpy as np
        from bm25s.tokenization import Tokenized

        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(w, len(vocab)) for w in t.split()] for t in texts]
        retriever = bm25s.BM25()
        retriever.index(Tokenized(ids=ids, vocab=vocab), show_progress=False)
        del ids
        with tempfile.TemporaryDirectory() as tmp:
            retriever.save(tmp)
            self.size_mb["bm25s"] = files_size_mb(Path(tmp).rglob("*"))
        masks = {g: (np.arange(len(texts)) % 10 == g).astype(np.float32) for g in range(10)}
        k = self.k

        def search(q: str, group: int | None = None) -> np.ndarray:
            tokens = [vocab[w] for w in q.split() if w in vocab]
            if not tokens:
                return np.empty(0, np.int64)
            mask = None if group is None else masks[group]
            scores = retriever.get_scores_from_ids(tokens, weight_mask=mask)
            top = np.argpartition(-scores, k)[:k]
            return top[np.argsort(-scores[top], kind="stable")]

        return search

    def _build_tantivy(self, texts: Sequence[str]) -> Callable[[str, int | None], Any]:
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_text_field("text", stored=False)
        builder.add_unsigned_field("grp", indexed=True)
        schema = builder.build()
        index = tantivy.Index(schema, path=self._dir.name)  # mapped files, as kb's pack
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        for i, text in enumerate(texts):
            doc = tantivy.Document()
            doc.add_text("text", text)
            doc.add_unsigned("grp", i % 10)
            writer.add_document(doc)
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        self.size_mb["tantivy"] = files_size_mb(Path(self._dir.name).rglob("*"))
        searcher = index.searcher()
        groups = {  # scored 0: the filter must not add to the ranking
            g: tantivy.Query.const_score_query(tantivy.Query.term_query(schema, "grp", g), 0.0)
            for g in range(10)
        }
        must, k = tantivy.Occur.Must, self.k

        def search(q: str, group: int | None = None) -> Any:
            query = index.parse_query(q, ["text"])  # the default parser: words joined by OR
            if group is not None:
                query = tantivy.Query.boolean_query([(must, query), (must, groups[group])])
            return searcher.search(query, k).hits

        return search
