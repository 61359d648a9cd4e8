"""kb search with a second stage: --rerank/--no-rerank, --candidates, --min-relevance, --rewrite,
the refusal message, and no model loaded for searches that do not rerank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import SAMPLE, run, run_json, seed
from fake_rerank import FakeRerankServer

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def ids():
    return seed(SAMPLE)


def configure(text: str) -> None:
    """Write ./jianmu.yaml (the tests run in tmp_path/cwd) and trust it, as its author would:
    it names servers and models, which a file found in the working directory may not use
    untrusted (tests/config/test_trust.py)."""
    from kbcli.config.trust import trust

    file = Path("jianmu.yaml").resolve()
    file.write_text(text)
    trust(file, file.read_bytes())


@pytest.fixture
def server():
    with FakeRerankServer() as srv:
        yield srv


def test_reranked_json_carries_the_rerankers_scores(ids, server):
    configure(f"rag: {{rerank: {{provider: api, base_url: '{server.url}/v1', model: r}}}}\n")
    hits, _ = run_json("search", "reset password", "--json", "--candidates", "7")
    assert hits[0]["metadata"]["source"] == "/docs/password.md"
    assert hits[0]["score"] == 1.0
    assert len(server.bodies("/rerank")[0]["documents"]) == 4  # all four chunks (pool 10)
    hits, _ = run_json("search", "reset password", "--json", "--explain", "-k", "1")
    assert {"recall_rank", "fused", "rerank"} <= set(hits[0]["explain"])
    table = run("search", "reset password", "--explain", "-k", "1")
    assert "rerank 1.000" in table.stdout and "recall_rank 1" in table.stdout


def test_nothing_above_min_relevance_says_no_relevant_knowledge_found(ids, server):
    configure(f"rag: {{rerank: {{provider: api, base_url: '{server.url}'}}}}\n")
    result = run("search", "password tomatoes basil sun", "--min-relevance", "0.9")
    assert result.exit_code == 0
    assert result.stdout == ""
    last = result.stderr.splitlines()[-1]  # after the embedder note
    assert last.startswith("No relevant knowledge found: none of the 4 candidates")
    assert "min_relevance 0.9 (best 0.750)" in result.stderr
    hits, result = run_json(
        "search", "password tomatoes basil sun", "--min-relevance", "0.9", "--json"
    )
    assert hits == [] and "No relevant knowledge found" in result.stderr


def test_min_relevance_from_the_config_file(ids, server):
    configure(f"rag: {{rerank: {{provider: api, base_url: '{server.url}', min_relevance: 0.5}}}}\n")
    hits, _ = run_json("search", "invoices due tomatoes", "--json")
    assert [h["metadata"]["source"] for h in hits] == ["/docs/invoice.pdf"]
    assert all(h["score"] >= 0.5 for h in hits)


def test_no_rerank_never_builds_the_reranker(ids):
    configure("rag: {rerank: {provider: api}}\n")  # no base_url: building would fail
    hits, _ = run_json("search", "reset password", "--mode", "keyword", "--no-rerank", "--json")
    assert hits[0]["metadata"]["source"] == "/docs/password.md"
    result = run("search", "reset password", "--mode", "keyword")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: The rerank API needs a server")
    assert result.stderr.count("\n") == 1


def test_rerank_without_a_configured_reranker_is_a_usage_error(ids):
    result = run("search", "reset password", "--rerank")
    assert result.exit_code == 2 and "rag.rerank.provider" in result.stderr
    result = run("search", "reset password", "--min-relevance", "0.4")
    assert result.exit_code == 2 and "No reranker is configured" in result.stderr
    result = run("search", "reset password", "--rewrite", "magic")
    assert result.exit_code == 2 and "Unknown rewrite mode" in result.stderr


def test_rewrite_expand_recalls_the_phrasings_too(ids, server):
    server.expansions = ["invoice fee", "garden basil"]
    configure(f"rag: {{rewrite: {{model: w, base_url: '{server.url}'}}}}\n")
    hits, _ = run_json("search", "zzz", "--mode", "keyword", "--rewrite", "expand", "--json")
    sources = {h["metadata"]["source"] for h in hits}
    assert sources == {"/docs/invoice.pdf", "/docs/garden.txt"}
    assert len(server.bodies("/chat/completions")) == 1


def test_search_without_reranking_imports_no_model_runtime(ids, tmp_path):
    model = tmp_path / "ce"
    model.mkdir()
    (model / "model.onnx").write_bytes(b"never read")
    configure(f"rag: {{rerank: {{provider: cross-encoder, model: '{model}'}}}}\n")
    code = (
        "import sys\n"
        "from kbcli.cli import main\n"
        "try:\n"
        "    main(['search', 'reset password', '--mode', 'keyword', '--no-rerank', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "heavy = ('onnxruntime', 'tokenizers', 'torch', 'sentence_transformers', 'numpy')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["metadata"]["source"] == "/docs/password.md"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


# --- the rerank pool: exactly `candidates`, in as few requests as the server takes ------------


def ferry_corpus(long_file_chunks: int = 0) -> None:
    """40 files of 6 chunks that all say "ferry timetable" (word overlap varies, so the fake
    server's scores do), and optionally one long file whose chunks outrank them all."""
    entries = []
    for f in range(40):
        for c in range(6):
            extra = " harbour" * (c % 3) + " winter" * (f % 4)
            text = f"ferry timetable for pier {f} part {c}{extra}"
            entries.append((text, {"source": f"/ferry/f{f:02d}.md", "chunk_index": c}))
    for c in range(long_file_chunks):
        text = f"ferry timetable ferry timetable {c}"
        entries.append((text, {"source": "/ferry/long.md", "chunk_index": c}))
    seed(entries)


def rerank_config(server, extra: str = "") -> None:
    configure(f"rag: {{rerank: {{provider: api, base_url: '{server.url}/v1', model: r{extra}}}}}\n")


def sent(server) -> list[int]:
    """Documents per /rerank request, in order."""
    return [len(body["documents"]) for body in server.bodies("/rerank")]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], [50]),  # --by file (the default) reranked 100 in requests of 32, 32, 32, 4
        (["--by", "chunk"], [50]),
        (["--candidates", "120"], [120]),
        (["-k", "60"], [120]),  # never below 2 x k
        (["--by", "chunk", "-k", "3", "--candidates", "7"], [7]),
        (['"ferry timetable" -winter'], [50]),  # phrases and exclusions before the reranker
    ],
)
def test_the_pool_is_candidates_in_one_request(server, args, expected):
    ferry_corpus()
    rerank_config(server)
    query = "ferry timetable harbour"
    if args and args[0].startswith('"'):
        query, args = args[0], args[1:]
    hits, _ = run_json("search", query, *args, "--json")
    assert sent(server) == expected
    assert hits and all(0.0 <= h["score"] <= 1.0 for h in hits)
    if "-winter" in query:
        documents = server.bodies("/rerank")[0]["documents"]
        assert all("ferry timetable" in d and "winter" not in d for d in documents)


def test_max_documents_splits_the_pool(server):
    ferry_corpus()
    rerank_config(server, ", max_documents: 20")
    run_json("search", "ferry timetable", "--json")
    assert sent(server) == [20, 20, 10]


def test_by_file_still_fills_k_files_when_one_file_fills_the_pool(server):
    """The pool holds the best chunk of each of the first k files, so one long file cannot
    leave the answer short (its chunks took the whole pool and gave one file)."""
    ferry_corpus(long_file_chunks=120)
    rerank_config(server)
    hits, _ = run_json("search", "ferry timetable", "-k", "5", "--json")
    assert sent(server) == [50]
    sources = [h["metadata"]["source"] for h in hits]
    assert len(sources) == 5 == len(set(sources)) and sources[0] == "/ferry/long.md"
    assert hits[0]["matched_chunks"] == 50 - 4  # the rest of the pool
