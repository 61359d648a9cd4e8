"""benchmarks/bench_all.py keeps working: a tiny run of the real command (real files, a real
``kb ingest``, every engine in its child process) writes every figure the report reads.

No figure is compared with a time: speed goals live in the benchmark's report."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_all.py"
LOCAL = all(importlib.util.find_spec(m) for m in ("onnxruntime", "tokenizers"))
ONE = importlib.util.find_spec("threadpoolctl") is not None

LATENCIES = [
    f"{prefix} {words}{f}"
    for prefix in ("keyword_search", "kb.search keyword")
    for words in ("content", "common")
    for f in ("", "+filter")
] + [
    f"{name}{f}{threads}"
    for name in (
        "kb.search semantic",
        "kb.search hybrid",
        "kb.search hybrid alpha",
        "dense exact",
        "numpy",
    )
    for f in ("", "+filter")
    for threads in ("", " (1 BLAS thread)" if ONE else "")
]
PEER = ["content", "content+filter", "common", "common+filter"]
COMMANDS = [
    "kb --help",
    "kb search --mode keyword",
    "kb search --mode keyword --in g3",
    "kb search (hybrid)",
]
WHOLE = {"min_ms", "median_ms", "max_ms", "cpu_median_ms", "peak_rss_mb"}


def load_bench_all():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_all", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPT.parent))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One quick run at 300 chunks (and a 20-chunk local-model index when the extra is here)."""
    work = tmp_path_factory.mktemp("bench")
    out = work / "all.json"
    argv = [sys.executable, str(SCRIPT), "--sizes", "300", "--quick", "--workdir", str(work)]
    argv += ["--out", str(out), "--local-chunks", "20" if LOCAL else "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), work, json.loads(done.stdout)


@pytest.mark.slow
def test_every_figure_is_there(run):
    results, work, printed = run
    assert printed == results  # stdout is the same JSON
    info = results["info"]
    assert {"cpu", "cores", "ram_gb", "platform", "started", "command"} <= set(info)
    assert len(info["load_start"]) == 3 and len(info["load_end"]) == 3
    for name in ("python", "sqlite", "numpy", "bm25s", "faiss-cpu", "onnxruntime", "kbcli"):
        assert name in info["versions"]
    size = results["sizes"]["300"]
    assert size["chunks"] == 300
    ingest = size["kb_ingest"]
    assert ingest["chunks"] == 300  # one chunk per paragraph, nothing split or merged
    assert ingest["files"] == 30
    assert ingest["chunks_per_s"] > 0 and ingest["peak_rss_mb"] > 0 and ingest["db_mb"] > 0
    commands = size["commands"]
    for name in COMMANDS:
        assert set(commands[name]) == WHOLE, name
        assert commands[name]["min_ms"] <= commands[name]["median_ms"] <= commands[name]["max_ms"]
    assert size["index_mb"] > 0
    assert {"kb.db", "kb.db.vectors-cache", "kb.db.keyword-pack"} <= set(size["index_files"])
    kb = size["kb"]
    for name in LATENCIES:
        assert 0 < kb[name]["p50"] <= kb[name]["p95"], name
    assert kb["filter_share"] == 0.1  # the folder filter allows one chunk in ten
    assert kb["dense_top10_agreement"] == 1.0  # exact dense search is numpy brute force
    for engine in ("fts5", "bm25s"):
        for name in PEER:
            assert 0 < size[engine][name]["p50"] <= size[engine][name]["p95"], (engine, name)
        assert size[engine]["build_s"] >= 0 and size[engine]["size_mb"] > 0
        assert size[engine]["child_peak_rss_mb"] > 0
    goals = {g["goal"]: g for g in results["goals"]}
    if LOCAL:
        local = results["local_model"]
        assert local["chunks"] == local["ingest"]["chunks"] == 20
        assert goals["local-model hybrid `kb search` ≤ 600 ms"]["size"] == "20"
        assert set(local["kb search (hybrid, local model)"]) == WHOLE
    assert len(goals) == (13 if LOCAL else 11)
    for goal in goals.values():
        assert set(goal) == {"goal", "size", "measured", "peer", "met", "load", "note"}
        assert goal["met"] in (True, False, None)
        if goal["met"] is not None:
            assert goal["measured"] is not None and goal["size"] in ("300", "20")


@pytest.mark.slow
def test_the_corpus_and_the_report(run, tmp_path, monkeypatch):
    results, work, _ = run
    bench = load_bench_all()
    corpus = work / "300" / "corpus"
    texts = (work / "300" / "texts.txt").read_text().splitlines()
    assert len(texts) == 300 and all(289 <= len(t) <= 500 for t in texts)
    for i in (0, 3, 99, 100, 257):
        j, paragraph = bench.file_of(i)
        assert bench.file_path(corpus, j).parent.name == f"g{i % 10}"
        assert bench.file_path(corpus, j).read_text().split("\n\n")[paragraph].strip() == texts[i]
    assert sorted(p.parent.name for p in corpus.rglob("*.md")).count("g3") == 3

    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nkeep me\n")
    monkeypatch.setattr(bench, "DOCS", docs)
    bench.write_docs(results, [work / "all.json"])
    bench.write_docs(results, [work / "all.json"])  # replaces its own section, once
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\nkeep me\n") and text.count(bench.START) == 1
    section = text.split(bench.START)[1]
    for name, _path in bench.query_rows() + list(bench.BUILD_ROWS):
        line = next(line for line in section.splitlines() if line.startswith(f"| {name} |"))
        if ONE or "BLAS" not in name:
            assert "–" not in line, line  # every figure the table shows was measured
    assert "| 300 |" in section


@pytest.mark.slow
def test_keyword_latency_runs_on_a_copy_of_a_size_folder(run, tmp_path):
    """bench_keyword_latency.py on (a copy of) the folder bench_all built: every engine on
    every query set, each query timed once, and each goal's ratio from the same run."""
    import json
    import shutil

    _, work, _ = run
    folder = tmp_path / "300"
    shutil.copytree(work / "300", folder, ignore=shutil.ignore_patterns("corpus"))
    script = ROOT / "benchmarks" / "bench_keyword_latency.py"
    out = tmp_path / "once.json"
    argv = [sys.executable, str(script), str(folder), "--queries", "10", "--repeat", "2"]
    done = subprocess.run([*argv, "--json", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("300 chunks")
    result = json.loads(out.read_text())
    engines = ("kb", "kb chunk-only", "kb index only", "fts5", "bm25s", "tantivy")
    sets = [f"{q}{f}" for q in ("chunk", "content", "common") for f in ("", "+filter")]
    new = [
        f"{q}+new filter{f}" for q in ("chunk", "content", "common") for f in ("", ", no folder")
    ]
    assert set(result["rows"]) == {f"{s} {e}" for s in sets for e in engines} | {
        f"{s} {e}"
        for s in new
        for e in engines[:3]  # a new filter: kb only
    }
    for ms in result["rows"].values():
        assert 0 < ms["best_p50"] and 0 < ms["p50"] <= ms["p95"]
    assert len(result["goals"]) == 7
    for goal in result["goals"]:
        assert goal["ratio"] == round(goal["measured_ms"] / goal["peer_ms"], 2)
        assert f"{goal['goal']:46}" in done.stdout
    assert {"load_start", "load_end"} <= set(result["info"])
    # kb alone (its own peak memory): no peer rows, only the goals of kb against itself
    done = subprocess.run([*argv[:-2], "--repeat", "1", "--peers", "none", "--kb-only",
                           "--json", str(out)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["rows"]) == {f"{s} kb" for s in sets + new}
    assert [g["goal"] for g in result["goals"]] == [
        "chunk words: filtered / unfiltered ≤ 1.2",
        "3 common words: filtered / unfiltered ≤ 1.2",
    ]


def test_new_filters_are_new_and_valid(run):
    """Every filter of bench_keyword_latency's "+new filter" rows differs from the others (a
    repeat is a filter used before: its bitmap) and passes the filter validator."""
    import importlib.util
    import json

    from kbcli.filters.model import validate_filter

    _, work, _ = run
    spec = importlib.util.spec_from_file_location(
        "bench_keyword_latency", ROOT / "benchmarks" / "bench_keyword_latency.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    db = work / "300" / "kb.db"
    made = [f for folder in (True, False) for f in module.new_filters(db, 1500, 0, folder)]
    assert len({json.dumps(f, sort_keys=True) for f in made}) == len(made)
    for f in made[:: len(made) // 50]:
        validate_filter(f)


def test_sizes_parse():
    bench = load_bench_all()
    assert [bench.parse_size(s) for s in ("10k", "100K", "1M", "300", "1,000")] == [
        10_000,
        100_000,
        1_000_000,
        300,
        1000,
    ]
    assert bench.label(1_000_000) == "1M" and bench.label(100_000) == "100k"
    for bad in ("150", "50", "10x"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            bench.parse_size(bad)
