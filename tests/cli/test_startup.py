"""What whole ``kb`` processes import and print on their fast paths: ``kb --help`` through
typer, without the library, a store or Pydantic, and a light keyword search that imports only
what it uses. Real subprocesses; no timings (those are benchmarks/bench_startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbcli.cli.group import COMMANDS

SRC = Path(__file__).resolve().parents[2] / "src"


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


@pytest.mark.parametrize("argv", [["--help"], []])
def test_kb_help_imports_no_command_store_pydantic_or_rich(tmp_path, argv):
    done = _run(["-X", "importtime", "-m", "kbcli", *argv], _env(), tmp_path)
    assert done.returncode == (0 if argv else 2)
    assert "Usage: kb [OPTIONS] COMMAND" in (done.stdout if argv else done.stderr)
    names = _imported(done.stderr)
    assert "kbcli.cli.root" in names  # the measurement saw our imports at all
    commands = {f"kbcli.cli.{module}" for module, _ in COMMANDS.values()}
    unwanted = (
        "pydantic", "rich", "numpy", "yaml", "kbcli.stores", "kbcli.knowledge_base",
        "kbcli.pipeline", "kbcli.ingest", "kbcli.cli.context", *commands,
    )  # fmt: skip
    assert sorted(n for n in names if n.split(".")[0] in unwanted or n in unwanted) == []


def test_the_group_lists_every_command_and_loads_it_by_name():
    """:data:`kbcli.cli.group.COMMANDS` (what a command run imports alone) names every
    command of the application, in ``kb --help``'s order, each loaded under its name.
    ``kb --help``'s line for each is checked in tests/test_cli_help.py."""
    code = (
        "import typer, typer.main\n"
        "from kbcli.cli import app\n"
        "group = typer.main.get_command(app)\n"
        "ctx = typer.Context(group)\n"
        "print(' '.join(group.get_command(ctx, n).name for n in group.list_commands(ctx)))\n"
    )
    done = _run(["-c", code], _env(), SRC)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "ingest", "add", "search", "ask", "delete", "get", "list", "stats", "status", "doctor",
        "init", "config", "trust", "eval", "mcp", "ui", "copy", "watch",
    ]  # fmt: skip


def test_no_stored_help_and_no_private_attribute_of_typer():
    """Start-up through typer's and click's public API: no stored rendering beside the
    sources, no private attribute of typer's set or read (issue 38)."""
    cli = SRC / "kbcli" / "cli"
    assert sorted(p.name for p in cli.rglob("*") if p.suffix not in ("", ".py", ".pyc")) == []
    private = ("_runtime_param", "_usage_display_name", "_protected_args", "_main(", "_click")
    for path in cli.rglob("*.py"):
        code = path.read_text()  # imports too, type-only ones included: typer.Context is public
        assert [word for word in private if word in code] == [], path


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


@pytest.mark.parametrize("argv", [["-m", "kbcli", "--help"], ["-m", "kbcli", "search", "--help"]])
def test_kb_help_into_a_closed_pipe_exits_0_quietly(tmp_path, argv):
    """As every command does (issue 41; was click's exit code 1): exit code 0 and nothing on
    stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, *argv], env=_env(), cwd=tmp_path, stdout=write, stderr=subprocess.PIPE
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")


def test_every_parameter_of_every_command_is_kbs_and_its_context_typers():
    """Click asks each command for its parameters (``get_params``): typer's own, the help
    option and the completion options all come back as kb's plain classes, which convert
    without Pydantic; the contexts are the public ``typer.Context`` the overrides take."""
    code = (
        "import typer, typer.main\n"
        "from kbcli.cli import app\n"
        "from kbcli.cli.params import PlainArgument, PlainOption\n"
        "group = typer.main.get_command(app)\n"
        "ctx = group.make_context('kb', ['stats'])\n"
        "assert type(ctx) is typer.Context, type(ctx)\n"
        "bad = []\n"
        "for name in ['', *group.list_commands(ctx)]:\n"
        "    command = group.get_command(ctx, name) if name else group\n"
        "    sub = command.make_context(name or 'kb', ['-h'], parent=ctx, resilient_parsing=True)\n"
        "    assert type(sub) is typer.Context, (name, type(sub))\n"
        "    params = command.get_params(sub)\n"
        "    assert any(p.name == 'help' for p in params), name\n"
        "    bad += [(name, p.name) for p in params\n"
        "            if not isinstance(p, (PlainOption, PlainArgument))]\n"
        "print(bad)\n"
    )
    done = _run(["-c", code], _env(), SRC)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
