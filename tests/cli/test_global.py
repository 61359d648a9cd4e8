"""Global options and the one place errors become messages and exit codes."""

from __future__ import annotations

from cli_helpers import SAMPLE, run, run_json, seed
from kbcli.errors import NotAKnowledgeBaseError
from kbcli.pipeline import KnowledgeBase


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def test_db_option_overrides_env(tmp_path):
    other = tmp_path / "other.db"
    seed([("only in other", {})], db=other)
    hits, _ = run_json("--db", str(other), "search", "other", "--mode", "keyword", "--json")
    assert [h["text"] for h in hits] == ["only in other"]


def test_not_a_kb_database_exits_2(tmp_path):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("just some text, definitely not SQLite\n" * 100)
    result = run("--db", str(bogus), "search", "x")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert str(bogus) in line and "--db" in line


def test_sqlite_file_of_another_program_exits_2(tmp_path):
    import sqlite3

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    result = run("--db", str(other), "stats")
    assert result.exit_code == 2
    assert "not a kb database" in _one_error_line(result)


def test_debug_reraises(tmp_path):
    bogus = tmp_path / "bogus.db"
    bogus.write_text("nope" * 500)
    result = run("--debug", "--db", str(bogus), "stats")
    assert isinstance(result.exception, NotAKnowledgeBaseError)


def test_bad_config_exits_2_naming_the_key(tmp_path):
    config = tmp_path / "jianmu.yaml"
    config.write_text("limits:\n  chunk_sise: 100\n")
    result = run("--config", str(config), "stats")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "limits.chunk_sise" in line and "chunk_size" in line


def test_missing_config_file_exits_2(tmp_path):
    result = run("--config", str(tmp_path / "missing.yaml"), "stats")
    assert result.exit_code == 2
    assert "missing.yaml" in _one_error_line(result)


def test_config_file_sets_the_database(tmp_path, monkeypatch):
    monkeypatch.delenv("KB_DB")
    config = tmp_path / "jianmu.yaml"
    config.write_text("paths:\n  knowledge_db: from-config.db\n")
    seed([("configured", {})], db=tmp_path / "from-config.db")
    figures, _ = run_json("--config", str(config), "stats", "--json")
    assert figures["path"] == str(tmp_path / "from-config.db")
    assert figures["chunks"] == 1


def test_ctrl_c_exits_130_quietly(monkeypatch):
    seed(SAMPLE)

    def interrupted(self, query, options, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(KnowledgeBase, "search_with", interrupted)
    result = run("search", "password")
    assert result.exit_code == 130
    assert "Traceback" not in result.stderr
    assert "Aborted" not in result.stderr


def test_unexpected_exceptions_are_not_swallowed(monkeypatch):
    seed(SAMPLE)

    def broken(self, query, options, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(KnowledgeBase, "search_with", broken)
    result = run("search", "password")
    assert isinstance(result.exception, RuntimeError)
    assert result.exit_code == 1


def test_usage_errors_from_typer_exit_2():
    assert run("search").exit_code == 2
    assert run("search", "x", "-k", "zero").exit_code == 2
    assert run("frobnicate").exit_code == 2


def test_config_option_reaches_chunking(tmp_path):
    cfg = tmp_path / "small.yaml"
    cfg.write_text("limits: {chunk_size: 60, chunk_overlap: 0}\nrag: {chunker: simple}\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text("word " * 100)
    result = run("--config", str(cfg), "ingest", str(docs), "--json")
    assert result.exit_code == 0, result.stderr
    rows, _ = run_json("list", "--json", "--limit", "100")
    assert len(rows) > 5 and all(len(r["text"]) <= 60 for r in rows)


def test_global_options_after_the_command_are_the_groups(tmp_path):
    """``--debug``, ``--config``, ``--store`` and ``--db`` after the command mean what they
    mean before it; the command's help does not list them; ``kb eval --db`` stays its own."""
    bogus = tmp_path / "bogus.db"
    bogus.write_text("nope" * 500)
    assert isinstance(run("stats", "--db", str(bogus), "--debug").exception, NotAKnowledgeBaseError)
    config = tmp_path / "jianmu.yaml"
    config.write_text("limits:\n  chunk_sise: 100\n")
    result = run("stats", "--config", str(config))
    assert result.exit_code == 2 and "limits.chunk_sise" in _one_error_line(result)
    result = run("stats", "--store", "nosuchstore")
    assert result.exit_code == 2 and "nosuchstore" in _one_error_line(result)
    last = run("--db", str(bogus), "stats", "--db", str(tmp_path / "none.db"))
    assert last.exit_code == 1 and "none.db" in last.stderr  # the last one given wins
    help_text = run("search", "--help").stdout
    assert "--debug" not in help_text and "--quiet" not in help_text and "--store" not in help_text
    assert "BEIR: index into this file" in run("eval", "--help").stdout


def test_json_before_the_command_is_the_commands(tmp_path):
    seed(SAMPLE)
    hits, _ = run_json("--json", "search", "password", "--mode", "keyword")
    assert hits and isinstance(hits, list)
    literal = run("--json", "search", "--mode", "keyword", "--", "--json")
    assert literal.exit_code == 0 and literal.stdout.strip() == "[]"  # after --: the query
    assert run("--json", "init", str(tmp_path)).exit_code == 2  # kb init has no --json
