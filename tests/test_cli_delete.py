"""kb delete: by id, by source, unknown ones, neither given."""

from __future__ import annotations

from pathlib import Path

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
