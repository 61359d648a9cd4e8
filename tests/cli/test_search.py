"""kb search: table and JSON output, modes, filters, no hits, option errors."""

from __future__ import annotations

import re

import pytest

from cli_helpers import SAMPLE, run, run_json, seed


@pytest.fixture
def ids():
    return seed(SAMPLE)


def test_json_is_an_array_of_hits_and_nothing_else(ids):
    hits, result = run_json("search", "reset password", "--mode", "keyword", "--json")
    assert [h["id"] for h in hits][0] == ids[0]
    assert set(hits[0]) == {
        "id", "score", "text", "metadata", "unit", "location", "line", "matched_chunks",
        "note_by", "freshness", "index",  # issue 39: each hit's freshness, the watermark
    }  # fmt: skip
    assert hits[0]["unit"] == "file" and hits[0]["location"] == "/docs/password.md"
    assert hits[0]["metadata"]["source"] == "/docs/password.md"
    assert isinstance(hits[0]["score"], float)


def test_json_with_explain_adds_the_explain_field(ids):
    hits, _ = run_json("search", "reset password", "--json", "--explain")
    assert hits and all("explain" in h for h in hits)


def test_k_limits_the_hits(ids):
    hits, _ = run_json("search", "invoices password tomatoes", "-k", "2", "--json")
    assert len(hits) == 2


def test_table_shows_rank_source_chunk_and_highlighted_snippet(ids, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = run("search", "reset password", "--mode", "keyword")
    assert result.exit_code == 0, result.stderr
    first_row = next(line for line in result.stdout.splitlines() if "password.md" in line)
    assert "1" in first_row.split("│")[1]
    assert "/docs/password.md" in result.stdout
    assert "Reset" in result.stdout or "reset" in result.stdout
    assert result.stderr == ""
    # 80 columns leave the snippet too little room: a block per hit, the location alone
    monkeypatch.setenv("COLUMNS", "80")
    lines = run("search", "reset password", "--mode", "keyword").stdout.splitlines()
    assert lines[0].startswith("#1  ") and lines[1] == "/docs/password.md"


def test_no_hits_message_on_stderr_exit_0(ids):
    result = run("search", "zyzzyva", "--mode", "keyword")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "No relevant knowledge found." in result.stderr


def test_no_hits_json_prints_empty_array(ids):
    hits, result = run_json("search", "zyzzyva", "--mode", "keyword", "--json")
    assert hits == []
    assert "No relevant knowledge found." in result.stderr


def test_filter_narrows_hits(ids):
    hits, _ = run_json("search", "invoices", "--mode", "keyword", "--filter", "page=2", "--json")
    assert [h["id"] for h in hits] == [ids[3]]
    hits, _ = run_json(
        "search", "invoices", "--mode", "keyword", "-f", "lang=de", "-f", "page<2", "--json"
    )
    assert [h["id"] for h in hits] == [ids[2]]


@pytest.mark.parametrize("alias", ["sparse", "dense", "vector", "SEMANTIC", "hybrid"])
def test_mode_aliases_are_accepted(ids, alias):
    result = run("search", "password", "--mode", alias, "--json")
    assert result.exit_code == 0, result.stderr


def test_unknown_mode_exits_2_with_the_valid_list(ids):
    result = run("search", "password", "--mode", "fuzzy")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "fuzzy" in lines[0] and "keyword, semantic, hybrid" in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_filter_exits_2_naming_the_expression(ids):
    result = run("search", "password", "--filter", "lang")
    assert result.exit_code == 2
    assert "'lang'" in result.stderr and "key=value" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unknown_fusion_exits_2(ids):
    result = run("search", "password", "--fusion", "max")
    assert result.exit_code == 2
    assert "weighted, rrf" in result.stderr


def test_alpha_out_of_range_is_a_usage_error(ids):
    result = run("search", "password", "--alpha", "1.5")
    assert result.exit_code == 2


def test_min_score_drops_weak_hits(ids):
    all_hits, _ = run_json("search", "invoices", "--mode", "keyword", "--by", "chunk", "--json")
    best = max(h["score"] for h in all_hits)
    hits, _ = run_json(
        "search", "invoices", "-m", "keyword", "--by", "chunk", "--min-score", str(best), "--json"
    )
    assert len(hits) == 1 < len(all_hits)


def test_fusion_rrf_runs(ids):
    hits, _ = run_json("search", "reset password", "--fusion", "rrf", "--json")
    assert hits[0]["id"] == ids[0]


def test_missing_database_is_an_error_and_not_created(tmp_path):
    db = tmp_path / "none.db"
    result = run("--db", str(db), "search", "x")
    assert result.exit_code == 1
    assert "No knowledge base" in result.stderr and "kb ingest" in result.stderr
    assert not db.exists()


def test_embedder_note_only_when_the_choice_changed(ids, monkeypatch):
    plain = run("search", "password", "--json")
    assert plain.exit_code == 0
    assert "Using" not in plain.stderr  # the index's own embedder, nothing changed
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    result = run("search", "password", "--json")
    assert result.exit_code == 0
    assert "Using simple/char-hash-64" in result.stderr
    quiet = run("-q", "search", "password", "--json")
    assert quiet.exit_code == 0
    assert "Using" not in quiet.stderr
    assert quiet.stdout == result.stdout


@pytest.mark.parametrize("expr", ["year>>3", "year=<3", "year<>3", "year=>3", "year!3", "year>"])
def test_mistyped_filter_operator_exits_2_with_one_line(ids, expr):
    result = run("search", "password", "--mode", "keyword", "--filter", expr)
    assert result.exit_code == 2, result.stdout
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and repr(expr) in lines[0], result.stderr
    assert "did you mean" in lines[0] or "key>=3" in lines[0]


@pytest.mark.parametrize("option", ["--min-score", "--alpha", "--mmr", "--min-relevance"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_numbers_are_refused_at_the_option(ids, option, value):
    """--min-score nan was accepted and every hit compared false with it: an empty answer
    with exit 0, as if nothing matched."""
    result = run("search", "password", option, value)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "finite" in lines[0], result.stderr


def test_min_score_nan_through_the_library_is_refused():
    from kbcli import KnowledgeBase
    from kbcli.errors import InvalidOptionError

    kb = KnowledgeBase()
    kb.add("reset your password")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(InvalidOptionError, match="min_score must be a finite number"):
            kb.search("password", min_score=bad)
    assert len(kb.search("password", min_score=-1e9)) == 1


PYTHON_LITERAL = re.compile(r"\b(True|False|None)\b|[{}\[\]]|'\w+':")


def test_explain_says_why_alpha_is_tiny_and_prints_no_python_values(ids):
    """--explain printed "alpha 0.001" beside kb config's 0.6 with no reason, then
    "keyword_first True" and "mmr {'lambda': 0.5, ...}"."""
    result = run("search", "reset password", "--explain", "--mmr", "0.5", "--by", "chunk")
    assert result.exit_code == 0, result.stderr
    screen = result.stdout
    flat = " ".join(line.strip(" │") for line in screen.splitlines())
    assert "alpha 0.001 (keyword-first: the simple embedder is weak; limits.rerank_alpha 0.6" in (
        " ".join(flat.split())
    )
    assert "applies to a strong embedder)" in " ".join(flat.split())
    assert not PYTHON_LITERAL.search(screen), screen
    assert "mmr lambda 0.500, pool_rank 1, similarity" in " ".join(flat.split())
    hits, _ = run_json("search", "reset password", "--explain", "--json")
    assert hits[0]["explain"]["keyword_first"] is True
    assert hits[0]["explain"]["alpha_note"].startswith("keyword-first: the simple embedder")


def test_explain_with_a_chosen_alpha_has_no_note(ids):
    result = run("search", "reset password", "--explain", "--alpha", "0.5", "-k", "1")
    assert "alpha 0.500" in result.stdout and "keyword-first" not in result.stdout


def test_explain_text_spells_every_value():
    from kbcli.cli.render import explain_text

    text = explain_text(
        {
            "keyword": {"rank": 2, "score": 1.5},
            "dense": None,
            "fused": 0.25,
            "keyword_first": True,
            "duplicates": ["a1", "b2"],
            "mmr": {"lambda": 0.5, "pool_rank": 3, "similarity": "jaccard"},
            "flag": False,
        }
    )
    assert text.splitlines() == [
        "keyword #2 (1.500)",
        "dense not found",
        "fused 0.250",
        "keyword_first yes",
        "duplicates 2 collapsed (a1, b2)",
        "mmr lambda 0.500, pool_rank 3, similarity jaccard",
        "flag no",
    ]


# --- --format files with names a line cannot hold ----------------------------------------------


@pytest.fixture
def odd_names(tmp_path):
    """A real folder whose files' names hold a newline, a tab and an escape, ingested."""
    folder = tmp_path / "odd"
    folder.mkdir()
    names = ["plain.md", "two\nlines.md", "tab\there.md", "esc\x1b[31m.md"]
    for name in names:
        (folder / name).write_text(f"# Notes\n\nthe ferry timetable for {name!r}\n")
    assert run("ingest", str(folder)).exit_code == 0
    return [str(folder / name) for name in names]


@pytest.mark.parametrize("command", [["search", "ferry timetable", "-k", "10"], ["list"]])
def test_files_format_quotes_names_a_line_cannot_hold(odd_names, command):
    """A file name holding a newline came out as two lines of --format files."""
    import subprocess

    result = run(*command, "--format", "files")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(odd_names)
    assert odd_names[0] in lines  # a plain name is as it was
    quoted = [line for line in lines if line.startswith("$'")]
    assert len(quoted) == 3
    script = "for f in " + " ".join(quoted) + '; do test -f "$f" && printf "%s\\0" "$f"; done'
    back = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert sorted(back.split(b"\0")[:-1]) == sorted(n.encode() for n in odd_names[1:])
    assert "3 file names hold a newline or another control character" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [["search", "ferry timetable", "-k", "10"], ["list"]])
def test_null_separated_names_are_exact(odd_names, command):
    import subprocess

    result = run(*command, "-0")
    assert result.exit_code == 0, result.stderr
    names = result.stdout_bytes.split(b"\0")
    assert names[-1] == b"" and sorted(names[:-1]) == sorted(n.encode() for n in odd_names)
    assert result.stderr == ""
    # what xargs -0 receives
    counted = subprocess.run(
        ["xargs", "-0", "wc", "-l"], input=result.stdout_bytes, capture_output=True, check=True
    ).stdout.decode()
    assert counted.strip().endswith(" 12 total")  # four files of three lines, each opened
    same = run(*command, "--null", "--format", "files")
    assert same.stdout_bytes == result.stdout_bytes


def test_null_with_another_format_is_one_line(odd_names):
    for args in (["--format", "json"], ["--json"], ["--format", "csv"]):
        result = run("search", "ferry", "-0", *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and "-0" in result.stderr, result.stderr


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_an_empty_query_is_a_usage_error(ids, query):
    """Was 'No relevant knowledge found.', exit 0: a script with an unset variable searched
    for nothing and carried on."""
    result = run("search", query, "--json")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "Error: The query is empty: give the words to look for, as in kb search 'reset password'\n"
    )
