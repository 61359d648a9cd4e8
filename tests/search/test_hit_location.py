"""What a hit shows (issue 41): the line it is for (its best-matching line, so ``$EDITOR +LINE``
and ``kb get path:LINE`` land on it), that line and its neighbours as the snippet with their
line breaks, ``--explain`` under the hits, and a page rather than a line for a PDF. The same
location in the table, ``--json``, ``--format csv/md``, the agent tools and ``kb get``.

Real tldr pages (``tests/data/tldr``) through a real ``kb`` process and in-process; files
written here for the finer points (idf weights, phrases, a changed file, the limits)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run
from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
from kbcli.ingest.sync import sync
from kbcli.text.analysis import Analyzer
from kbcli.types import SearchOptions

ROOT = Path(__file__).resolve().parents[2]
TLDR = ROOT / "tests" / "data" / "tldr" / "pages"
QUESTION = "which process is listening on port 8080"
SS_LINE = "- Show all TCP sockets listening on the local 8080 port:"
SS_COMMAND = "`ss {{[-lt|--listening --tcp]}} src :8080`"


def kb_process(home: Path, *args: str, columns: int = 120) -> subprocess.CompletedProcess:
    """``python -m kbcli ARGS`` in ``home`` (its own database), stdout a pipe ``columns``
    wide."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KB_DB": str(home / "kb.db")}
    env.update(COLUMNS=str(columns), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    env.pop("KB_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def tldr(tmp_path_factory) -> Path:
    """The tldr pages copied and indexed by ``kb ingest`` (the built-in embedder)."""
    home = tmp_path_factory.mktemp("tldr")
    shutil.copytree(TLDR, home / "pages")
    done = kb_process(home, "ingest", "pages", "-q")
    assert done.returncode == 0, done.stderr
    return home


def test_the_ss_page_is_found_on_the_line_the_question_is_about(tldr):
    """``ss.md:1`` named the first line of the chunk; the matching line is 18, the command on
    line 20."""
    done = kb_process(tldr, "search", QUESTION, "--by", "chunk", "-k", "10", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    ss = str(tldr / "pages" / "linux" / "ss.md")
    hits = [h for h in json.loads(done.stdout) if h["metadata"]["source"] == ss]
    first = next(h for h in hits if h["metadata"]["line"] == 1)  # the chunk starting on line 1
    assert first["line"] == 18 and first["location"] == f"{ss}:18"
    assert first["metadata"]["line"] == 1  # the chunk's own start stays in its metadata
    lines = (TLDR / "linux" / "ss.md").read_text().splitlines()
    assert lines[17] == SS_LINE and lines[19] == SS_COMMAND
    # kb get of the location lands on that line
    got = kb_process(tldr, "get", f"pages/linux/ss.md:{first['line']}:3")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [f"18  {SS_LINE}", "19  ", f"20  {SS_COMMAND}"]
    # by file (the default), the page's hit shows the matching line and the command whole
    table = kb_process(tldr, "search", QUESTION, columns=200)
    shown = [line.strip(" │") for line in table.stdout.splitlines()]
    row = next(line for line in shown if "pages/linux/ss.md:" in line)
    assert row.split("│")[2].strip() in ("pages/linux/ss.md:18", "pages/linux/ss.md:20"), row
    assert any(line.endswith(SS_LINE) for line in shown), table.stdout
    assert any(line.endswith(SS_COMMAND) for line in shown), table.stdout


def _screen_checks(out: str, columns: int) -> None:
    """The command and its description each whole on one line; nothing but a location
    wider than the terminal; the table when the snippet has room, else a block per hit."""
    from rich.cells import cell_len

    lines = out.splitlines()
    assert any(line.strip(" │").endswith(SS_COMMAND) for line in lines), out
    assert any(line.strip(" │").endswith(SS_LINE) for line in lines), out
    too_wide = [line for line in lines if cell_len(line) > columns]
    assert not too_wide, out
    table = "Snippet" in out
    if columns != 120:  # 120: the table only when the longest snippet line leaves it room
        assert table == (columns == 200), out
    if not table:  # the block: the location alone on its line, the snippet indented under it
        at = lines.index("pages/linux/ss.md:20")
        assert lines[at - 1].startswith("#") and lines[at + 2] == "   " + SS_COMMAND, out


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_a_command_is_never_split_across_lines_a_real_process(tldr, columns):
    done = kb_process(tldr, "search", QUESTION, "-k", "3", columns=columns)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    _screen_checks(done.stdout, columns)


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_a_command_is_never_split_across_lines_in_process(tldr, columns, monkeypatch):
    """The same through the in-process command, the console ``columns`` wide."""
    monkeypatch.chdir(tldr)
    monkeypatch.setenv("KB_DB", str(tldr / "kb.db"))
    monkeypatch.setenv("COLUMNS", str(columns))
    done = run("search", QUESTION, "-k", "3")
    assert done.exit_code == 0, done.stderr
    _screen_checks(done.stdout, columns)


def test_csv_markdown_and_jsonl_give_the_same_location(tldr):
    located = json.loads(kb_process(tldr, "search", QUESTION, "--json").stdout)
    where = [(h["location"], h["line"]) for h in located]
    assert any(location.endswith("ss.md:20") for location, _ in where)
    rows = list(
        csv.DictReader(io.StringIO(kb_process(tldr, "search", QUESTION, "--format", "csv").stdout))
    )
    assert [(r["location"], int(r["line"])) for r in rows] == where
    jsonl = kb_process(tldr, "search", QUESTION, "--format", "jsonl").stdout.splitlines()
    assert [(json.loads(r)["location"], json.loads(r)["line"]) for r in jsonl] == where
    md = kb_process(tldr, "search", QUESTION, "--format", "md").stdout.splitlines()
    ss = next(line for line in md if "ss.md:20`" in line)
    assert f"{SS_LINE}<br>{SS_COMMAND.replace('|', chr(92) + '|')}<br>" in ss, ss


def test_explain_has_its_own_layout_at_80_columns(tldr, monkeypatch):
    """--explain was crammed into the snippet column: about 20 wrapped lines per hit at 80
    columns, the alpha note repeated under every hit."""
    monkeypatch.chdir(tldr)
    monkeypatch.setenv("KB_DB", str(tldr / "kb.db"))
    monkeypatch.setenv("COLUMNS", "80")
    done = run("search", QUESTION, "-k", "3", "--explain")
    assert done.exit_code == 0, done.stderr
    out = done.stdout
    assert out.count("keyword-first") == 1  # said once, for every hit
    below = out[out.index("How each score was made") :].splitlines()
    blocks = [n for n, line in enumerate(below) if line.startswith("#")]
    assert len(blocks) == 3
    for start, stop in zip(blocks, [*blocks[1:], len(below)]):
        facts = below[start + 1 : stop]
        assert 1 <= len(facts) <= 3 and all(f.startswith("   ") for f in facts), below
        assert facts[0].startswith("   keyword #"), below
    assert all(len(line) <= 80 for line in out.splitlines())
    above = out[: out.index("How each score was made")]
    assert "keyword #" not in above and "fused" not in above  # nothing in the snippets


# --- the best line, finer points ---------------------------------------------------------------


def synced(tmp_path: Path, files: dict[str, str]) -> tuple[KnowledgeBase, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "lines.db"), embedder=SimpleEmbedder())
    sync(kb, [folder])
    return kb, folder


def search(kb, query, mode="keyword", k=5):
    from kbcli.search.query import search as run_search

    return run_search(kb, query, SearchOptions(k=k, mode=mode), by="file")


def test_rare_terms_outweigh_common_ones(tmp_path):
    """Each term weighs its idf: the line holding the rare ``8080`` beats the line holding two
    words every page has."""
    from kbcli.search.location import best_line

    files = {f"server{n}.md": f"# Server {n}\n\nThe server port of unit {n}.\n" for n in range(12)}
    files["ports.md"] = (
        "# Ports\n\nThe server port is set in the server config.\n\nTests use 8080 only.\n"
    )
    kb, folder = synced(tmp_path, files)
    try:
        hit = next(h for h in search(kb, "server port 8080") if h.source.endswith("ports.md"))
        assert hit.line == 5 and hit.result.document.metadata["line"] == 1
        lines = (folder / "ports.md").read_text().splitlines()
        flat = {"server": 1.0, "port": 1.0, "8080": 1.0}  # the same lines, every term alike
        assert best_line(lines, flat, kb.analyzer) == 2  # two terms beat one: line 3
    finally:
        kb.close()


def test_phrases_count_and_ties_go_to_the_earliest_line():
    from kbcli.search.location import best_line

    analyzer = Analyzer()
    weights = {"reset": 1.0, "link": 1.0, "password": 1.0}
    lines = ["Your password: a link to reset it.", "The reset link is sent by mail."]
    assert best_line(lines, weights, analyzer) == 0  # three terms beat two
    assert best_line(lines, weights, analyzer, ["reset link"]) == 1  # the phrase, whole
    assert best_line(["alpha beta", "beta alpha"], {"alpha": 1.0, "beta": 1.0}, analyzer) == 0
    assert best_line(["nothing here", "nor here"], weights, analyzer) is None


def test_a_semantic_hit_with_no_term_in_common_keeps_its_first_line(tmp_path):
    from kbcli.search.location import locate_lines

    kb, _ = synced(tmp_path, {"garden.md": "# Garden\n\nWater the tomatoes.\n\nKeep basil.\n"})
    try:
        results = kb.search("tomatoes", k=1, mode="keyword")
        locate_lines(kb, "unrelated words entirely", results)
        (result,) = results
        assert result.match is not None and not result.match.matched
        assert result.match.line == result.document.metadata["line"] == 1
        assert [n for n, _ in result.match.context] == [1, 3, 5]  # from the chunk's start
    finally:
        kb.close()


def test_a_file_changed_since_it_was_indexed_keeps_the_chunks_first_line(tmp_path):
    """Lines read from a file that no longer holds the chunk there would point at the wrong
    line: the chunk's own start stands, and the snippet is its indexed text."""
    kb, folder = synced(tmp_path, {"a.md": "# A\n\nintro\n\nThe zeppelin pump is blue.\n"})
    try:
        assert search(kb, "zeppelin pump")[0].line == 5
        page = folder / "a.md"
        page.write_text("# A\n\nnew\n\nlines\n\nintro\n\nThe zeppelin pump is blue.\n")
        (hit,) = search(kb, "zeppelin pump")
        assert hit.result.match is None and hit.line == 1
        page.unlink()
        (hit,) = search(kb, "zeppelin pump")
        assert hit.result.match is None and hit.line == 1
    finally:
        kb.close()


def test_what_is_read_to_place_hits_is_bounded(tmp_path, monkeypatch):
    from kbcli.search import location

    kb, _ = synced(
        tmp_path,
        {"a.md": "# A\n\nintro\n\nzeppelin here\n", "b.md": "# B\n\nintro\n\nzeppelin there\n"},
    )
    try:
        assert [h.line for h in search(kb, "zeppelin")] == [5, 5]
        monkeypatch.setattr(location, "MAX_PLACE_TOTAL", 40)  # room for one of the two files
        assert sorted(h.line for h in search(kb, "zeppelin")) == [1, 5]
        monkeypatch.setattr(location, "MAX_PLACE_BYTES", 10)  # neither
        assert [h.line for h in search(kb, "zeppelin")] == [1, 1]
    finally:
        kb.close()


def test_control_characters_of_a_file_never_reach_the_terminal(tmp_path):
    kb, _ = synced(tmp_path, {"a.md": "# A\n\nintro\n\nzeppelin \x1b]0;owned\x07 here\n"})
    try:
        (hit,) = search(kb, "zeppelin")
        assert hit.line == 5
        assert all(
            "\x1b" not in text and "\x07" not in text for _, text in hit.result.match.context
        )
    finally:
        kb.close()


# --- a page, not a line --------------------------------------------------------------------------


@pytest.fixture
def manual(tmp_path) -> Path:
    from hostile import make_pdf

    home = tmp_path / "pdf"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "manual.pdf").write_bytes(
        make_pdf(
            [
                "Introduction to the pump.\nIt is blue.",
                "Gasket replacement happens every spring.\nThe serial KX-4471 identifies it.",
                "Dolphins and whales.",
            ]
        )
    )
    done = kb_process(home, "ingest", "docs", "-q")
    assert done.returncode == 0, done.stderr
    return home


@pytest.mark.slow
def test_a_pdf_hit_is_located_by_its_page_everywhere(manual):
    """``manual.pdf:4`` named a line of extracted text an editor cannot open."""
    pdf = str(manual / "docs" / "manual.pdf")
    (hit,) = json.loads(kb_process(manual, "search", "KX-4471 serial", "--json").stdout)
    assert hit["location"] == f"{pdf}#page=2" and hit["metadata"]["page"] == 2
    table = kb_process(manual, "search", "KX-4471 serial", columns=200).stdout
    assert "docs/manual.pdf#page=2" in table and "(p. 2)" not in table
    (row,) = csv.DictReader(
        io.StringIO(kb_process(manual, "search", "KX-4471", "--format", "csv").stdout)
    )
    assert row["location"] == f"{pdf}#page=2"
    got = kb_process(manual, "get", "docs/manual.pdf#page=2")
    assert got.returncode == 0, got.stderr
    assert [line.split("  ", 1)[1] for line in got.stdout.splitlines()] == [
        "Gasket replacement happens every spring.",
        "The serial KX-4471 identifies it.",
    ]
    as_json = json.loads(kb_process(manual, "get", "docs/manual.pdf#page=3", "--json").stdout)
    assert [line["text"] for line in as_json["lines"]] == ["Dolphins and whales."]


def test_a_page_that_is_not_indexed_is_one_line_and_exit_2(manual):
    done = kb_process(manual, "get", "docs/manual.pdf#page=9")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"Error: No indexed text on page 9 of {manual / 'docs' / 'manual.pdf'}: its indexed "
        "pages are 1, 2, 3\n"
    )
    other = kb_process(manual, "get", "docs/none.pdf#page=1")
    assert other.returncode == 1 and "Traceback" not in other.stderr


def test_the_agent_tool_names_the_page(manual):
    from kbcli import knowledge_tools

    kb = KnowledgeBase(store=SQLiteStore(manual / "kb.db"), embedder=SimpleEmbedder())
    try:
        result = kb.as_tool().call({"query": "KX-4471", "k": 1, "mode": "keyword"})
        (citation,) = result.citations
        location = citation.to_dict()["location"]
        assert location == f"{manual / 'docs' / 'manual.pdf'}#page=2"
        assert ", page 2; id: " in result.text
        # knowledge_get reads that location: the page, not its neighbours
        get = knowledge_tools(kb)[1]
        page = get.call({"path": location})
        assert not page.is_error and "KX-4471" in page.text and "Dolphins" not in page.text
        past = get.call({"path": location.replace("#page=2", "#page=9")})
        assert past.is_error and past.text == (
            f"Error: No indexed text on page 9 of {manual / 'docs' / 'manual.pdf'}: its indexed "
            "pages are 1, 2, 3"
        )
    finally:
        kb.close()


def test_a_note_is_never_placed_in_the_file_it_names(tmp_path):
    """An agent's note names a source; it is no part of that file: placing it must not read
    the file (its lines would answer whether the file holds the note's text), whatever lines
    the note claims."""
    from kbcli import knowledge_tools
    from kbcli.search.query import search as run_search

    kb, folder = synced(tmp_path, {"a.md": "# A\n\nintro\n\nzeppelin here\n"})
    secret = tmp_path / "secret.txt"
    secret.write_text("first\nsecond\nthe vault code is 4711\n")
    meta = {"source": str(secret), "note_by": "acme", "line": 1, "line_end": 3}
    kb.add("first second the vault code is 4711", meta)  # as if written past the tool's checks
    try:
        search = knowledge_tools(kb)[0]
        (cited,) = search.call({"query": "vault code 4711", "k": 1, "mode": "keyword"}).citations
        assert cited.note_by == "acme" and cited.line is None
        assert cited.location == f"note by acme: {secret}"
        (hit,) = run_search(kb, "vault code 4711", SearchOptions(k=1, mode="keyword"))
        assert hit.result.match is None and hit.location == f"note by acme: {secret}"
        (indexed,) = search.call({"query": "zeppelin", "k": 1, "mode": "keyword"}).citations
        assert indexed.line == 5  # an ingested file is read
    finally:
        kb.close()
