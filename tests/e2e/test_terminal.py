"""Tables as a person sees them: ``kb`` in a pseudo-terminal 80 and 160 columns wide. Every line
fits, no column is squeezed to nothing (``--explain`` follows the hits, a few lines each), each
hit shows ``path:line``."""

from __future__ import annotations

import os
import pty
import re
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")


def in_terminal(args: list[str], columns: int, cwd: Path) -> str:
    """Run ``python -m kbcli ARGS`` on a pseudo-terminal ``columns`` wide; its screen text."""
    import fcntl
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TERM": "xterm-256color"}
    env["COLUMNS"] = str(columns)
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbcli", *args],
        stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace")).replace("\r", "")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "proj" / "documentation" / "administration-guide"
    folder.mkdir(parents=True)
    (folder / "resetting-your-account-password.md").write_text(
        "# Resetting your password\n\nTo reset your password, open Settings, choose Security "
        "and click Reset password. A reset link is sent to your e-mail address; it expires "
        "after one hour.\n"
    )
    (folder / "garden.md").write_text("# Garden\n\nWater the tomatoes; the password is basil.\n")
    monkeypatch.chdir(tmp_path / "proj")
    assert run("ingest", "documentation").exit_code == 0
    return tmp_path / "proj"


LOCATION = "documentation/administration-guide/resetting-your-account-password.md:1"


@pytest.mark.slow
@pytest.mark.parametrize("columns", [60, 80, 100, 160, 250])
@pytest.mark.parametrize("explain", [False, True])
def test_search_table_fits_the_terminal(project, columns, explain):
    """Every line fits but a location, which is never cut or folded by kb (the Location
    column was capped near 40 characters and folded path:line inside the file name, even at
    250 columns): the table when the snippet keeps 20 columns, else a block per hit with the
    location on a line of its own."""
    from rich.cells import cell_len

    args = ["search", "reset password", "--by", "chunk"] + (["--explain"] if explain else [])
    screen = in_terminal(args, columns, project)
    lines = [line for line in screen.splitlines() if line.strip()]
    assert any(LOCATION in line for line in lines), screen
    too_wide = [line for line in lines if cell_len(line) > columns and LOCATION not in line]
    assert not too_wide, screen
    table = "Snippet" in screen and "Location" in screen
    assert table == (columns >= 160), screen  # 72 + 11 of cells, 16 of rules, 20 of snippet
    if table:
        rows = [line.split("│") for line in lines if line.count("│") >= 6]
        assert all(len(cells[-2]) >= 20 for cells in rows), screen  # the snippet column
    else:
        assert LOCATION in lines and sum(line.startswith("#") for line in lines) == 2 + (
            2 if explain else 0  # the explain block of each hit: "#1 path:line"
        ), screen
    if explain:
        assert "keyword #1" in screen and screen.count("keyword-first") == 1
        below = screen[screen.index("How each score was made") :]
        assert f"#1 {LOCATION}" in below and "keyword #1" in below


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 160])
def test_list_stats_and_config_fit(project, columns):
    from rich.cells import cell_len

    for args in (["list"], ["stats"], ["config"], ["--help"], ["search", "--help"]):
        screen = in_terminal(args, columns, project)
        # kb stats keeps the database path on one line for copying; the terminal wraps it.
        too_wide = [
            line
            for line in screen.splitlines()
            if cell_len(line) > columns and not line.startswith("Database ")
        ]
        assert not too_wide, (args, too_wide)
    help_text = in_terminal(["--help"], columns, project)
    assert "Search the knowledge base; hits show path:line ($EDITOR +LINE path)." in help_text


@pytest.mark.slow
def test_ingest_progress_has_rate_and_the_note_comes_first(tmp_path, monkeypatch):
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(40):
        (folder / f"f{n}.md").write_text(f"# File {n}\n\nbody number {n}\n")
    monkeypatch.setenv("KB_DB", str(tmp_path / "fresh.db"))
    screen = in_terminal(["ingest", str(folder)], 100, tmp_path)
    note = "Using the built-in simple embedder"
    assert screen.count(note) == 1
    if "Indexing" in screen:  # the bar may finish before its first refresh
        assert screen.index(note) < screen.index("Indexing")
        assert "files" in screen[screen.index("Indexing") :]
    assert "Indexed 40 files (40 new, 0 changed)" in screen
    again = in_terminal(["ingest", str(folder)], 100, tmp_path)
    assert note not in again  # nothing changed: no note
