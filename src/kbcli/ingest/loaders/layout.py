"""Reading order and paragraphs of recognised text boxes (pages read by :mod:`.ocr`).

Plain Python over the boxes of a document's pages, in the caller's process:

- *deskew* (already done when the page was read): box coordinates are turned by the median
  angle of the page's long lines;
- *blocks*: first the page splits where more than two line heights of space run across it
  (so a header or footer never joins a column);
- *columns*: then a recursive XY cut: a region splits at a vertical gap (at least one line height
  wide) that runs through all of it, when both sides hold real text lines (median width at
  least :data:`COLUMN_MIN_WIDTH` line heights: label/value rows and tables stay rows); else at
  its horizontal gaps, where consecutive bands that share a vertical gap stay together (two
  columns under a full-width title are read column by column, not band by band);
- *lines*: boxes of one region that overlap vertically by half a line are one line, left to
  right;
- *headers and footers*: one of a page's first or last two lines, in the top or bottom
  :data:`MARGIN_SHARE` of the page, whose
  text (digits ignored, so page numbers match) recurs there on at least 60% of the document's
  recognised pages, two at least, is dropped;
- *paragraphs*: a new one starts where the gap above a line is half a line height more than
  the page's usual line gap (the lower quartile of its gaps), where the text height changes by
  a third (a heading), or at a column change; a paragraph's lines are joined with spaces (none
  next to CJK characters) and a word hyphenated across a line break is joined again.
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
from dataclasses import dataclass

from kbcli.ingest.loaders.ocr import PageScan, TextBox

COLUMN_MIN_WIDTH = 6.0  # line heights: the median line width on each side of a column gap
BLOCK_GAP = 2.0  # line heights of empty space that end a block (a header's, a footer's)
MARGIN_SHARE = 0.08  # the top and bottom bands where headers and footers are looked for
MARGIN_LINES = 2  # ... among a page's first and last lines only
REPEAT_SHARE = 0.6  # share of recognised pages a header or footer must recur on
_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")


@dataclass
class _Line:
    boxes: list[TextBox]
    region: int  # which XY-cut region it came from (a change may be a column change)

    @property
    def x0(self) -> float:
        return min(b.x0 for b in self.boxes)

    @property
    def x1(self) -> float:
        return max(b.x1 for b in self.boxes)

    @property
    def y0(self) -> float:
        return min(b.y0 for b in self.boxes)

    @property
    def y1(self) -> float:
        return max(b.y1 for b in self.boxes)

    @property
    def height(self) -> float:
        return statistics.median(b.height for b in self.boxes)

    @property
    def text(self) -> str:
        return _join([b.text for b in sorted(self.boxes, key=lambda b: b.x0)], " ")


def _join(parts: list[str], sep: str) -> str:
    out = ""
    for part in parts:
        if not part:
            continue
        if not out:
            out = part
        elif _CJK.match(out[-1]) or _CJK.match(part[0]):
            out += part
        else:
            out += sep + part
    return out


def _column_gap(boxes: list[TextBox], unit: float) -> float | None:
    """The x of a vertical gap through all ``boxes`` that separates two columns, or None."""
    if len(boxes) < 2:
        return None
    spans = sorted((b.x0, b.x1) for b in boxes)
    best: tuple[float, float] | None = None
    reach = spans[0][1]
    for x0, x1 in spans[1:]:
        if x0 - reach >= unit and (best is None or x0 - reach > best[1] - best[0]):
            best = (reach, x0)
        reach = max(reach, x1)
    if best is None:
        return None
    cut = (best[0] + best[1]) / 2
    for side in ([b for b in boxes if b.x1 <= cut], [b for b in boxes if b.x0 >= cut]):
        if statistics.median(b.x1 - b.x0 for b in side) < COLUMN_MIN_WIDTH * unit:
            return None  # short pieces: label/value rows or a table, read row by row
    return cut


def _bands(boxes: list[TextBox]) -> list[list[TextBox]]:
    """``boxes`` split at horizontal gaps, top to bottom. A box counts by its middle 60%
    (detected boxes have margins: lines set close together overlap a little)."""
    bands: list[list[TextBox]] = []
    bottom = -math.inf
    for box in sorted(boxes, key=lambda b: b.y0 + 0.2 * b.height):
        top, end = box.y0 + 0.2 * box.height, box.y1 - 0.2 * box.height
        if bands and top <= bottom:
            bands[-1].append(box)
            bottom = max(bottom, end)
        else:
            bands.append([box])
            bottom = end
    return bands


def _blocks(boxes: list[TextBox], unit: float) -> list[list[TextBox]]:
    """``boxes`` split where more than :data:`BLOCK_GAP` line heights of space run across."""
    blocks: list[list[TextBox]] = []
    bottom = -math.inf
    for box in sorted(boxes, key=lambda b: b.y0):
        if blocks and box.y0 - bottom <= BLOCK_GAP * unit:
            blocks[-1].append(box)
        else:
            blocks.append([box])
        bottom = max(bottom, box.y1) if len(blocks[-1]) > 1 else box.y1
    return blocks


def _regions(boxes: list[TextBox], unit: float) -> list[list[TextBox]]:
    """``boxes`` cut into regions in reading order (recursive XY cut, module docstring)."""
    blocks = _blocks(boxes, unit)
    if len(blocks) > 1:  # a header, the body, a footer: never parts of one column
        return [region for block in blocks for region in _regions(block, unit)]
    cut = _column_gap(boxes, unit)
    if cut is not None:
        left = [b for b in boxes if (b.x0 + b.x1) / 2 < cut]
        right = [b for b in boxes if (b.x0 + b.x1) / 2 >= cut]
        return _regions(left, unit) + _regions(right, unit)
    bands = _bands(boxes)
    if len(bands) == 1:
        return [boxes]
    groups: list[list[TextBox]] = [bands[0]]
    for band in bands[1:]:
        if _column_gap(groups[-1] + band, unit) is not None:
            groups[-1] = groups[-1] + band
        else:
            groups.append(band)
    if len(groups) == 1:
        return [boxes]
    return [region for group in groups for region in _regions(group, unit)]


def _lines(boxes: list[TextBox], region: int) -> list[_Line]:
    lines: list[_Line] = []
    for box in sorted(boxes, key=lambda b: (b.y0 + b.y1) / 2):
        if lines:
            line = lines[-1]
            overlap = min(line.y1, box.y1) - max(line.y0, box.y0)
            if overlap >= 0.5 * min(line.height, box.height):
                line.boxes.append(box)
                continue
        lines.append(_Line([box], region))
    return lines


def page_lines(scan: PageScan) -> list[_Line]:
    """The page's lines in reading order."""
    if not scan.boxes:
        return []
    unit = statistics.median(b.height for b in scan.boxes)
    out: list[_Line] = []
    for n, region in enumerate(_regions(scan.boxes, unit)):
        out.extend(_lines(region, n))
    return out


def _margin_key(line: _Line, height: int) -> tuple[str, str] | None:
    """``(band, text without digits)`` for a line in the page's top or bottom band."""
    middle = (line.y0 + line.y1) / 2
    if middle < height * MARGIN_SHARE:
        band = "top"
    elif middle > height * (1 - MARGIN_SHARE):
        band = "bottom"
    else:
        return None
    text = re.sub(r"\d+", "#", line.text.lower())
    text = re.sub(r"[\W_]+", " ", text).strip()
    return band, text


def drop_repeated(pages: list[tuple[PageScan, list[_Line]]]) -> None:
    """Remove header and footer lines that recur on most of the pages (module docstring)."""
    counted = [p for p in pages if p[1]]
    if len(counted) < 2:
        return
    need = max(2, math.ceil(REPEAT_SHARE * len(counted)))
    keys: list[tuple[str, str]] = []  # representatives
    seen: list[set[int]] = []
    marks: dict[tuple[int, int], int] = {}
    for p, (scan, lines) in enumerate(counted):
        for i, line in enumerate(lines):
            if MARGIN_LINES <= i < len(lines) - MARGIN_LINES:
                continue
            key = _margin_key(line, scan.height)
            if key is None:
                continue
            k = next((k for k, known in enumerate(keys) if _same_key(known, key)), len(keys))
            if k == len(keys):
                keys.append(key)
                seen.append(set())
            seen[k].add(p)
            marks[(p, i)] = k
    repeated = {k for k, pages_seen in enumerate(seen) if len(pages_seen) >= need}
    for p, (_, lines) in enumerate(counted):
        lines[:] = [ln for i, ln in enumerate(lines) if marks.get((p, i)) not in repeated]


def _same_key(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """The same band and nearly the same text (OCR may misread a letter of a footer)."""
    if a[0] != b[0]:
        return False
    return a[1] == b[1] or difflib.SequenceMatcher(None, a[1], b[1]).ratio() >= 0.85


def paragraphs(lines: list[_Line]) -> list[str]:
    """The lines grouped into paragraphs by vertical gaps (module docstring)."""
    if not lines:
        return []
    pairs = list(zip(lines, lines[1:]))
    gaps = [b.y0 - a.y1 for a, b in pairs if _same_flow(a, b)]
    usual = sorted(gaps)[len(gaps) // 4] if gaps else 0.0  # lower quartile: a line's gap
    groups: list[list[_Line]] = [[lines[0]]]
    for a, b in pairs:
        small, big = sorted((a.height, b.height))
        if not _same_flow(a, b) or big > 1.33 * small or b.y0 - a.y1 > usual + 0.5 * small:
            groups.append([b])
        else:
            groups[-1].append(b)
    return [_paragraph_text([ln.text for ln in group]) for group in groups]


def _same_flow(a: _Line, b: _Line) -> bool:
    """``b`` goes on from ``a``: below it, in the same region or overlapping it horizontally."""
    return b.y0 > a.y0 and (a.region == b.region or _below(a, b))


def _below(a: _Line, b: _Line) -> bool:
    """``b`` continues ``a``'s column: it starts below it and overlaps it horizontally."""
    overlap = min(a.x1, b.x1) - max(a.x0, b.x0)
    return b.y0 >= a.y0 and overlap > 0.3 * min(a.x1 - a.x0, b.x1 - b.x0)


def _paragraph_text(lines: list[str]) -> str:
    out = ""
    for line in lines:
        if out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[:1].islower():
            out = out[:-1] + line  # a word hyphenated across the line break
        else:
            out = _join([out, line], " ")
    return out


def compose(scans: list[PageScan]) -> dict[int, str]:
    """Page number -> recognised text (paragraphs separated by a blank line), over the
    document's pages together (headers and footers are judged across pages)."""
    pages = [(scan, page_lines(scan)) for scan in scans]
    drop_repeated(pages)
    out = {}
    for scan, lines in pages:
        text = "\n\n".join(p for p in paragraphs(lines) if p)
        if text:
            out[scan.number] = text
    return out
