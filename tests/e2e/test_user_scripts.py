"""kb used the way its users use it, each in a process of its own: README's Python examples as
script files, scripts without a ``__main__`` guard that parse PDFs and DOCX (run as a file,
with ``python -c`` and from stdin), and the CLI in a fresh HOME with no configuration."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import PASSWORD_TEXT, minimal_pdf
from conftest import API_KEY_VARS
from fake_tool_chat import FakeChatServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SRC = ROOT / "src"


def readme_python_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README section under ``## heading`` (to the next ``## ``)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def fresh_env(home: Path) -> dict[str, str]:
    """A user's environment: a new HOME, no kb settings, no API keys; this checkout's kbcli."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("KB_", "XDG_")) and key not in API_KEY_VARS
    }
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_python(args: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None):
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def kb(args: list[str], cwd: Path, env: dict[str, str]):
    return run_python(["-m", "kbcli", *args], cwd, env)


def docx_file(path: Path, text: str) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Travel", level=1)
    document.add_paragraph(text)
    document.save(str(path))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user's project folder: docs/ with a Markdown guide, a PDF manual and a DOCX note."""
    work = tmp_path / "project"
    docs = work / "docs"
    docs.mkdir(parents=True)
    (docs / "guide.md").write_text(PASSWORD_TEXT, encoding="utf-8")
    (docs / "manual.pdf").write_bytes(minimal_pdf("Warranty claims go to the zeppelin office"))
    docx_file(docs / "travel.docx", "Book the night train to Vienna through the travel desk.")
    return work


def assert_clean(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr


# --- scripts with no __main__ guard -------------------------------------------------------------

GUARDLESS = """\
from pathlib import Path
with open("top-level-runs.txt", "a") as marker:
    marker.write("ran\\n")
from kbcli import KnowledgeBase
kb = KnowledgeBase()
kb.ingest_file("docs/manual.pdf")
kb.ingest_file("docs/travel.docx")
for query in ("zeppelin", "vienna"):
    hits = kb.search(query, k=1, mode="keyword")
    print(query, Path(hits[0].document.metadata["source"]).name if hits else None)
"""


@pytest.mark.parametrize("how", ["script-file", "python-c", "stdin"])
def test_a_script_without_a_main_guard_parses_pdf_and_docx_and_runs_once(workspace, how):
    env = fresh_env(workspace.parent / "home")
    if how == "script-file":
        (workspace / "script.py").write_text(GUARDLESS, encoding="utf-8")
        result = run_python(["script.py"], workspace, env)
    elif how == "python-c":
        result = run_python(["-c", GUARDLESS], workspace, env)
    else:
        result = run_python(["-"], workspace, env, stdin=GUARDLESS)
    assert_clean(result)
    assert result.stdout.split("\n")[:2] == ["zeppelin manual.pdf", "vienna travel.docx"]
    # the parser process never imported the user's __main__: its top level ran once
    assert (workspace / "top-level-runs.txt").read_text() == "ran\n"


def test_the_parser_process_goes_when_the_script_ends(workspace):
    env = fresh_env(workspace.parent / "home")
    script = GUARDLESS + textwrap.dedent(
        """
        from kbcli.ingest.loaders import bounded
        print("child", bounded._child.proc.pid)
        """
    )
    result = run_python(["-c", script], workspace, env)
    assert_clean(result)
    pid = int(result.stdout.split("child ")[1].split()[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


# --- README's examples, verbatim ---------------------------------------------------------------


@pytest.mark.slow
def test_the_readme_library_section_runs_verbatim_as_scripts(workspace):
    basics, reranker, contracts = readme_python_blocks("The library")
    env = fresh_env(workspace.parent / "home")
    (workspace / "basics.py").write_text(basics, encoding="utf-8")
    first = run_python(["basics.py"], workspace, env)
    assert_clean(first)
    printed = first.stdout.splitlines()
    assert any("docs/guide.md" in line for line in printed), first.stdout
    assert any(line.startswith("1. ") for line in printed), first.stdout
    (workspace / "reranker.py").write_text(reranker, encoding="utf-8")
    assert_clean(run_python(["reranker.py"], workspace, env))
    # the PDF went in through the library: the CLI finds it in the same database
    found = kb(
        ["--db", "notes.db", "search", "zeppelin", "--mode", "keyword", "--json"], workspace, env
    )
    assert_clean(found)
    assert Path(json.loads(found.stdout)[0]["metadata"]["source"]).name == "manual.pdf"

    # the store template: a user's package with a store class, the contract suites by pytest
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_my_store.py").write_text(contracts, encoding="utf-8")
    (workspace / "mypackage.py").write_text(
        "from kbcli import SQLiteStore\n\n\nclass MyStore(SQLiteStore):\n    pass\n",
        encoding="utf-8",
    )
    env["PYTHONPATH"] = os.pathsep.join([str(workspace), env["PYTHONPATH"]])
    suites = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], workspace, env)
    assert suites.returncode == 0, suites.stdout[-3000:]
    assert re.search(r"\d+ passed", suites.stdout), suites.stdout[-500:]


@pytest.mark.slow
def test_the_readme_agent_examples_run_as_scripts(workspace):
    tool_block, loop_block = readme_python_blocks("Agents: the knowledge base as a tool")[:2]
    env = fresh_env(workspace.parent / "home")
    ingest = kb(["--db", "team.db", "ingest", "docs", "--meta", "tenant=acme"], workspace, env)
    assert_clean(ingest)
    assert "localhost:11434" in loop_block  # the loop talks to a local server: the test's own
    with FakeChatServer() as server:
        script = tool_block + "\n" + loop_block.replace("http://localhost:11434/v1", server.url)
        script += "\nprint('CITED', result.citations[0].source)\n"
        (workspace / "agent.py").write_text(script, encoding="utf-8")
        result = run_python(["agent.py"], workspace, env)
    assert_clean(result)
    assert "reset" in result.stdout.lower()
    cited = result.stdout.split("CITED ")[1].strip()
    assert Path(cited).name == "guide.md"
    assert server.requests, "the loop never called the chat server"


# --- the CLI in a fresh HOME --------------------------------------------------------------------


def test_the_cli_in_a_fresh_home_keeps_its_database_where_the_readme_says(workspace):
    home = workspace.parent / "home"
    env = fresh_env(home)
    assert_clean(kb(["ingest", "docs"], workspace, env))
    found = kb(["search", "reset password", "--mode", "keyword", "--json"], workspace, env)
    assert_clean(found)
    assert Path(json.loads(found.stdout)[0]["metadata"]["source"]).name == "guide.md"
    database = home / ".local" / "share" / "kbcli" / "knowledge.db"
    assert database.is_file()
    written = sorted(p.name for p in workspace.iterdir())
    assert written == ["docs"], "kb wrote into the working directory"
    stats = kb(["stats", "--json"], workspace, env)
    assert_clean(stats)
    assert json.loads(stats.stdout)["files"] == 3
