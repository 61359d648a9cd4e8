"""Pure helpers of kbcli.cli.render: snippets, highlighting, source shortening, sizes, summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbcli.cli.render import human_size, ingest_summary, shorten_source, snippet, term_pattern
from kbcli.ingest.sync import SyncReport


def test_snippet_centres_on_the_first_match_and_marks_cuts():
    text = "intro " * 60 + "how to reset the password safely " + "outro " * 60
    out, spans = snippet(text, term_pattern(["reset", "password"]), width=80)
    assert out.startswith("…") and out.endswith("…")
    assert len(out) <= 82
    assert [out[a:b] for a, b in spans] == ["reset", "password"]


def test_snippet_without_match_starts_at_the_beginning():
    out, spans = snippet("alpha   beta\n\ngamma", term_pattern(["zzz"]))
    assert out == "alpha beta gamma" and spans == []


def test_highlight_matches_word_starts_case_insensitively():
    pattern = term_pattern(["pass"])
    assert [m.group() for m in pattern.finditer("Passwords bypass passes")] == [
        "Passwords",
        "passes",
    ]


def test_cjk_terms_match_inside_text():
    pattern = term_pattern(["密码"])
    out, spans = snippet("如何重置密码呢", pattern)
    assert [out[a:b] for a, b in spans] == ["密码"]


def test_shorten_source():
    assert shorten_source(str(Path.cwd() / "docs" / "a.md")) == "docs/a.md"
    assert shorten_source(str(Path.home() / "notes" / "b.md")) == "~/notes/b.md"
    long = "/srv/" + "x" * 60 + "/folder/file.md"
    assert shorten_source(long, width=30) == "…/folder/file.md"
    assert shorten_source(None) == "-"
    assert shorten_source("not-a-path") == "not-a-path"


def test_human_size():
    assert human_size(512) == "512 B"
    assert human_size(1536) == "1.5 KB"
    assert human_size(5 * 1024**3) == "5.0 GB"


def test_ingest_summary_mentions_stale_and_failures():
    report = SyncReport(added=2, updated=1, unchanged=3, stale=2, skipped=1, chunks_added=7)
    lines = ingest_summary(report)
    assert lines[0] == (
        "Indexed 3 files (2 new, 1 changed), 3 unchanged; 7 chunks added, 0 removed."
    )
    assert (
        "2 indexed files still exist but are no longer picked (--ext, .kbignore, hidden, links); "
        "run with --prune to remove them." in lines
    )
    assert any(line.startswith("Skipped 1 file ") for line in lines)
    assert not any("Failed" in line for line in lines)
    kept = ingest_summary(SyncReport(unchanged=1, stale=3, missing=1, removed=2))
    assert "Removed 2 indexed files no longer found under the given paths." in kept
    assert "1 indexed file no longer exists and stayed (--no-prune)." in kept
    assert any(line.startswith("2 indexed files still exist but") for line in kept)


# --- locations are never cut; file names read back ---------------------------------------------

LONG = "/srv/" + "/".join(["a-rather-long-folder-name"] * 4) + "/the-file-with-a-long-name.md"


def table_hits(sources):
    from kbcli import Document, SearchResult
    from kbcli.search.query import Hit

    text = "reset the password " * 30
    return [
        Hit(SearchResult(Document(f"id{i}", text, {"source": s, "line": 40 + i}), 1 - i / 10), 2)
        for i, s in enumerate(sources)
    ]


def screen(width, draw):
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, highlight=False)
    draw(console)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [60, 100, 250])
@pytest.mark.parametrize("explain", [False, True])
def test_search_table_never_cuts_or_wraps_a_location(width, explain):
    """The Location column was capped near 40 characters and folded path:line inside the
    file name, even at 250 columns."""
    from kbcli.cli.render import search_table

    sources = [LONG, "/docs/short.md", LONG.replace("the-file", "another-file")]
    hits = table_hits(sources)
    for hit in hits:
        hit.result.explain = {"keyword": {"rank": 1, "score": 2.0}, "fused": 1.0}
    out = screen(width, lambda c: search_table(hits, ["password"], explain, "file", c))
    lines = out.splitlines()
    for source, hit in zip(sources, hits):
        assert any(f"{source}:{hit.line}" in line for line in lines), out
    table = "Location" in out
    assert table == (width == 250), out  # 100 columns leave too little for a snippet
    locations = [f"{source}:{hit.line}" for source, hit in zip(sources, hits)]
    for line in lines:  # only a location may pass the width (a terminal folds, not cuts, it)
        assert len(line) <= width or any(line.rstrip().endswith(w) for w in locations), line
    assert "password" in out
    if not table:
        assert sum(line.startswith("#") and "chunks" in line for line in lines) == 3


def test_a_short_location_and_short_lines_keep_the_table_at_60_columns():
    from kbcli.cli.render import search_table
    from kbcli.types import LineMatch

    hits = table_hits(["/d/a.md"])
    hits[0].result.match = LineMatch(41, ((40, "Reset the password:"), (41, "`kb reset`")))
    out = screen(60, lambda c: search_table(hits, ["password"], False, "file", c))
    assert "Location" in out and "/d/a.md:41" in out
    assert all(len(line) <= 60 for line in out.splitlines())
    cells = [line.split("│") for line in out.splitlines() if line.count("│") == 6]
    assert [c[5].strip() for c in cells] == ["Reset the password:", "`kb reset`"], out


@pytest.mark.parametrize("width", [60, 250])
def test_list_table_never_cuts_a_source(width):
    from kbcli import Document
    from kbcli.cli.render import documents_table

    docs = [Document("a" * 32, "some text " * 20, {"source": LONG, "chunk_index": 3})]
    out = screen(width, lambda c: documents_table(docs, c))
    assert any(LONG in line for line in out.splitlines()), out
    assert ("Source" in out) == (width == 250)


NAMES = [
    "plain.md",
    "new\nline.md",
    "tab\there.md",
    "esc\x1b[31mred.md",
    "it's.md",
    "back\\slash\nx.md",
    "nbsp\xa0x.md",
    "unicode-😀-é.md",
    "$'looks-quoted'.md",
    "del\x7f.md",
    "line\u2028sep.md",
]


@pytest.mark.parametrize("name", [*NAMES, "bad\udcff\udcfe.md"])
def test_quoted_names_read_back_through_bash(name):
    import os
    import subprocess

    from kbcli.cli.render import needs_quoting, quote_name

    quoted = quote_name(name)
    assert "\n" not in quoted and quoted.isprintable()
    assert (quoted == name) == (not needs_quoting(name))
    assert quoted == name or quoted.startswith("$'")
    shown = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}" if quoted != name else 'printf %s "$0"', name],
        capture_output=True,
        check=True,
    ).stdout
    assert shown == os.fsencode(name)


# --- a hit's own lines --------------------------------------------------------------------------


def test_a_long_line_is_cut_around_its_match_with_an_ellipsis():
    from kbcli.cli.render.snippets import cut_line

    line = "word " * 60 + "the zeppelin command here " + "tail " * 60
    out, spans = cut_line(line, term_pattern(["zeppelin"]), width=60)
    assert out.startswith("…") and out.endswith("…") and len(out) == 60
    assert [out[a:b] for a, b in spans] == ["zeppelin"]
    assert cut_line("short line", term_pattern(["line"]), 60) == ("short line", [(6, 10)])
    start, _ = cut_line("ab " * 40, None, 20)
    assert start == ("ab " * 40)[:19] + "…"  # nothing matches: from the start


def test_a_cut_never_splits_a_wide_character_or_a_combining_mark():
    from rich.cells import cell_len

    from kbcli.cli.render.snippets import cells, cut_line

    wide = "密码" * 50  # two cells each
    out, _ = cut_line(wide, term_pattern(["重置"]), width=21)
    assert cell_len(out) <= 21 and out.endswith("…") and out[:-1] == "密码" * 5
    marked = "e\u0301" * 40  # é as e + a combining acute accent
    out, _ = cut_line(marked, None, width=11)
    assert out[:-1] == "e\u0301" * 10 and out.endswith("…")  # never an e without its accent
    assert (cells("密"), cells("\u0301"), cells("a")) == (2, 0, 1)
    for width in range(2, 30):
        out, _ = cut_line("a密\u0301b" * 20, term_pattern(["b"]), width)
        assert cell_len(out) <= width, (width, out)
        assert not out.lstrip("…")[:1] == "\u0301", out


def test_a_located_hit_shows_its_lines_and_an_unlocated_one_its_text():
    from kbcli import Document, SearchResult
    from kbcli.cli.render.snippets import snippet_lines
    from kbcli.types import LineMatch

    result = SearchResult(Document("a", "flat text of the chunk about a password", {}), 1.0)
    assert snippet_lines(result, term_pattern(["password"])) == [
        (None, "flat text of the chunk about a password", [(31, 39)])
    ]
    result.match = LineMatch(12, ((10, "Reset the password:"), (12, "`kb reset`")))
    assert snippet_lines(result, term_pattern(["password"])) == [
        (10, "Reset the password:", [(10, 18)]),
        (12, "`kb reset`", []),
    ]


def test_the_freshness_note_reads_past_a_hit_that_carries_no_freshness():
    from kbcli.cli.render.hits import freshness_note
    from kbcli.search.query import Hit
    from kbcli.types import Document, Freshness, SearchResult

    changed = SearchResult(
        Document("a", "x", {"source": "/docs/guide/a.md"}), 1.0, freshness=Freshness("changed")
    )
    unknown = SearchResult(Document("b", "y", {"source": "/docs/b.md"}), 0.5)  # no ledger read
    note = freshness_note([Hit(changed), Hit(unknown)])
    assert note == "changed = the file differs from what was indexed. Run: kb ingest /docs/guide"
    assert freshness_note([Hit(unknown)]) is None
