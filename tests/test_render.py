"""Pure helpers of kbcli.render: snippets, highlighting, source shortening, sizes, summaries."""

from __future__ import annotations

from pathlib import Path

from kbcli.render import human_size, ingest_summary, shorten_source, snippet, term_pattern
from kbcli.sync import SyncReport


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
