"""A reader that goes away (``kb search x | head -1``): kb stops quietly, as ``rg``, ``git log``
and ``ls`` do: nothing on stderr (no ``Error: Broken pipe``, no Python ``Exception ignored``
at exit) and exit code 0, for every command and format. Each case runs the real ``kb`` in a
subprocess whose stdout is a real pipe: one whose reader has already closed it (every write
fails, the same each run) and, for big outputs, ``head -1`` in a real shell pipeline under
``set -o pipefail``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KB = [sys.executable, "-m", "kbcli"]
FILES = 60  # big enough that search -k 50 and list write more lines than head reads


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """A knowledge base of :data:`FILES` notes (keyword search needs no model)."""
    base = tmp_path_factory.mktemp("pipes")
    notes = base / "notes"
    notes.mkdir()
    for n in range(FILES):
        body = " ".join(f"file {n} talks about lsof and open descriptors" for _ in range(40))
        (notes / f"note{n:03d}.md").write_text(f"# Note {n}\n\n{body}\n")
    db = base / "kb.db"
    home = {"HOME": str(base), "XDG_CONFIG_HOME": str(base / ".config"), "KB_DB": str(db)}
    env = {**os.environ, **home}
    env.pop("KB_CONFIG", None)
    done = subprocess.run([*KB, "ingest", str(notes), "-q"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    return {"base": base, "notes": notes, "db": db}


def closed_pipe(args: list[str], *, stderr_too: bool = False, **kwargs) -> tuple[int, str]:
    """Run ``kb ARGS`` with stdout (and with ``stderr_too`` stderr) a pipe whose reader has
    gone; its exit code and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [*KB, *args],
            stdout=write,
            stderr=write if stderr_too else subprocess.PIPE,
            timeout=120,
            **kwargs,
        )
    finally:
        os.close(write)
    return done.returncode, (done.stderr or b"").decode(errors="replace")


def in_corpus(corpus: dict[str, Path], *args: str) -> list[str]:
    return ["--db", str(corpus["db"]), *args]


FIRST = "notes/note000.md"
READ_COMMANDS = {
    "search table": ["search", "lsof", "-k", "50"],
    "search --json": ["search", "lsof", "-k", "50", "--json"],
    "search jsonl": ["search", "lsof", "--format", "jsonl"],
    "search csv": ["search", "lsof", "--format", "csv"],
    "search md": ["search", "lsof", "--format", "md"],
    "search files": ["search", "lsof", "-k", "50", "--format", "files"],
    "search files -0": ["search", "lsof", "--format", "files", "-0"],
    "search chunks explained": ["search", "lsof", "--by", "chunk", "--explain"],
    "list table": ["list"],
    "list --json": ["list", "--json"],
    "list files": ["list", "-n", "0", "--format", "files"],
    "list csv": ["list", "--format", "csv"],
    "get": ["get", FIRST],
    "get --json": ["get", FIRST, "--json"],
    "stats": ["stats"],
    "stats --json": ["stats", "--json"],
    "config": ["config"],
    "config --json": ["config", "--json"],
    "doctor": ["doctor"],
    "doctor --json": ["doctor", "--json"],
    "ask --show-prompt": ["ask", "what talks about lsof", "--show-prompt", "--mode", "keyword"],
    "eval --queries": ["eval", "--queries", "QUESTIONS", "--mode", "keyword"],
    "eval --queries --json": ["eval", "--queries", "QUESTIONS", "--mode", "keyword", "--json"],
    "--version": ["--version"],
    "--help": ["--help"],
    "search --help": ["search", "--help"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(READ_COMMANDS))
def test_a_closed_stdout_ends_every_command_quietly(corpus, name):
    questions = corpus["base"] / "questions.jsonl"
    questions.write_text(json.dumps({"query": "lsof", "expected": [FIRST]}) + "\n")
    args = [questions.as_posix() if a == "QUESTIONS" else a for a in READ_COMMANDS[name]]
    code, err = closed_pipe(in_corpus(corpus, *args), cwd=corpus["base"])
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    "args",
    [["ingest", "NOTES", "--json"], ["add", "a note about pipes"], ["init"]],
    ids=["ingest --json", "add", "init"],
)
def test_a_command_that_writes_finishes_its_work_and_stops_quietly(corpus, tmp_path, args):
    db = tmp_path / "copy.db"
    shutil.copy(corpus["db"], db)
    args = [str(corpus["notes"]) if a == "NOTES" else a for a in args]
    code, err = closed_pipe(["--db", str(db), *args], cwd=tmp_path)
    assert (code, err) == (0, "")
    if args[0] == "add":  # written before its id was printed
        listed = subprocess.run(
            [*KB, "--db", str(db), "list", "-n", "0", "--json"], capture_output=True
        )
        assert "a note about pipes" in listed.stdout.decode()


@pytest.mark.slow
def test_copy_and_delete_print_to_a_closed_pipe_quietly(corpus, tmp_path):
    db = tmp_path / "mine.db"
    shutil.copy(corpus["db"], db)
    target = tmp_path / "back.db"
    code, err = closed_pipe(
        ["--db", str(db), "copy", "--to", "sqlite", "--to-db", str(target), "--json"]
    )
    assert (code, err) == (0, "") and target.exists()
    code, err = closed_pipe(
        ["--db", str(db), "delete", "--source", str(corpus["notes"] / "note001.md")]
    )
    assert (code, err) == (0, "")


@pytest.mark.slow
def test_stderr_into_the_same_closed_pipe(corpus):
    """``2>&1 | head``: both streams gone; results and errors keep their exit codes."""
    assert closed_pipe(in_corpus(corpus, "search", "lsof", "-k", "50"), stderr_too=True)[0] == 0
    assert closed_pipe(in_corpus(corpus, "get", "missing.md"), stderr_too=True)[0] == 1
    assert closed_pipe(in_corpus(corpus, "search"), stderr_too=True)[0] == 2  # click's usage


@pytest.mark.slow
def test_a_closed_stderr_does_not_stop_an_ingest(corpus, tmp_path):
    """Notes to a stderr whose reader has gone are dropped; the work and stdout go on."""
    notes = tmp_path / "notes"
    shutil.copytree(corpus["notes"], notes)
    (notes / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # a warning on stderr
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [*KB, "--db", str(tmp_path / "kb.db"), "ingest", str(notes), "--json"],
            stdout=subprocess.PIPE,
            stderr=write,
            timeout=120,
        )
    finally:
        os.close(write)
    report = json.loads(done.stdout)
    assert report["added"] == FILES and done.returncode == 1  # the broken PDF failed


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("head") is None, reason="POSIX")
@pytest.mark.parametrize(
    "args",
    [
        ["search", "lsof", "-k", "50", "--format", "files"],
        ["list", "-n", "0", "--format", "files"],
        ["search", "lsof", "-k", "50"],
        ["list", "-n", "0", "--json"],
    ],
    ids=["search files", "list files", "search table", "list json"],
)
def test_head_in_a_pipefail_pipeline(corpus, args):
    """The issue's own command lines, five times each, in bash with ``set -o pipefail``."""
    kb = " ".join(map(str, [*KB, "--db", corpus["db"], *args]))
    for _ in range(5):
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {kb} | head -1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.count("\n") == 1


@pytest.mark.slow
def test_watch_stops_when_its_reader_goes(corpus, tmp_path):
    """``kb watch --json | head -1``: the first line ends it, quietly, its index written."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n")
    code, err = closed_pipe(["-q", "--db", str(tmp_path / "w.db"), "watch", str(notes), "--json"])
    assert (code, err) == (0, "")
    found = subprocess.run(
        [*KB, "--db", str(tmp_path / "w.db"), "search", "alpha", "--json"], capture_output=True
    )
    assert "a.md" in found.stdout.decode()


@pytest.mark.slow
def test_an_mcp_client_that_stops_reading_ends_the_server_quietly(corpus):
    from extras import need

    need("mcp")
    read, write = os.pipe()
    os.close(read)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    try:
        done = subprocess.run(
            [*KB, "--db", str(corpus["db"]), "mcp"],
            input=(json.dumps(init) + "\n").encode(),
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr.decode()) == (0, "")


@pytest.mark.slow
def test_ask_answering_into_a_closed_pipe(corpus):
    from fake_chat import FakeChatServer

    with FakeChatServer() as chat:
        env = {**os.environ, "OPENAI_BASE_URL": f"{chat.url}/v1"}
        code, err = closed_pipe(
            in_corpus(corpus, "ask", "what talks about lsof", "--mode", "keyword"), env=env
        )
        assert len(chat.requests) == 1  # answered, then printed into the closed pipe
    assert (code, err) == (0, "")


@pytest.mark.slow
def test_eval_on_a_beir_folder_into_a_closed_pipe(tmp_path):
    code, err = closed_pipe(
        ["eval", str(ROOT / "examples" / "eval" / "it-helpdesk"), "--mode", "keyword"], cwd=tmp_path
    )
    assert (code, err) == (0, "")


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch, capsys):
    """A socket to a provider that breaks is a failure (exit 1, one line), not a reader gone."""
    import typer

    from kbcli.cli.group import _reader_gone

    with pytest.raises(typer.Exit) as exited:
        _reader_gone(BrokenPipeError(32, "Broken pipe"))
    assert exited.value.exit_code == 1
    assert capsys.readouterr().err == "Error: Broken pipe (run again with --debug for details)\n"
