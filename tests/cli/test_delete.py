"""kb delete: by id, by source, unknown ones, neither given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import SAMPLE, run, run_json, seed


def test_delete_by_id():
    ids = seed(SAMPLE)
    result = run("delete", ids[0], ids[1])
    assert result.exit_code == 0, result.stderr
    assert "Deleted 2 chunks" in result.stdout
    docs, _ = run_json("list", "--json")
    assert {d["id"] for d in docs} == set(ids[2:])


def test_delete_by_source_resolves_the_path(tmp_path, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    source = str((folder / "a.md").resolve())
    seed([("alpha one", {"source": source}), ("alpha two", {"source": source}), ("b", {})])
    monkeypatch.chdir(folder)
    result = run("delete", "--source", "a.md")
    assert result.exit_code == 0, result.stderr
    assert "Deleted 2 chunks" in result.stdout
    docs, _ = run_json("list", "--json")
    assert [d["text"] for d in docs] == ["b"]


def test_unknown_id_exits_1_and_names_it():
    ids = seed(SAMPLE)
    result = run("delete", "nope")
    assert result.exit_code == 1
    assert "nope" in result.stderr
    assert "Deleted" not in result.stdout
    docs, _ = run_json("list", "--json")
    assert len(docs) == len(ids)


def test_known_and_unknown_ids_deletes_the_known_and_exits_1():
    ids = seed(SAMPLE)
    result = run("delete", ids[0], "nope")
    assert result.exit_code == 1
    assert "Deleted 1 chunk." in result.stdout
    assert "nope" in result.stderr


def test_source_with_nothing_indexed_exits_1(tmp_path):
    seed(SAMPLE)
    result = run("delete", "--source", str(tmp_path / "never.md"))
    assert result.exit_code == 1
    assert str(Path(tmp_path / "never.md").resolve()) in result.stderr


def test_neither_ids_nor_source_is_a_usage_error():
    seed(SAMPLE)
    result = run("delete")
    assert result.exit_code == 2
    assert "--source" in result.stderr


def _folder_of_two(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    seed([(f"text {n}", {"source": str((folder / f"{n}.md").resolve())}) for n in (1, 2)])
    return folder


def _kb(*args: str, **stdin) -> subprocess.CompletedProcess:
    """The real ``kb`` with ``stdin`` (``stdin=`` or ``input=``: no terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args], capture_output=True, text=True, **stdin
    )


def test_a_folder_delete_with_no_answer_on_stdin_names_yes(tmp_path):
    """A script or cron job (stdin at its end): one line naming --yes, exit 2, nothing
    deleted; was 'Aborted!', exit 1."""
    folder = _folder_of_two(tmp_path)
    done = _kb("delete", "--source", str(folder), stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    question, error = done.stderr.splitlines()
    assert question == f"Delete 2 files (2 chunks) under {folder.resolve()}? [y/N]: "
    assert error == (
        "Error: no answer (stdin is not a terminal, or it ended): nothing deleted; add --yes "
        f"to delete the 2 files under {folder.resolve()} without asking"
    )
    docs, _ = run_json("list", "--json")
    assert len(docs) == 2


@pytest.mark.slow
def test_a_folder_delete_answered_on_stdin(tmp_path):
    """``echo y | kb delete --source DIR``: answered; stdout holds the result only."""
    folder = _folder_of_two(tmp_path)
    kept = _kb("delete", "--source", str(folder), input="maybe\nn\n")
    assert kept.returncode == 1 and kept.stdout == ""
    assert kept.stderr.count("[y/N]") == 2 and "Nothing deleted." in kept.stderr
    done = _kb("delete", "--source", str(folder), input="y\n")
    assert done.returncode == 0 and done.stdout == "Deleted 2 chunks from 2 files.\n"
    docs, _ = run_json("list", "--json")
    assert docs == []
