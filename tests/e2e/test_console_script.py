"""The real ``kb`` console script in a subprocess: ingest and search over every format, JSON on
stdout that ``python -m json.tool`` accepts, exit codes, and what start-up imports.

The ``kb`` used is, in order: ``$KB_EXE``; the one installed beside this Python (CI installs the
package); else a throwaway virtual environment made once per session that sees this Python's
packages and gets this checkout installed (``pip install -e --no-deps``) so the
``[project.scripts]`` entry point itself is exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import HEAVY_MODULES, make_corpus
from console_script import kb

pytestmark = pytest.mark.slow


@pytest.fixture
def kb_python(kb_exe) -> str:
    """The interpreter the ``kb`` script runs with (its shebang)."""
    first = kb_exe.read_text().splitlines()[0]
    assert first.startswith("#!")
    return first[2:].strip()


@pytest.fixture
def corpus(tmp_path):
    return make_corpus(tmp_path / "docs", corrupt_pdf=True)


def test_version_through_the_entry_point(kb_exe):
    done = kb(kb_exe, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("kb ")


def test_ingest_every_format_reports_the_corrupt_pdf_and_exits_1(kb_exe, corpus):
    done = kb(kb_exe, "ingest", str(corpus))
    assert done.returncode == 1, done.stderr
    failed = [line for line in done.stderr.splitlines() if line.startswith("Failed:")]
    assert len(failed) == 1 and "broken.pdf" in failed[0]
    assert "Indexed 4 files (4 new, 0 changed)" in done.stdout
    assert "Failed 1 file" in done.stdout
    assert "\r" not in done.stderr and "\x1b[" not in done.stderr  # no animation off a terminal
    listed = json.loads(kb(kb_exe, "list", "--limit", "0", "--json").stdout)
    names = {Path(d["metadata"]["source"]).name for d in listed}
    assert names == {"password.md", "garden.txt", "invoice.pdf", "travel.docx"}


def test_acceptance_reset_password_ranks_first(kb_exe, corpus):
    kb(kb_exe, "ingest", str(corpus))
    done = kb(kb_exe, "search", "reset password", "--mode", "keyword", "-k", "5")
    assert done.returncode == 0, done.stderr
    # a table row, or (a path too long for a snippet beside it at 80 columns) a block per hit
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("│ 1 ", "#1 ")))
    first = lines[start] if lines[start].startswith("│") else lines[start + 1]
    assert "password.md" in first
    hits = json.loads(
        kb(kb_exe, "search", "reset password", "--mode", "keyword", "-k", "5", "--json").stdout
    )
    assert Path(hits[0]["metadata"]["source"]).name == "password.md"
    assert "reset" in hits[0]["text"].lower()


def test_search_json_pipes_into_json_tool(kb_exe, corpus):
    kb(kb_exe, "ingest", str(corpus))
    search = subprocess.Popen(
        [str(kb_exe), "search", "reset password", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tool = subprocess.run(
        [sys.executable, "-m", "json.tool"], stdin=search.stdout, capture_output=True, text=True
    )
    search.stdout.close()
    search.wait(timeout=120)
    assert search.returncode == 0
    assert tool.returncode == 0, tool.stderr
    hits = json.loads(tool.stdout)
    assert isinstance(hits, list) and hits
    assert {"id", "score", "text", "metadata", "unit", "location", "line"} <= set(hits[0])


def test_user_errors_are_one_line_with_the_exit_code(kb_exe, tmp_path):
    bogus = tmp_path / "bogus.db"
    bogus.write_text("not a database\n" * 200)
    done = kb(kb_exe, "--db", str(bogus), "search", "x")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1
    assert done.stdout == ""
    done = kb(kb_exe, "ingest", str(tmp_path / "missing"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    done = kb(kb_exe, "--debug", "--db", str(bogus), "search", "x")
    assert done.returncode == 1 and "Traceback" in done.stderr


def _imported(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _heavy(names: set[str]) -> list[str]:
    return sorted(
        m for m in HEAVY_MODULES if m in names or any(n.startswith(m + ".") for n in names)
    )


def test_importing_the_cli_is_light(kb_python):
    code = (
        "import sys, kbcli.cli\n"
        f"heavy = {HEAVY_MODULES!r}\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    done = subprocess.run([kb_python, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_help_imports_nothing_heavy(kb_exe, kb_python):
    done = subprocess.run(
        [kb_python, "-X", "importtime", str(kb_exe), "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    names = _imported(done.stderr)
    assert "kbcli.cli" in names  # the measurement saw our imports at all
    assert _heavy(names) == []


def test_keyword_search_imports_nothing_heavy(kb_exe, kb_python, corpus):
    kb(kb_exe, "ingest", str(corpus))
    done = subprocess.run(
        [
            kb_python,
            "-X",
            "importtime",
            str(kb_exe),
            "search",
            "reset password",
            "--mode",
            "keyword",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    names = _imported(done.stderr)
    assert any(n.startswith("kbcli.stores.sqlite.") for n in names)  # the store was measured
    assert _heavy(names) == []
    assert "password.md" in done.stdout
    # Typer would build Pydantic adapters for every option; kb converts its plain options itself.
    assert "pydantic" not in names


def test_progress_bar_is_drawn_when_stderr_is_a_terminal(kb_exe, corpus):
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [str(kb_exe), "ingest", str(corpus)], stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed when kb exited
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    stdout = process.stdout.read().decode()
    process.stdout.close()
    assert process.wait(timeout=120) == 1  # broken.pdf
    assert b"Indexing" in drawn and b"\x1b[" in drawn
    assert "Indexed 4 files" in stdout and "\x1b[" not in stdout


@pytest.mark.parametrize("user_value", [None, "4"])
def test_kb_starts_numpy_with_one_blas_thread_unless_the_user_chose(kb_python, user_value):
    """OpenBLAS's default pool spins its threads up when numpy is imported (about 100 ms of CPU
    per command on 2 cores, benchmarks/bench_startup.py); kb's entry point asks for one thread
    before anything imports numpy, and keeps a value the user set."""
    code = (
        "import os\n"
        "from kbcli.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user_value is not None:
        env["OPENBLAS_NUM_THREADS"] = user_value
    done = subprocess.run(
        [kb_python, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (user_value or "1")
