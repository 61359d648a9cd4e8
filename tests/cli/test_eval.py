"""kb eval: a tiny BEIR collection built by the test, scored end to end through the CLI."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run
from sample_docs import make_beir


def test_eval_json_shape_and_perfect_scores(tmp_path):
    data = make_beir(tmp_path / "tiny")
    result = run("eval", str(data), "--mode", "keyword", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {
        "dataset",
        "split",
        "mode",
        "queries",
        "ndcg@10",
        "recall@10",
        "recall@100",
        "mrr@10",
        "hit@1",
        "hit@3",
        "latency_ms",
    }
    assert (out["dataset"], out["split"], out["mode"], out["queries"]) == (
        "tiny",
        "test",
        "keyword",
        2,
    )
    assert out["ndcg@10"] == 1.0 and out["mrr@10"] == 1.0
    assert set(out["latency_ms"]) == {"mean", "p95"}


@pytest.mark.slow
def test_eval_keeps_and_reuses_db_and_never_touches_the_knowledge_base(tmp_path):
    import os

    data = make_beir(tmp_path / "tiny")
    keep = tmp_path / "eval.db"
    assert run("eval", str(data), "--mode", "keyword", "--db", str(keep)).exit_code == 0
    assert keep.exists() and not os.path.exists(os.environ["KB_DB"])
    again = run("eval", str(data), "--mode", "keyword", "--db", str(keep))
    assert again.exit_code == 0 and "ndcg@10" in again.stdout


def test_eval_errors_are_one_line(tmp_path):
    result = run("eval", str(tmp_path / "missing"))
    assert result.exit_code == 2 and result.stderr.startswith("Error: ")
    data = make_beir(tmp_path / "tiny")
    bad = run("eval", str(data), "--split", "nope")
    assert bad.exit_code == 2 and "nope" in bad.stderr and "test" in bad.stderr


def test_eval_alpha_and_fusion_reach_the_searches(tmp_path, monkeypatch):
    # --alpha was set on the options after they were built: never counted as chosen, so
    # every kb eval --alpha ran with the default weight
    import kbcli.eval.beir as evaluation

    seen = []
    real = evaluation._run_queries

    def spy(kb, data, options, progress):
        seen.append((options.alpha, options.alpha_chosen, options.fusion))
        return real(kb, data, options, progress)

    monkeypatch.setattr(evaluation, "_run_queries", spy)
    data = make_beir(tmp_path / "tiny")
    result = run("eval", str(data), "--mode", "hybrid", "--alpha", "0.9", "--json")
    assert result.exit_code == 0, result.stderr
    result = run("eval", str(data), "--mode", "hybrid", "--fusion", "rrf", "--json")
    assert result.exit_code == 0, result.stderr
    assert seen[0] == (0.9, True, "weighted")
    assert seen[1][1:] == (False, "rrf")
