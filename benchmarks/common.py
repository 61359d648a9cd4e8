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
    """p50 and p95 of :func:`timings` (warm, best of ``repeat``) in milliseconds."""
    return p50_p95(timings(fn, items, repeat=repeat, warm=True))


def paired_latency(
    fns: dict[str, Callable[[Any], Any]], items: Sequence[Any], repeat: int = 3
) -> dict[str, dict[str, float]]:
    """:func:`latency` of several functions taken in turns on each item, so that every one of
    them meets the same moments of a shared machine; after one warm call of each."""
    for fn in fns.values():
        fn(items[0])
    best: dict[str, list[float]] = {name: [] for name in fns}
    for item in items:
        for name in fns:
            best[name].append(float("inf"))
        for _ in range(repeat):
            for name, fn in fns.items():
                started = time.perf_counter()
                fn(item)
                best[name][-1] = min(best[name][-1], (time.perf_counter() - started) * 1000)
    return {name: p50_p95(ms) for name, ms in best.items()}


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
