"""What ``kb eval --queries`` shows: summary lines for the terminal and a self-contained HTML
report (inline SVG plots and CSS, no script, no font or file fetched: it renders offline).

The report of :func:`kbcli.eval.questions.evaluate_questions`'s result holds: what it was made
on (index, embedder, questions, k, date and time, kb version) and, per mode, the metrics with
their 95% intervals, hit@j for j = 1..k, the rank of each question's expected page, the score
distributions of expected pages and of the best other page with the suggested
``--min-score``, the latency (the model load and each mode's first search apart), and the
questions whose expected page was not first.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbcli.eval.questions import metric_keys

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
MISS_LIMIT = 15  # misses listed per mode on the terminal


def _metric(value: dict[str, float]) -> str:
    return f"{value['mean']:.3f} [{value['lo']:.3f}, {value['hi']:.3f}]"


def _rank_text(row: dict[str, Any]) -> str:
    """Where the question's best-graded expected page ranked (what hit@k looks at), and, when
    it was not among the first k files, where the longer search found it."""
    rank = row["top_rank"]
    if rank is not None:
        return f"rank {rank}"
    files = row["files"]
    if "deeper_k" in row and row["deeper_files"] > files:
        deeper, longer = _deeper_rank(row), row["deeper_k"]
        if deeper is not None:
            return f"not in the first {files} files; kb search -k {longer} shows it at {deeper}"
        return f"not in the first {row['deeper_files']} files (kb search -k {longer})"
    if not files:
        return "not found: the search found no file"
    return f"not among the {files} file{'' if files == 1 else 's'} found"


def _deeper_rank(row: dict[str, Any]) -> int | None:
    """The best rank the longer search gave a best-graded expected page missing from the
    first k files."""
    found = [r for r in row.get("deeper_ranks", {}).values() if r is not None]
    return min(found, default=None)


def facts(result: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` naming what a result was made on, for the terminal and the report:
    index, embedder, questions and k, search settings, when and with which kb, model load."""
    index = result.get("index", {})
    where = index.get("path") or index.get("store", "?")
    parts = [index.get("backend") or index.get("store")]
    if "files" in index:
        parts.append(f"{index['files']:,} files, {index.get('chunks', 0):,} chunks")
    if index.get("last_ingest"):
        parts.append(f"last ingest {index['last_ingest']}")
    out = [("Index", f"{where} ({'; '.join(p for p in parts if p)})")]
    out.append(("Embedder", index.get("embedder") or "none recorded"))
    source = result.get("file")
    questions = f"{result['queries']}" + (f" from {source}" if source else "")
    out.append(("Questions", f"{questions}; k {result['k']} (files looked at per question)"))
    search = result.get("search")
    if search:
        out.append(("Search", ", ".join(f"{key} {value}" for key, value in search.items())))
    created = result.get("created")
    made = [
        created.replace("T", " ") if isinstance(created, str) else None,
        f"kb {result['kb_version']}" if "kb_version" in result else None,
    ]
    if any(made):
        out.append(("Run", ", ".join(m for m in made if m)))
    load = result.get("load_ms", {})
    if "embedder" in load:
        out.append(("Model load", f"{load['embedder']:.0f} ms (embedder, before timing)"))
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The terminal summary: what it was made on, metrics with intervals per mode, the
    latency, the comparison, the suggested ``--min-score``, the misses (where the expected
    page ranked) and what hit@k means."""
    k = result["k"]
    keys = metric_keys(k)
    lines = [f"{label:<10} {text}" for label, text in facts(result)]
    lines.append("(95% bootstrap intervals in brackets)")
    for mode, summary in result["modes"].items():
        lines.append("")
        lines.append(f"Mode       {mode}")
        for key in keys:
            lines.append(f"{key:<10} {_metric(summary['metrics'][key])}")
        lines.append(f"{'latency':<10} {_latency_text(summary['latency_ms'])}")
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
        misses = [r for r in summary["questions"] if r.get("hit@1", 1.0) < 1.0]
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


def _latency_text(lat: dict[str, Any]) -> str:
    text = f"mean {lat['mean']:.1f} ms, p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms"
    text += " per question"
    if "first" in lat:
        text += f"; first search {lat['first']:.1f} ms (reads the index; not counted)"
    return text


def nice_ticks(hi: float, lo: float = 0.0, count: int = 5, integer: bool = False) -> list[float]:
    """Axis ticks covering ``lo``..``hi``: about ``count`` of them, evenly spaced by 1, 2 or 5
    times a power of ten (P. Heckbert, "Nice numbers for graph labels", Graphics Gems, 1990);
    ``integer``: a step of at least 1, for counts. The first and last tick bound the axis."""
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo < 1e-12:
        hi = lo + 1.0
    step = _nice(_nice(hi - lo, round_it=False) / max(1, count - 1), round_it=True)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    first = math.floor(lo / step + 1e-9) * step
    last = math.ceil(hi / step - 1e-9) * step
    n = int(round((last - first) / step))
    return [round(first + i * step, 12) for i in range(n + 1)]


def _nice(x: float, round_it: bool) -> float:
    """The 1-2-5 ladder number nearest ``x`` (``round_it``) or the smallest not below it."""
    exponent = math.floor(math.log10(x))
    fraction = x / 10**exponent
    if round_it:
        ladder = 1 if fraction < 1.5 else 2 if fraction < 3 else 5 if fraction < 7 else 10
    else:
        ladder = 1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10
    return float(ladder * 10**exponent)


def tick_text(ticks: Sequence[float]) -> list[str]:
    """Ticks as text with as many decimals as their step needs (all distinct)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{t:.{decimals}f}" for t in ticks]


# --- SVG plots ---------------------------------------------------------------------------------


def _esc(text: object) -> str:
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
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" class="axis"/>'
            f'<text x="{x:.1f}" y="{y + 16}" class="tick xtick">{_esc(text)}</text>'
        )

    def ytick(self, share: float, text: str) -> None:
        x, y = self.x(0), self.y(share)
        self.parts.append(
            f'<line x1="{x - 4}" y1="{y:.1f}" x2="{self.x(1)}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{x - 7}" y="{y + 4:.1f}" class="tick ytick end">{_esc(text)}</text>'
        )

    def legend(self, entries: Sequence[tuple[str, str, bool]]) -> None:
        """``(name, colour, dashed)`` entries in a row above the plot; a dashed entry gets a
        dashed swatch (the way its curve is drawn)."""
        x = self.x(0) + 8
        for name, color, dashed in entries:
            if dashed:
                swatch = (
                    f'<line x1="{x:.1f}" y1="12" x2="{x + 14:.1f}" y2="12" stroke="{color}" '
                    f'stroke-width="2.5" stroke-dasharray="4,2"/>'
                )
            else:
                swatch = f'<rect x="{x:.1f}" y="6" width="12" height="12" fill="{color}"/>'
            self.parts.append(
                f'{swatch}<text x="{x + 18:.1f}" y="16" class="tick start legend">'
                f"{_esc(name)}</text>"
            )
            x += 34 + 6.2 * len(name)

    def svg(self, title: str) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-label="{_esc(title)}">{"".join(self.parts)}</svg>'
        )


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def hit_at_k_plot(result: dict[str, Any]) -> str:
    """hit@j (j = 1..k) per mode: the share of questions with the expected page among the
    first j files. A mode whose curve is the same as an earlier one's is drawn dashed over it,
    with hollow markers, and its legend says so."""
    k = result["k"]
    plot = _Plot()
    plot.axes("files looked at", "share of questions")
    for tick, text in zip(nice_ticks(1.0), tick_text(nice_ticks(1.0))):
        plot.ytick(tick, text)
    levels = list(range(1, k + 1))

    def share_x(level: int) -> float:
        return (level - 1) / (k - 1) if k > 1 else 0.5

    labels = levels
    if k > 12:
        labels = [1] + [int(t) for t in nice_ticks(k, integer=True) if 1 < t <= k]
    for level in labels:
        plot.xtick(share_x(level), str(level))
    modes = list(result["modes"])
    curves: list[list[float]] = []
    entries = []
    for i, mode in enumerate(modes):
        rows = result["modes"][mode]["questions"]
        ranks = [_top_rank(r) for r in rows]
        shares = [
            sum(1 for rank in ranks if rank is not None and rank <= level) / max(1, len(rows))
            for level in levels
        ]
        same = next((modes[j] for j, curve in enumerate(curves) if curve == shares), None)
        curves.append(shares)
        color = _color(i)
        points = [f"{plot.x(share_x(lv)):.1f},{plot.y(sh):.1f}" for lv, sh in zip(levels, shares)]
        dash = ' stroke-dasharray="7,5"' if same else ""
        plot.parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
            f'stroke-width="2.5"{dash} class="curve" data-mode="{_esc(mode)}"/>'
        )
        if k <= 30:
            for point in points:
                px, py = point.split(",")
                marker = (
                    f'fill="#fff" fill-opacity="0" stroke="{color}" stroke-width="2" r="6"'
                    if same
                    else f'fill="{color}" r="3.5"'
                )
                plot.parts.append(f'<circle cx="{px}" cy="{py}" {marker}/>')
        entries.append((f"{mode} (identical to {same})" if same else mode, color, bool(same)))
    plot.legend(entries)
    return plot.svg("hit@k by mode")


def _top_rank(row: dict[str, Any]) -> int | None:
    """The rank hit@k uses: the best rank of the question's highest-graded expected pages."""
    rank = row["top_rank"]
    return int(rank) if rank is not None else None


def _rank_stops(top: int) -> list[int]:
    """The rank axis's labels: 1, 2, 3, 5, then 1, 2, 5 times each power of ten, up to ``top``."""
    stops, scale = [1, 2, 3, 5], 10
    while scale <= top:
        stops += [step * scale for step in (1, 2, 5)]
        scale *= 10
    return [stop for stop in stops if stop <= top]


def _rank_share(rank: int | None, top: int) -> float:
    """Where a rank sits on the log-scaled axis (1 at the bottom; a miss above the top)."""
    if rank is None:
        return 1.0
    return 0.92 * math.log(rank) / math.log(max(2, top))


def rank_plot(result: dict[str, Any]) -> str:
    """The rank of each question's expected page, per mode (log scale): filled among the
    first k files, hollow where only the longer search found it, a miss on top."""
    k = result["k"]
    top = max(k, result.get("deeper", k))
    modes = list(result["modes"])
    rows0 = result["modes"][modes[0]]["questions"]
    plot = _Plot(width=max(560, min(1100, 80 + 9 * len(rows0))), height=280)
    plot.axes("question (in file order)", "rank of the expected page")
    for stop in _rank_stops(top):
        plot.ytick(_rank_share(stop, top), str(stop))
    plot.ytick(1.0, "miss")
    if k < top:
        y = plot.y(_rank_share(k, top) + 0.02)
        plot.parts.append(
            f'<line x1="{plot.x(0)}" y1="{y:.1f}" x2="{plot.x(1)}" y2="{y:.1f}" stroke="#888" '
            f'stroke-dasharray="3,3"/><text x="{plot.x(1) - 4}" y="{y - 4:.1f}" '
            f'class="tick end halo">above: beyond the first {k} files</text>'
        )
    n = max(1, len(rows0) - 1)
    for i, mode in enumerate(modes):
        color = _color(i)
        offset = (i - (len(modes) - 1) / 2) * 2.5
        for j, row in enumerate(result["modes"][mode]["questions"]):
            x = plot.x(j / n if len(rows0) > 1 else 0.5) + offset
            rank, fill = row["top_rank"], f'fill="{color}" fill-opacity="0.8"'
            if rank is None and _deeper_rank(row) is not None:
                rank, fill = _deeper_rank(row), f'fill="#fff" stroke="{color}" stroke-width="1.5"'
            y = plot.y(_rank_share(rank, top))
            plot.parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" {fill}>'
                f"<title>{_esc(row['id'])}: {_esc(row['query'])} ({_esc(_rank_text(row))})"
                "</title></circle>"
            )
    plot.legend([(mode, _color(i), False) for i, mode in enumerate(modes)])
    return plot.svg("rank of each expected page")


def score_plot(mode: str, summary: dict[str, Any], color: str) -> str:
    """Histograms of the expected pages' scores and of the best other pages' scores, with
    the suggested ``--min-score`` as a vertical line; both axes on round numbers."""
    rows = summary["questions"]
    relevant = [r["expected_score"] for r in rows if r["expected_score"] is not None]
    others = [r["other_score"] for r in rows if r["other_score"] is not None]
    values = relevant + others
    plot = _Plot(height=240)
    plot.axes(f"score ({mode})", "questions")
    if not values:
        return plot.svg(f"scores, {mode}")
    xticks = nice_ticks(max(values), min(values))
    lo, hi = xticks[0], xticks[-1]
    bins = 20

    def counts(data: list[float]) -> list[int]:
        out = [0] * bins
        for v in data:
            out[max(0, min(bins - 1, int((v - lo) / (hi - lo) * bins)))] += 1
        return out

    rel, oth = counts(relevant), counts(others)
    yticks = nice_ticks(max(rel + oth + [1]), integer=True)
    most = yticks[-1]
    for tick, text in zip(yticks, tick_text(yticks)):
        plot.ytick(tick / most, text)
    for tick, text in zip(xticks, tick_text(xticks)):
        plot.xtick((tick - lo) / (hi - lo), text)
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
    plot.legend([("expected page", color, False), ("best other page", "#999999", False)])
    return plot.svg(f"scores, {mode}")


def latency_plot(result: dict[str, Any]) -> str:
    """Per mode: bars for the median and p95 latency per question (model loaded, index
    read), a tick at the slowest question."""
    modes = list(result["modes"])
    plot = _Plot(height=60 + 40 * len(modes), left=90)
    plot.axes("milliseconds per question", "")
    ticks = nice_ticks(max(result["modes"][m]["latency_ms"]["max"] for m in modes))
    slowest = ticks[-1]
    for tick, text in zip(ticks, tick_text(ticks)):
        plot.xtick(tick / slowest, text)
    band = plot.inner[1] / len(modes)
    for i, mode in enumerate(modes):
        lat = result["modes"][mode]["latency_ms"]
        y = plot.top + i * band + band * 0.2
        color = _color(i)
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
.halo { paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.plots { display: flex; flex-wrap: wrap; gap: 18px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; max-width: 560px; }
.note { color: #555; }
table.facts th { background: none; border: none; padding: 1px 12px 1px 0; font-weight: 600; }
table.facts td { border: none; padding: 1px 0; }
"""


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure>"


def html_report(result: dict[str, Any], title: str = "kb eval") -> str:
    """The whole report as one HTML document (see the module docstring)."""
    k = result["k"]
    keys = metric_keys(k)
    modes = list(result["modes"])
    head = "".join(f"<th>{_esc(key)}</th>" for key in keys)
    body = []
    for mode in modes:
        summary = result["modes"][mode]
        cells = "".join(f"<td>{_esc(_metric(summary['metrics'][key]))}</td>" for key in keys)
        lat = summary["latency_ms"]
        first = f"{lat['first']:.1f}" if "first" in lat else "-"
        body.append(
            f"<tr><td>{_esc(mode)}</td>{cells}<td>{lat['mean']:.1f} / {lat['p50']:.1f} / "
            f"{lat['p95']:.1f}</td><td>{first}</td></tr>"
        )
    about = "".join(
        f'<tr><th scope="row">{_esc(label)}</th><td data-fact="{_esc(label.lower())}">'
        f"{_esc(text)}</td></tr>"
        for label, text in facts(result)
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f'<table class="facts">{about}</table>',
        f"<p>Metrics over the first {k} files of each question as <code>kb search -k {k}</code> "
        "shows them (the same search), with 95% bootstrap intervals.</p>",
        f"<table><tr><th>mode</th>{head}<th>ms per question: mean / p50 / p95</th>"
        f"<th>first search ms (not counted)</th></tr>{''.join(body)}</table>",
        f'<p class="note">{_esc(result["hit_note"])}. Latency: each question searched with the '
        "model loaded and the index read; the model load and each mode's first search are "
        "shown apart.</p>",
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
            "hit@k: share of questions whose expected page is among the first k files; "
            "a dashed curve with hollow markers is identical to the one it names.",
        )
    )
    parts.append(
        _figure(
            rank_plot(result),
            f"Rank of each question's expected page (log scale): filled, among the first {k} "
            f"files; hollow, found by the longer search (-k {result.get('deeper', k)}); on "
            "top: not found.",
        )
    )
    for i, mode in enumerate(modes):
        summary = result["modes"][mode]
        parts.append(
            _figure(
                score_plot(mode, summary, _color(i)),
                f"{mode}: scores of the expected pages and of the best other page per "
                "question; dashed: the suggested --min-score.",
            )
        )
    parts.append(
        _figure(
            latency_plot(result),
            "Latency per question, model loaded: median (dark), p95 (light), slowest (tick).",
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
        misses = [r for r in summary["questions"] if r.get("hit@1", 1.0) < 1.0]
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
