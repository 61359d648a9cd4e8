"""kb list: table, JSON, source, filter and limit."""

from __future__ import annotations

from cli_helpers import SAMPLE, run, run_json, seed


def test_json_lists_oldest_first_with_shape():
    ids = seed(SAMPLE)
    docs, result = run_json("list", "--json")
    assert [d["id"] for d in docs] == ids
    assert set(docs[0]) == {"id", "text", "metadata", "created_at"}
    assert result.stderr == ""


def test_limit_and_default_limit():
    seed([(f"note number {i}", {}) for i in range(25)])
    docs, _ = run_json("list", "--json")
    assert len(docs) == 20
    docs, _ = run_json("list", "--limit", "3", "--json")
    assert [d["text"] for d in docs] == ["note number 0", "note number 1", "note number 2"]
    docs, _ = run_json("list", "--limit", "0", "--json")
    assert len(docs) == 25


def test_source_and_filter():
    ids = seed(SAMPLE)
    docs, _ = run_json("list", "--source", "/docs/invoice.pdf", "--json")
    assert [d["id"] for d in docs] == ids[2:]
    docs, _ = run_json("list", "--filter", "page=2", "--json")
    assert [d["id"] for d in docs] == [ids[3]]
    docs, _ = run_json(
        "list", "--filter", "lang=en", "--filter", "source!=/docs/garden.txt", "--json"
    )
    assert [d["id"] for d in docs] == [ids[0]]


def test_table_shows_ids_and_sources():
    ids = seed(SAMPLE)
    result = run("list")
    assert result.exit_code == 0, result.stderr
    for doc_id in ids:
        assert doc_id in result.stdout
    assert "garden" in result.stdout


def test_nothing_found_message_and_empty_json():
    seed(SAMPLE)
    result = run("list", "--filter", "lang=fr")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "No chunks found." in result.stderr
    docs, _ = run_json("list", "--filter", "lang=fr", "--json")
    assert docs == []


def test_bad_filter_exits_2():
    seed(SAMPLE)
    result = run("list", "--filter", "lang")
    assert result.exit_code == 2


def test_mistyped_filter_operator_exits_2_with_the_likely_meaning():
    seed(SAMPLE)
    result = run("list", "--filter", "page>>1")
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'page>>1'" in lines[0] and "did you mean 'page>1'?" in lines[0]
