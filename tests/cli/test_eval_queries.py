"""kb eval --queries: your own questions on the live index, through kb; --compare, --report
(rendered by headless Chromium from the distribution's packages: a screenshot check, and the
rendered DOM read through chromedriver)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import date

import pytest

from cli_helpers import run, run_json
from extras import need
from sample_docs import indexed
from webdriver import Browser, find


def test_eval_queries_scores_the_live_index(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # docs/sync.md is relative to the working folder
    db, questions = indexed(tmp_path)
    out, result = run_json("--db", db, "eval", "--queries", str(questions), "--mode",
                           "keyword", "--json")  # fmt: skip
    summary = out["modes"]["keyword"]
    assert out["queries"] == 3 and set(summary["metrics"]) == {"ndcg@10", "hit@1", "hit@3",
                                                                "mrr@10"}  # fmt: skip
    for value in summary["metrics"].values():
        assert value["lo"] <= value["mean"] <= value["hi"]
    rows = {r["query"]: r for r in summary["questions"]}
    assert rows["reset link password"]["top_rank"] == 1
    assert rows["reset link password"]["id"] == "pw"
    assert rows["invoices email"]["ranks"]["billing.md"] == 1
    assert summary["categories"]["support"]["queries"] == 1
    assert summary["suggested"]["min_score"] is not None
    assert "hit@k" in out["hit_note"]


def test_eval_queries_text_output_explains_hit_at_1_and_lists_misses(tmp_path):
    db, questions = indexed(tmp_path)
    with questions.open("a") as fh:
        fh.write(json.dumps({"query": "weather tomorrow", "expected": ["sync.md"]}) + "\n")
    result = run("--db", db, "eval", "--queries", str(questions), "--compare",
                 "keyword,hybrid")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "Mode       keyword" in text and "Mode       hybrid" in text
    assert "Compare    hybrid vs keyword" in text
    assert re.search(r"hit@1\s+\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", text)
    assert "'weather tomorrow': not found: the search found no file" in text
    assert "the highest-graded one, when grades differ" in text


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"query": "x", "expected": ["nowhere.md"]}', "nowhere.md is not in the index"),
        ('{"query": "x", "expected": ["md"]}', "is not in the index"),
        ('{"query": "", "expected": ["sync.md"]}', "query must be a non-empty string"),
        ('{"query": "x", "expected": {"sync.md": 0}}', "must be a whole number, 1 or more"),
        ("not json", "line 1 is not valid JSON"),
    ],
)
def test_bad_queries_files_are_one_line_and_exit_2(tmp_path, line, message):
    db, _ = indexed(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n")
    result = run("--db", db, "eval", "--queries", str(bad))
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_an_ambiguous_expected_path_is_refused(tmp_path):
    db, _ = indexed(tmp_path)
    other = tmp_path / "more"
    other.mkdir()
    (other / "sync.md").write_text("# Sync\n\nAnother page about sync.\n")
    assert run("--db", db, "ingest", str(other)).exit_code == 0
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"query": "sync", "expected": ["sync.md"]}\n')
    result = run("--db", db, "eval", "--queries", str(bad))
    assert result.exit_code == 2 and "matches 2 indexed files" in result.stderr


def test_eval_needs_a_folder_or_queries(tmp_path):
    result = run("eval")
    assert result.exit_code == 2 and "--queries FILE" in result.stderr
    folder = tmp_path / "x"
    folder.mkdir()
    both = run("eval", str(folder), "--report", str(tmp_path / "r.html"))
    assert both.exit_code == 2 and "go with --queries" in both.stderr


def chromium() -> str:
    return find("chromium", "chromium-browser")


@pytest.mark.slow
def test_the_html_report_renders_offline_in_headless_chromium(tmp_path):
    db, questions = indexed(tmp_path)
    report = tmp_path / "report.html"
    result = run("--db", db, "eval", "--queries", str(questions), "--compare", "keyword,hybrid",
                 "--report", str(report))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "Report written to" in result.stderr
    page = report.read_text(encoding="utf-8")
    # self-contained: no script, no stylesheet, image or font fetched from anywhere
    assert "<script" not in page
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//|file:)""", page)
    assert page.count("<svg") >= 5  # hit@k, ranks, two score plots, latency
    for plot in ("hit@k by mode", "rank of each expected page", "scores, keyword", "latency"):
        assert f'aria-label="{plot}"' in page
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1200,1400", f"--screenshot={shot}", report.as_uri()],
        capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0 and shot.exists(), done.stderr[-500:]
    need("PIL")  # Pillow: the test extra installs it
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1400)
    colors = image.getcolors(maxcolors=1 << 20)
    counts = {rgb: n for n, rgb in colors}
    # the plots drew: the two modes' colours cover real areas (lines, dots, bars)
    for rgb in ((0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)):
        assert counts.get(rgb, 0) > 200, (rgb, sorted(colors)[-5:])
    assert len(counts) > 50  # text and shapes, not a blank or an error page


READ_REPORT = """
const text = (el) => el ? el.textContent.trim() : null;
const seen = (el) => { const b = el.getBoundingClientRect(); return b.width > 0 || b.height > 0; };
const facts = {};
for (const tr of document.querySelectorAll('table.facts tr')) {
  facts[text(tr.querySelector('th'))] = text(tr.querySelector('td'));
}
const plots = {};
for (const svg of document.querySelectorAll('svg')) {
  const ticks = (cls) => [...svg.querySelectorAll('text.' + cls)].map(
    (t) => ({text: text(t), seen: seen(t)}));
  const box = svg.getBoundingClientRect();
  plots[svg.getAttribute('aria-label')] = {
    box: {x: box.x, y: box.y, width: box.width, height: box.height},
    yticks: ticks('ytick'), xticks: ticks('xtick'),
    legend: [...svg.querySelectorAll('text.legend')].map(text),
    curves: [...svg.querySelectorAll('polyline.curve')].map((c) => ({
      mode: c.dataset.mode, seen: seen(c), dash: getComputedStyle(c).strokeDasharray,
      stroke: getComputedStyle(c).stroke, points: c.getAttribute('points')})),
  };
}
return {facts, plots, ratio: window.devicePixelRatio};
"""


@pytest.mark.slow
def test_the_rendered_report_names_the_run_and_reads_right_in_chromium(tmp_path):
    """Read back from the page Chromium rendered: the facts that name the run, round and
    distinct axis ticks, and two identical curves both visible (one dashed, named so)."""
    db, questions = indexed(tmp_path)
    with questions.open("a") as fh:  # a miss and a second place: a curve that rises
        fh.write(json.dumps({"query": "weather tomorrow", "expected": ["sync.md"]}) + "\n")
        fh.write(json.dumps({"query": "email client", "expected": ["billing.md"]}) + "\n")
    report = tmp_path / "report.html"
    out, _ = run_json("--db", db, "eval", "--queries", str(questions), "--compare",
                      "keyword,hybrid", "--report", str(report), "--json")  # fmt: skip
    with Browser(tmp_path) as browser:
        browser.open(report.as_uri())
        page = browser.run(READ_REPORT)
        shot = browser.screenshot(tmp_path / "report.png")
    from kbcli import __version__

    facts = page["facts"]
    assert facts["Index"].startswith(str(tmp_path / "kb.db")) and "3 files" in facts["Index"]
    assert facts["Embedder"].startswith("simple/char-hash")
    assert facts["Questions"].startswith(f"5 from {questions}") and "k 10" in facts["Questions"]
    assert date.today().isoformat() in facts["Run"] and f"kb {__version__}" in facts["Run"]
    assert facts["Model load"].endswith("ms (embedder, before timing)")
    plots = page["plots"]
    assert set(plots) >= {"hit@k by mode", "rank of each expected page", "scores, keyword",
                          "scores, hybrid", "latency"}  # fmt: skip
    for name, plot in plots.items():
        for axis in ("yticks", "xticks"):
            texts = [t["text"] for t in plot[axis]]
            assert len(set(texts)) == len(texts), (name, axis, texts)  # none repeated
            assert all(t["seen"] for t in plot[axis]), (name, axis)
        if name.startswith("scores"):
            counts = [t["text"] for t in plot["yticks"]]
            assert counts[0] == "0" and all(c.isdigit() for c in counts), counts
            assert [int(c) for c in counts] == sorted(int(c) for c in counts)
    # the weak built-in embedder ranks hybrid keyword-first here: the same curve twice
    rows = {m: [r["top_rank"] for r in out["modes"][m]["questions"]] for m in out["modes"]}
    assert rows["keyword"] == rows["hybrid"]
    hit = plots["hit@k by mode"]
    keyword, hybrid = hit["curves"]
    assert keyword["seen"] and hybrid["seen"] and keyword["points"] == hybrid["points"]
    assert keyword["dash"] == "none" and hybrid["dash"] != "none"
    assert hit["legend"] == ["keyword", "hybrid (identical to keyword)"]
    # and both show on screen: the hidden one's colour comes through the dashes
    from PIL import Image

    ratio, box = page["ratio"], hit["box"]
    image = Image.open(shot).convert("RGB")
    area = image.crop(tuple(round(v * ratio) for v in (
        box["x"], box["y"] + 24, box["x"] + box["width"], box["y"] + box["height"])))  # fmt: skip
    counts = {rgb: n for n, rgb in area.getcolors(maxcolors=1 << 20)}
    blue, red = counts.get((0x1F, 0x77, 0xB4), 0), counts.get((0xD6, 0x27, 0x28), 0)
    assert blue > 100 and red > 100, (blue, red)
