"""Finding markdown-style headings in plain text (shared by the chunkers).

Recognised: ATX headings (``# Title`` .. ``###### Title``) and setext headings (a text line
underlined with ``===`` for level 1 or ``---`` for level 2, as in markdown and most rst).
Lines inside fenced code blocks (``` or ~~~) and a leading YAML front matter block are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING_SEPARATOR = " > "

# Setext underlines are matched alone and their title line is looked up backwards: a pattern
# spanning two lines would scan every line of the text in full.
_LINES = re.compile(
    r"^(?P<fence>```|~~~)[^\n]*$"
    r"|^ {0,3}(?P<hashes>#{1,6})(?:[ \t]+(?P<title>[^\n]*?))?(?:[ \t]+#+)?[ \t]*$"
    r"|^[ \t]{0,3}(?P<under>={3,}|-{3,})[ \t]*$",
    re.MULTILINE,
)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class Heading:
    """A heading line: where it starts in the text, its level and its full path."""

    start: int
    level: int
    path: tuple[str, ...]

    @property
    def label(self) -> str:
        return HEADING_SEPARATOR.join(self.path)


def find_headings(text: str, parents: tuple[str, ...] = ()) -> list[Heading]:
    """Return the headings of ``text`` in order, each with its path below ``parents``.

    A heading of level *n* replaces the path from level *n* down, so "# A / ## B / ### C" gives
    "A > B > C" and a following "## D" gives "A > D".
    """
    headings: list[Heading] = []
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    skip = _FRONT_MATTER.match(text)
    pos = skip.end() if skip else 0
    for m in _LINES.finditer(text, pos):
        if m.group("fence"):
            marker = m.group("fence")
            if fence is None:
                fence = marker
            elif marker == fence:
                fence = None
            continue
        if fence is not None:
            continue
        start = m.start()
        if m.group("hashes"):
            level = len(m.group("hashes"))
            title = (m.group("title") or "").strip()
        else:
            if m.start() == 0:
                continue
            line_start = text.rfind("\n", 0, m.start() - 1) + 1
            title = text[line_start : m.start() - 1].strip()
            if title.startswith(("#", "```", "~~~", "- ", "* ", "|", "=", "---")):
                continue
            if headings and headings[-1].start == line_start:
                continue
            level = 1 if m.group("under").startswith("=") else 2
            start = line_start
        if not title:
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        headings.append(Heading(start, level, parents + tuple(t for _, t in stack)))
    return headings
