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

from kbcli.cli import help_cache

SRC = Path(__file__).resolve().parents[1] / "src"
TYPER_HELP = "import sys, kbcli.cli as cli; cli._load().main(sys.argv[1:])"


def _env(src: Path = SRC, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "KB_CONFIG", "KB_DB")}
    env["PYTHONPATH"] = str(src)
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True
    )


def _imported(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_stored_root_help_is_current():
    """Fails when a command, an option or typer changed since the store was written."""
    for width in range(help_cache.MIN_WIDTH, help_cache.MAX_WIDTH + 1):
        assert help_cache.stored_help(width) == help_cache.render(width), (
            f"width {width}: run `python -m kbcli.cli.help_cache` to write the store again"
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


def test_kb_help_imports_no_typer_yaml_rich_or_store(tmp_path):
    done = _run(["-X", "importtime", "-m", "kbcli", "--help"], _env(), tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: kb [OPTIONS] COMMAND")
    names = _imported(done.stderr)
    assert "kbcli.cli.help_cache" in names  # the measurement saw our imports at all
    unwanted = ("typer", "click", "yaml", "rich", "kbcli.stores", "kbcli.config", "pathlib")
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
    assert help_cache.print_root_help(["--help"]) is False


@pytest.mark.parametrize("columns", [None, "0", "-3", "x", "1", "77", "500"])
def test_terminal_columns_are_shutils(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert help_cache.terminal_columns() == shutil.get_terminal_size().columns
