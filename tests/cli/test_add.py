"""kb add: text or stdin, metadata, id."""

from __future__ import annotations

from cli_helpers import run, run_json


def test_add_prints_the_id_and_the_text_is_searchable():
    result = run("add", "The VPN gateway is vpn.example.com", "--meta", "topic=network")
    assert result.exit_code == 0, result.stderr
    new_id = result.stdout.strip()
    assert len(new_id) == 32 and "\n" not in new_id
    hits, _ = run_json("search", "vpn gateway", "--mode", "keyword", "--json")
    assert hits[0]["id"] == new_id
    assert hits[0]["metadata"] == {"topic": "network"}


def test_add_reads_stdin_with_dash_and_keeps_the_given_id():
    result = run("add", "-", "--id", "note-1", input="Backups run nightly at two.\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "note-1"
    docs, _ = run_json("list", "--json")
    assert [(d["id"], d["text"].strip()) for d in docs] == [
        ("note-1", "Backups run nightly at two.")
    ]


def test_add_with_existing_id_replaces_it():
    run("add", "first version", "--id", "n")
    run("add", "second version", "--id", "n")
    docs, _ = run_json("list", "--json")
    assert [d["text"] for d in docs] == ["second version"]


def test_empty_text_is_a_usage_error():
    result = run("add", "-", input="   \n")
    assert result.exit_code == 2
    assert "empty" in result.stderr


def test_bad_meta_is_a_usage_error():
    result = run("add", "text", "--meta", "novalue")
    assert result.exit_code == 2
    assert "key=value" in result.stderr
    assert "Traceback" not in result.stderr
