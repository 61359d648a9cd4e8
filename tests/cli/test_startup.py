"""What whole ``kb`` processes import and print on their fast paths: ``kb --help`` from the
stored root help (:mod:`kbcli.cli.help_cache`), byte for byte typer's, and a light keyword
search that imports only what it uses. Real subprocesses; no timings (those are
benchmarks/bench_startup.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbcli.cli import help_cache, help_store

SRC = Path(__file__).resolve().parents[2] / "src"
TYPER_HELP = "import sys, kbcli.cli as cli; cli._load().main(sys.argv[1:])"


def _env(src: Path = SRC, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "KB_CONFIG", "KB_DB")}
    env["PYTHONPATH"] = str(src)
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True)


def _imported(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_stored_root_help_is_current():
    """Fails when a command or an option changed since the store was written; with the typer
    and Python it was written with, also when its text differs from typer's (with others, kb
    never prints it: the fallback is checked below)."""
    kb_files, renderer = help_cache.fingerprint().split("-")
    stored = help_cache.stored_fingerprint()
    assert stored is not None and stored.split("-")[0] == kb_files, (
        "kb's commands changed: run `python -m kbcli.cli.help_store` to write the store again"
    )
    if stored.split("-")[1] != renderer:
        assert help_cache.stored_help(80) is None  # another typer or Python: not used
        return
    for width in range(help_cache.MIN_WIDTH, help_cache.MAX_WIDTH + 1):
        assert help_cache.stored_help(width) == help_store.render(width), (
            f"width {width}: run `python -m kbcli.cli.help_store` to write the store again"
        )


@pytest.mark.parametrize("columns", ["1", "40", "52", "81", "100", "159", "160", "161", "300"])
def test_kb_help_is_typers_help_at_every_width(tmp_path, columns):
    env = _env(COLUMNS=columns)
    fast = _run(["-m", "kbcli", "--help"], env, tmp_path)
    typer = _run(["-c", TYPER_HELP, "--help"], env, tmp_path)
    assert fast.returncode == typer.returncode == 0
    assert fast.stdout == typer.stdout and "Commands:" in fast.stdout
    assert fast.stderr == typer.stderr == ""
    assert _run(["-m", "kbcli", "-h"], env, tmp_path).stdout == typer.stdout
    # a bare kb: the same help on stderr, exit code 2 (typer's no_args_is_help)
    bare = _run(["-m", "kbcli"], env, tmp_path)
    typer_bare = _run(["-c", TYPER_HELP], env, tmp_path)
    assert (bare.returncode, bare.stdout, bare.stderr) == (2, "", typer.stdout)
    assert (typer_bare.returncode, typer_bare.stdout, typer_bare.stderr) == (2, "", typer.stdout)


@pytest.mark.parametrize("argv", [["--help"], []])
def test_kb_help_imports_no_typer_yaml_rich_or_store(tmp_path, argv):
    done = _run(["-X", "importtime", "-m", "kbcli", *argv], _env(), tmp_path)
    assert done.returncode == (0 if argv else 2)
    assert "Usage: kb [OPTIONS] COMMAND" in (done.stdout if argv else done.stderr)
    names = _imported(done.stderr)
    assert "kbcli.cli.help_cache" in names  # the measurement saw our imports at all
    unwanted = ("typer", "click", "yaml", "rich", "kbcli.stores", "kbcli.config.lookup", "pathlib")
    assert sorted(n for n in names if n.split(".")[0] in unwanted or n in unwanted) == []


def test_other_commands_and_completion_still_go_through_typer(tmp_path):
    done = _run(["-X", "importtime", "-m", "kbcli", "search", "--help"], _env(), tmp_path)
    assert done.returncode == 0 and "Usage: kb search [OPTIONS] QUERY" in done.stdout
    assert "typer" in _imported(done.stderr)
    # typer's shell completion answers through the same argv: never from the store
    env = _env(_KB_COMPLETE="complete_bash", COMP_WORDS="kb --he", COMP_CWORD="1")
    done = _run(["-m", "kbcli", "--help"], env, tmp_path)
    assert "Usage:" not in done.stdout


def test_an_edited_source_is_not_answered_from_the_store(tmp_path):
    """A checkout whose command text changed after the store was written prints typer's new
    text, not the stored one."""
    copy = tmp_path / "src"
    shutil.copytree(SRC / "kbcli", copy / "kbcli", ignore=shutil.ignore_patterns("__pycache__"))
    search = copy / "kbcli" / "cli" / "search.py"
    old = '"""Search the knowledge base;'
    assert old in search.read_text()
    search.write_text(search.read_text().replace(old, '"""Look through the knowledge base;'))
    done = _run(["-X", "importtime", "-m", "kbcli", "--help"], _env(copy), tmp_path)
    assert done.returncode == 0
    assert "search  Look through the knowledge base;" in done.stdout
    assert "typer" in _imported(done.stderr)


def test_a_missing_or_damaged_store_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(help_cache, "STORE", str(tmp_path / "missing.zlib"))
    assert help_cache.stored_help(78) is None
    (tmp_path / "bad.zlib").write_bytes(b"not zlib")
    monkeypatch.setattr(help_cache, "STORE", str(tmp_path / "bad.zlib"))
    assert help_cache.stored_help(78) is None
    assert help_cache.print_root_help(["--help"]) is None
    assert help_cache.print_root_help([]) is None


@pytest.mark.parametrize("columns", [None, "0", "-3", "x", "1", "77", "500"])
def test_terminal_columns_are_shutils(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert help_cache.terminal_columns() == shutil.get_terminal_size().columns


def test_commands_table_is_the_applications():
    """:data:`kbcli.cli.COMMANDS` (what a command run imports alone) names every command of
    the application, in ``kb --help``'s order, also after a run that loaded one command."""
    code = (
        "import kbcli.cli as cli, typer.main\n"
        "cli._load('watch'); cli._load('search')\n"
        "print(list(typer.main.get_command(cli.app).commands))\n"
        "print(list(cli.COMMANDS))"
    )
    done = _run(["-c", code], _env(), SRC)
    assert done.returncode == 0, done.stderr
    registered, table = done.stdout.splitlines()
    assert registered == table


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """A real SQLite index of a few files, and a ./jianmu.yaml the command reads."""
    folder = tmp_path_factory.mktemp("startup")
    docs = folder / "docs"
    docs.mkdir()
    for i in range(20):
        (docs / f"note{i}.md").write_text(
            f"# Note {i}\n\nTo reset your password open Settings number {i} and click Reset.\n"
        )
    (folder / "jianmu.yaml").write_text("limits:\n  chunk_size: 500\n")
    done = _run(["-m", "kbcli", "--db", "kb.db", "ingest", "docs"], _env(), folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_keyword_search_imports_only_its_command(indexed):
    argv = ["-X", "importtime", "-m", "kbcli", "--db", "kb.db", "search", "reset password"]
    done = _run([*argv, "--mode", "keyword"], _env(), indexed)
    assert done.returncode == 0, done.stderr
    assert "note" in done.stdout
    names = _imported(done.stderr)
    assert "kbcli.stores.sqlite.packread" in names  # the light, numpy-free keyword path
    assert "kbcli.cli.search" in names
    others = {f"kbcli.cli.{m}" for m in ("ingest", "add", "ask", "mcp", "eval_", "watch")}
    drawn = {f"kbcli.cli.render.{m}" for m in ("answers", "documents", "ingest", "reports")}
    unwanted = (
        "numpy",
        "pydantic",
        "kbcli.cli.help_cache",
        "kbcli.agent.mcp.server",
        *others,
        *drawn,
    )
    assert sorted(n for n in names if n.split(".")[0] in unwanted or n in unwanted) == []


def test_a_command_reads_the_configuration_file_once(indexed, monkeypatch):
    from typer.testing import CliRunner

    import kbcli.config.lookup as config_module

    calls = []
    read_file = config_module.read_file

    def counted(file):
        calls.append(file)
        return read_file(file)

    monkeypatch.setattr(config_module, "read_file", counted)
    monkeypatch.chdir(indexed)
    monkeypatch.delenv("KB_CONFIG", raising=False)
    from kbcli.cli import app

    done = CliRunner().invoke(app, ["--db", "kb.db", "search", "reset", "--mode", "keyword"])
    assert done.exit_code == 0, done.output
    assert [p.name for p in calls] == ["jianmu.yaml"]


@pytest.mark.parametrize(
    "text, line",
    [("rag: [1, 2", 1), ("rag: {a: 1", 1), ("rag: [1,\n\n  2", 3), ("a: b: c\n", 1)],
)
def test_yaml_errors_name_the_pure_python_loaders_line(tmp_path, text, line):
    """libyaml parses the file when PyYAML has it; an error's line is still the one the
    pure-Python loader names (libyaml says the next line at an unclosed bracket at the end)."""
    from kbcli.config.lookup import load_config
    from kbcli.errors import ConfigError

    file = tmp_path / "jianmu.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(file)
    expected = f"Config file {file} is not valid YAML at line {line}: fix the syntax"
    assert str(error.value) == expected


def test_yaml_values_are_the_same_with_libyaml(tmp_path):
    import yaml

    from kbcli.config.parse import parse_yaml

    text = (
        "# a comment\nrag:\n  rerank: {enabled: yes}\nlimits:\n  chunk_size: 0x200\n"
        "  rerank_alpha: .5\n  when: 2001-01-01\nanswer: ~\nx: !!str 12\n"
    )
    assert parse_yaml(text.encode(), tmp_path / "f.yaml") == yaml.safe_load(text)


@pytest.mark.parametrize("argv", [["-m", "kbcli", "--help"], ["-c", TYPER_HELP, "--help"]])
def test_kb_help_into_a_closed_pipe_exits_0_quietly(tmp_path, argv):
    """As every command does (issue 41; was click's exit code 1): exit code 0 and nothing on
    stderr, from the stored help and from typer's."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, *argv], env=_env(), cwd=tmp_path, stdout=write, stderr=subprocess.PIPE
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")
