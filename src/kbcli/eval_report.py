"""What ``kb eval --queries`` shows: summary lines for the terminal and a self-contained HTML
report (inline SVG plots and CSS, no script, no font or file fetched: it renders offline).

The report of :func:`kbcli.eval_questions.evaluate_questions`'s result holds, per mode: the
metrics with their 95% intervals, hit@k for k = 1..10, the rank of each question's expected
page, the score distributions of expected pages and of the best other page with the
suggested ``--min-score``, the latency, and the questions whose expected page was not first.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
MISS_LIMIT = 15  # misses listed per mode on the terminal


def _metric(value: dict[str, float]) -> str:
    return f"{value['mean']:.3f} [{value['lo']:.3f}, {value['hi']:.3f}]"


def _rank_text(row: dict[str, Any]) -> str:
    """Where the question's best-graded expected page ranked (what hit@k looks at)."""
    rank = row["top_rank"]
    if rank is None:
        return f"not in the first {row['files']} files"
    return f"rank {rank}"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The terminal summary: metrics with intervals per mode, the comparison, the suggested
    ``--min-score``, the misses (where the expected page ranked) and what hit@k means."""
    k = result["k"]
    keys = (f"ndcg@{k}", "hit@1", "hit@3", f"mrr@{k}")
    lines = [f"Questions  {result['queries']} (95% bootstrap intervals in brackets)"]
    for mode, summary in result["modes"].items():
        lines.append("")
        lines.append(f"Mode       {mode}")
        for key in keys:
            lines.append(f"{key:<10} {_metric(summary['metrics'][key])}")
        lat = summary["latency_ms"]
        lines.append(f"{'latency':<10} mean {lat['mean']:.1f} ms, p95 {lat['p95']:.1f} ms")
        for cat, figures in summary["categories"].items():
            parts = ", ".join(f"{key} {figures[key]:.3f}" for key in keys)
            lines.append(f"  {cat} ({figures['queries']}): {parts}")
        suggested = summary["suggested"]
        if suggested["min_score"] is not None:
            lines.append(
                f"{'suggested':<10} --min-score {suggested['min_score']:g} keeps "
                f"{suggested['keeps']:.0%} of the expected pages' hits and drops "
                f"{suggested['drops_others']:.0%} of the best other pages"
            )
        misses = [r for r in summary["questions"] if r["hit@1"] < 1.0]
        if misses:
            lines.append(f"{'misses':<10} {len(misses)} question(s) without the page first:")
            for row in misses[:MISS_LIMIT]:
                lines.append(
                    f"  [{row['id']}] {row['query']!r}: {_rank_text(row)}; first: {row['top']}"
                )
            if len(misses) > MISS_LIMIT:
                lines.append(f"  ... and {len(misses) - MISS_LIMIT} more (--json lists them)")
    for name, deltas in result.get("compare", {}).items():
        lines.append("")
        lines.append(f"Compare    {name} (difference [95% interval])")
        for key in keys:
            d = deltas[key]
            lines.append(f"{key:<10} {d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]")
    floors = result.get("floors")
    if floors:
        lines.append("")
        lines.append(
            f"Floors     nonsense gate {floors['floor']:.3f}, dense-only hits from "
            f"{floors['hit_floor']:.3f} (calibrated at ingest for this embedder)"
        )
    lines.append("")
    lines.append(result["hit_note"])
    return lines


# --- SVG plots ---------------------------------------------------------------------------------


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


class _Plot:
    """A small SVG canvas with a plotting area, axes and a legend."""

    def __init__(self, width: int = 560, height: int = 260, left: int = 56, bottom: int = 40):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, 16, 24, bottom
        self.parts: list[str] = []

    @property
    def inner(self) -> tuple[float, float]:
        return self.width - self.left - self.right, self.height - self.top - self.bottom

    def x(self, share: float) -> float:
        return self.left + share * self.inner[0]

    def y(self, share: float) -> float:
        return self.top + (1.0 - share) * self.inner[1]

    def axes(self, xlabel: str, ylabel: str) -> None:
        x0, y0, x1, y1 = self.x(0), self.y(0), self.x(1), self.y(1)
        self.parts.append(
            f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="axis"/>'
            f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="axis"/>'
            f'<text x="{(x0 + x1) / 2}" y="{self.height - 6}" class="label">{_esc(xlabel)}</text>'
            f'<text x="14" y="{(y0 + y1) / 2}" class="label" '
            f'transform="rotate(-90 14 {(y0 + y1) / 2})">{_esc(ylabel)}</text>'
        )

    def xtick(self, share: float, text: str) -> None:
        x, y = self.x(share), self.y(0)
        self.parts.append(
            f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 4}" class="axis"/>'
            f'<text x="{x}" y="{y + 16}" class="tick">{_esc(text)}</text>'
        )

    def ytick(self, share: float, text: str) -> None:
        x, y = self.x(0), self.y(share)
        self.parts.append(
            f'<line x1="{x - 4}" y1="{y}" x2="{self.x(1)}" y2="{y}" class="grid"/>'
            f'<text x="{x - 7}" y="{y + 4}" class="tick end">{_esc(text)}</text>'
        )

    def legend(self, names: Sequence[str], colors: Sequence[str]) -> None:
        for i, (name, color) in enumerate(zip(names, colors)):
            x = self.x(0) + 8 + i * 130
            self.parts.append(
                f'<rect x="{x}" y="6" width="12" height="12" fill="{color}"/>'
                f'<text x="{x + 16}" y="16" class="tick start">{_esc(name)}</text>'
            )

    def svg(self, title: str) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-label="{_esc(title)}">{"".join(self.parts)}</svg>'
        )


def hit_at_k_plot(result: dict[str, Any]) -> str:
    """hit@k (k = 1..10) per mode: the share of questions with the expected page in the top k."""
    plot = _Plot()
    plot.axes("k (files looked at)", "share of questions")
    for tick in range(0, 11, 2):
        plot.ytick(tick / 10, f"{tick / 10:.1f}")
    for kk in range(1, 11):
        plot.xtick((kk - 1) / 9, str(kk))
    modes = list(result["modes"])
    for i, mode in enumerate(modes):
        rows = result["modes"][mode]["questions"]
        points = []
        ranks = [_top_rank(r) for r in rows]
        for kk in range(1, 11):
            found = sum(1 for rank in ranks if rank is not None and rank <= kk)
            share = found / max(1, len(rows))
            points.append(f"{plot.x((kk - 1) / 9):.1f},{plot.y(share):.1f}")
        color = COLORS[i % len(COLORS)]
        plot.parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
            f'stroke-width="2.5"/>'
        )
        for point in points:
            px, py = point.split(",")
            plot.parts.append(f'<circle cx="{px}" cy="{py}" r="3.5" fill="{color}"/>')
    plot.legend(modes, COLORS)
    return plot.svg("hit@k by mode")


def _top_rank(row: dict[str, Any]) -> int | None:
    """The rank hit@k uses: the best rank of the question's highest-graded expected pages."""
    return row["top_rank"]


RANK_STOPS = (1, 2, 3, 5, 10, 20, 50, 100, 200)


def _rank_share(rank: int | None) -> float:
    """Where a rank sits on the log-scaled axis (1 at the bottom; a miss above the top)."""
    top = math.log(RANK_STOPS[-1])
    if rank is None:
        return 1.0
    return 0.92 * math.log(rank) / top


def rank_plot(result: dict[str, Any]) -> str:
    """The rank of each question's expected page, per mode (log scale; misses on top)."""
    modes = list(result["modes"])
    rows0 = result["modes"][modes[0]]["questions"]
    plot = _Plot(width=max(560, min(1100, 80 + 9 * len(rows0))), height=280)
    plot.axes("question (in file order)", "rank of the expected page")
    for stop in RANK_STOPS:
        plot.ytick(_rank_share(stop), str(stop))
    plot.ytick(1.0, "miss")
    n = max(1, len(rows0) - 1)
    for i, mode in enumerate(modes):
        color = COLORS[i % len(COLORS)]
        offset = (i - (len(modes) - 1) / 2) * 2.5
        for j, row in enumerate(result["modes"][mode]["questions"]):
            x = plot.x(j / n if len(rows0) > 1 else 0.5) + offset
            y = plot.y(_rank_share(row["top_rank"]))
            plot.parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}" fill-opacity="0.8">'
                f"<title>{_esc(row['id'])}: {_esc(row['query'])} ({_esc(_rank_text(row))})"
                "</title></circle>"
            )
    plot.legend(modes, COLORS)
    return plot.svg("rank of each expected page")


def score_plot(mode: str, summary: dict[str, Any], color: str) -> str:
    """Histograms of the expected pages' scores and of the best other pages' scores, with
    the suggested ``--min-score`` as a vertical line."""
    rows = summary["questions"]
    relevant = [r["expected_score"] for r in rows if r["expected_score"] is not None]
    others = [r["other_score"] for r in rows if r["other_score"] is not None]
    values = relevant + others
    plot = _Plot(height=240)
    plot.axes(f"score ({mode})", "questions")
    if not values:
        return plot.svg(f"scores, {mode}")
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    bins = 20

    def counts(data: list[float]) -> list[int]:
        out = [0] * bins
        for v in data:
            out[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
        return out

    rel, oth = counts(relevant), counts(others)
    most = max(rel + oth + [1])
    for tick in range(0, 5):
        plot.ytick(tick / 4, str(round(most * tick / 4)))
    for tick in range(0, 5):
        plot.xtick(tick / 4, f"{lo + (hi - lo) * tick / 4:.2f}")
    width = plot.inner[0] / bins
    for b in range(bins):
        for count, fill, shift in ((rel[b], color, 0.0), (oth[b], "#999999", 0.5)):
            if count:
                h = count / most * plot.inner[1]
                x = plot.x(b / bins) + shift * width
                plot.parts.append(
                    f'<rect x="{x:.1f}" y="{plot.y(0) - h:.1f}" width="{width / 2:.1f}" '
                    f'height="{h:.1f}" fill="{fill}"/>'
                )
    cut = summary["suggested"]["min_score"]
    if cut is not None:
        x = plot.x((cut - lo) / (hi - lo))
        plot.parts.append(
            f'<line x1="{x:.1f}" y1="{plot.y(0)}" x2="{x:.1f}" y2="{plot.y(1)}" '
            f'stroke="#000" stroke-dasharray="5,3" stroke-width="1.5"/>'
            f'<text x="{x + 4:.1f}" y="{plot.y(0.95):.1f}" class="tick start">'
            f"--min-score {cut:g}</text>"
        )
    plot.legend(["expected page", "best other page"], [color, "#999999"])
    return plot.svg(f"scores, {mode}")


def latency_plot(result: dict[str, Any]) -> str:
    """Per mode: bars for the median and p95 latency, a tick at the slowest question."""
    modes = list(result["modes"])
    plot = _Plot(height=60 + 40 * len(modes), left=90)
    plot.axes("milliseconds per question", "")
    slowest = max(result["modes"][m]["latency_ms"]["max"] for m in modes) or 1.0
    for tick in range(0, 5):
        plot.xtick(tick / 4, f"{slowest * tick / 4:.0f}")
    band = plot.inner[1] / len(modes)
    for i, mode in enumerate(modes):
        lat = result["modes"][mode]["latency_ms"]
        y = plot.top + i * band + band * 0.2
        color = COLORS[i % len(COLORS)]
        p95 = lat["p95"] / slowest * plot.inner[0]
        p50 = lat["p50"] / slowest * plot.inner[0]
        top = lat["max"] / slowest * plot.inner[0]
        plot.parts.append(
            f'<rect x="{plot.x(0)}" y="{y:.1f}" width="{p95:.1f}" height="{band * 0.6:.1f}" '
            f'fill="{color}" fill-opacity="0.35"/>'
            f'<rect x="{plot.x(0)}" y="{y:.1f}" width="{p50:.1f}" height="{band * 0.6:.1f}" '
            f'fill="{color}"/>'
            f'<line x1="{plot.x(0) + top:.1f}" y1="{y:.1f}" x2="{plot.x(0) + top:.1f}" '
            f'y2="{y + band * 0.6:.1f}" stroke="{color}" stroke-width="2"/>'
            f'<text x="{plot.x(0) - 6}" y="{y + band * 0.4:.1f}" class="tick end">'
            f"{_esc(mode)}</text>"
        )
    return plot.svg("latency")


# --- the page ----------------------------------------------------------------------------------

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1140px;
       color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.axis { stroke: #333; stroke-width: 1; } .grid { stroke: #ddd; stroke-width: 1; }
.label { font-size: 12px; text-anchor: middle; fill: #333; }
.tick { font-size: 11px; text-anchor: middle; fill: #444; }
.tick.start { text-anchor: start; } .tick.end { text-anchor: end; }
.plots { display: flex; flex-wrap: wrap; gap: 18px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; max-width: 560px; }
.note { color: #555; }
"""


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure>"


def html_report(result: dict[str, Any], title: str = "kb eval") -> str:
    """The whole report as one HTML document (see the module docstring)."""
    k = result["k"]
    keys = (f"ndcg@{k}", "hit@1", "hit@3", f"mrr@{k}")
    modes = list(result["modes"])
    head = "".join(f"<th>{_esc(key)}</th>" for key in keys)
    body = []
    for mode in modes:
        summary = result["modes"][mode]
        cells = "".join(f"<td>{_esc(_metric(summary['metrics'][key]))}</td>" for key in keys)
        lat = summary["latency_ms"]
        body.append(
            f"<tr><td>{_esc(mode)}</td>{cells}<td>{lat['mean']:.1f} / {lat['p95']:.1f}</td></tr>"
        )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f"<p>{result['queries']} questions; metrics over files as <code>kb search</code> "
        "shows them, with 95% bootstrap intervals.</p>",
        f"<table><tr><th>mode</th>{head}<th>latency mean / p95 ms</th></tr>{''.join(body)}</table>",
        f'<p class="note">{_esc(result["hit_note"])}.</p>',
    ]
    for name, deltas in result.get("compare", {}).items():
        cells = "".join(
            f"<td>{deltas[key]['delta']:+.3f} [{deltas[key]['lo']:+.3f}, "
            f"{deltas[key]['hi']:+.3f}]</td>"
            for key in keys
        )
        parts.append(
            f"<h2>{_esc(name)}</h2><table><tr>{head}</tr><tr>{cells}</tr></table>"
            '<p class="note">Paired differences per question; an interval that holds 0 is '
            "within the noise of this many questions.</p>"
        )
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts.append(
        _figure(
            hit_at_k_plot(result),
            "hit@k: share of questions whose expected page is in the first k files.",
        )
    )
    parts.append(
        _figure(
            rank_plot(result),
            "Rank of each question's expected page (log scale); on top: not found in the "
            "searched pool.",
        )
    )
    for i, mode in enumerate(modes):
        summary = result["modes"][mode]
        parts.append(
            _figure(
                score_plot(mode, summary, COLORS[i % len(COLORS)]),
                f"{mode}: scores of the expected pages and of the best other page per "
                "question; dashed: the suggested --min-score.",
            )
        )
    parts.append(
        _figure(
            latency_plot(result),
            "Latency per question: median (dark), p95 (light), slowest (tick).",
        )
    )
    parts.append("</div>")
    floors = result.get("floors")
    if floors:
        parts.append(
            f'<p class="note">Calibrated floors of this index: nonsense gate '
            f"{floors['floor']:.3f}, dense-only hits from {floors['hit_floor']:.3f}.</p>"
        )
    for mode in modes:
        summary = result["modes"][mode]
        misses = [r for r in summary["questions"] if r["hit@1"] < 1.0]
        parts.append(
            f"<h2>{_esc(mode)}: questions without the expected page first ({len(misses)})</h2>"
        )
        if not misses:
            continue
        rows = "".join(
            f"<tr><td>{_esc(r['id'])}</td><td>{_esc(r['query'])}</td>"
            f"<td>{_esc(', '.join(r['ranks']))}</td><td>{_esc(_rank_text(r))}</td>"
            f"<td>{_esc(r['top'])}</td></tr>"
            for r in misses
        )
        parts.append(
            "<table><tr><th>id</th><th>question</th><th>expected</th><th>where it ranked</th>"
            f"<th>first instead</th></tr>{rows}</table>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(result: dict[str, Any], path: str | Path, title: str = "kb eval") -> Path:
    """Write :func:`html_report` to ``path`` (UTF-8) and return it."""
    out = Path(path).expanduser()
    out.write_text(html_report(result, title), encoding="utf-8")
    return out
