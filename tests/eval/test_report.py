"""The kb eval --queries report's parts: round axis ticks, identical curves told apart, the
facts that name a run, where a missed page ranked, and the model load timed apart."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from hypothesis import assume, given
from hypothesis import strategies as st

from cli_helpers import run
from kbcli.embedders.simple import SimpleEmbedder
from kbcli.eval.questions import evaluate_questions, load_questions
from kbcli.eval.report import (
    facts,
    hit_at_k_plot,
    html_report,
    nice_ticks,
    score_plot,
    summary_lines,
    tick_text,
)
from kbcli.pipeline import KnowledgeBase
from sample_docs import indexed

SVG = "{http://www.w3.org/2000/svg}"


def ticks_of(svg: str, axis: str) -> list[str]:
    root = ET.fromstring(svg)
    return [t.text or "" for t in root.iter(f"{SVG}text") if axis in t.get("class", "").split()]


def row(qid: str, rank: int | None, expected: float | None = 0.5, other: float = 0.4) -> dict:
    return {"id": qid, "query": f"question {qid}", "category": None, "top_rank": rank,
            "ranks": {"a.md": rank}, "files": 10, "top": "b.md", "expected_score": expected,
            "other_score": other, "hit@1": 1.0 if rank == 1 else 0.0}  # fmt: skip


def result_of(modes: dict[str, list[dict]], k: int = 10) -> dict:
    lat = {"mean": 2.0, "p50": 2.0, "p95": 3.0, "max": 3.0, "first": 40.0}
    summaries = {
        mode: {"questions": rows, "suggested": {"min_score": 0.45}, "latency_ms": lat,
               "categories": {}, "metrics": {key: {"mean": 0.5, "lo": 0.4, "hi": 0.6}
                                             for key in (f"ndcg@{k}", "hit@1", "hit@3",
                                                         f"mrr@{k}")}}
        for mode, rows in modes.items()
    }  # fmt: skip
    return {"queries": len(next(iter(modes.values()))), "k": k, "deeper": 100,
            "hit_note": "hit@k: ...", "modes": summaries}  # fmt: skip


# --- axis ticks -------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=100_000))
def test_count_ticks_are_distinct_whole_numbers_covering_the_largest(most):
    ticks = nice_ticks(most, integer=True)
    texts = tick_text(ticks)
    assert ticks[0] == 0 and ticks[-1] >= most
    assert all(t == int(t) for t in ticks)
    assert len(set(texts)) == len(texts) and 2 <= len(ticks) <= 11
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1


@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6))
def test_value_ticks_step_by_one_two_or_five_and_read_distinctly(lo, span):
    assume(span >= 1e-4 * abs(lo))  # a range, not a rounding error of lo
    ticks = nice_ticks(lo + span, lo)
    texts = tick_text(ticks)
    step = ticks[1] - ticks[0]
    assert ticks[0] <= lo + 1e-6 * step and ticks[-1] >= lo + span - 1e-6 * step
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5, 10))
    assert len(set(texts)) == len(texts) and 2 <= len(ticks) <= 11


def test_the_histogram_axis_of_three_questions_reads_0_1_2_3():
    rows = [row("a", 1, 0.50), row("b", 1, 0.50), row("c", 1, 0.50, other=0.9)]
    svg = score_plot("hybrid", {"questions": rows, "suggested": {"min_score": 0.5}}, "#1f77b4")
    assert ticks_of(svg, "ytick") == ["0", "1", "2", "3"]
    xs = ticks_of(svg, "xtick")
    assert xs == ["0.4", "0.5", "0.6", "0.7", "0.8", "0.9"]


# --- identical curves -------------------------------------------------------------------------


def curves(svg: str) -> list[ET.Element]:
    return [p for p in ET.fromstring(svg).iter(f"{SVG}polyline") if "curve" in p.get("class", "")]


def legend(svg: str) -> list[str]:
    return ticks_of(svg, "legend")


def test_a_curve_identical_to_another_is_dashed_and_named():
    same = [row("a", 1), row("b", 3), row("c", None)]
    svg = hit_at_k_plot(result_of({"keyword": same, "hybrid": [dict(r) for r in same]}))
    keyword, hybrid = curves(svg)
    assert keyword.get("points") == hybrid.get("points")
    assert keyword.get("stroke-dasharray") is None and hybrid.get("stroke-dasharray")
    assert legend(svg) == ["keyword", "hybrid (identical to keyword)"]


def test_different_curves_are_drawn_plain():
    svg = hit_at_k_plot(result_of({"keyword": [row("a", 1), row("b", 3)],
                                   "hybrid": [row("a", 2), row("b", 3)]}))  # fmt: skip
    assert all(c.get("stroke-dasharray") is None for c in curves(svg))
    assert legend(svg) == ["keyword", "hybrid"]


def test_the_hit_curve_runs_to_k():
    svg = hit_at_k_plot(result_of({"keyword": [row("a", 1), row("b", 4)]}, k=5))
    assert ticks_of(svg, "xtick") == ["1", "2", "3", "4", "5"]
    assert len(curves(svg)[0].get("points", "").split()) == 5


# --- what names a run -------------------------------------------------------------------------


def test_the_report_and_the_summary_name_index_embedder_questions_date_and_version(tmp_path):
    db, questions = indexed(tmp_path)
    report = tmp_path / "r.html"
    done = run("--db", db, "eval", "--queries", str(questions), "--compare", "keyword,hybrid",
               "--report", str(report))  # fmt: skip
    assert done.exit_code == 0, done.stderr
    from kbcli import __version__

    lines = done.stdout.splitlines()
    head = {line[:10].strip(): line[11:] for line in lines[:7]}
    assert head["Index"].startswith(str(tmp_path / "kb.db"))
    assert "3 files" in head["Index"]
    assert head["Embedder"].startswith("simple/")
    assert head["Questions"].startswith(f"3 from {questions}") and "k 10" in head["Questions"]
    assert f"kb {__version__}" in head["Run"] and head["Run"][:4].isdigit()
    assert "ms (embedder, before timing)" in head["Model load"]
    assert "first search" in done.stdout  # each mode's first search, apart
    page = report.read_text(encoding="utf-8")
    for label, text in (
        ("index", str(tmp_path / "kb.db")),
        ("embedder", "simple/"),
        ("questions", str(questions)),
        ("run", f"kb {__version__}"),
    ):
        assert f'data-fact="{label}">' in page and text in page  # fmt: skip


def test_where_a_missed_page_ranked_comes_from_the_longer_search(tmp_path):
    db, _ = indexed(tmp_path)
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"query": "email client", "expected": ["billing.md"]}\n')
    done = run("--db", db, "eval", "--queries", str(questions), "--mode", "keyword", "-k", "1")
    assert done.exit_code == 0, done.stderr
    assert "'email client': not in the first 1 files; kb search -k 100 shows it at 2" in done.stdout


# --- latency ----------------------------------------------------------------------------------


class Clock:
    """A clock that moves 1 ms per reading, and as far as a test says on top."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_the_model_load_is_timed_apart_from_every_question(tmp_path):
    db, questions = indexed(tmp_path)
    clock = Clock()

    class LoadsOnFirstUse(SimpleEmbedder):
        loaded = False

        def embed_query(self, text: str) -> list[float]:
            if not self.loaded:
                self.loaded = True
                clock.now += 2.0  # the model load
            return super().embed_query(text)

    kb = KnowledgeBase.open(db, embedder=LoadsOnFirstUse(), create=False)
    try:
        result = evaluate_questions(kb, load_questions(questions), modes=["keyword", "hybrid"],
                                    base=tmp_path, clock=clock)  # fmt: skip
    finally:
        kb.close()
    assert result["load_ms"] == {"embedder": 2001.0}
    for mode in ("keyword", "hybrid"):
        latency = result["modes"][mode]["latency_ms"]
        assert latency["first"] == 1.0
        assert [r["latency_ms"] for r in result["modes"][mode]["questions"]] == [1.0] * 3
        assert latency["mean"] == latency["p50"] == latency["p95"] == 1.0
    assert any(text.startswith("2001 ms") for label, text in facts(result) if label == "Model load")
    assert "Model load 2001 ms" in "\n".join(summary_lines(result))
    assert "2001 ms (embedder, before timing)" in html_report(result)
