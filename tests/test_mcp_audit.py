"""``kb mcp --audit FILE``: one JSON line per tool call and per refused request, over HTTP with
bearer tokens (a real ``kb mcp`` subprocess, the SDK's client) and over stdio; the lines name
what was called and what came back, never document text or the query (unless
``--audit-queries``), and only ids the caller's scope shows."""

from __future__ import annotations

import json

import pytest

import tenants as shared
from cli_helpers import run
from extras import need
from kbcli.audit import argument_sizes, filter_keys

need("mcp")

from test_mcp import (  # noqa: E402
    TOKENS,
    ClientThread,
    _http_client,
    _raw_post,
    _start_http,
    _stdio_client,
    _stop,
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return shared.build(tmp_path_factory.mktemp("audit-tenants"))


def _tokens(home):
    tokens = home / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{token: {TOKENS['acme']}, name: acme, filter: {{tenant: acme}}}}\n"
        f"  - {{token: {TOKENS['globex']}, name: globex, filter: {{tenant: globex}}}}\n",
        encoding="utf-8",
    )
    return tokens


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_http_calls_are_audited_without_text_or_queries(setup, tmp_path):
    audit = tmp_path / "audit.jsonl"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    process, port = _start_http(setup.db, home, _tokens(home), "--audit", str(audit))
    url = f"http://127.0.0.1:{port}/mcp"
    acme = ClientThread(_http_client(url, TOKENS["acme"]))
    answers = []
    try:
        for query in ("password zebracanary", "invoices", "quokkasecret vpn"):
            arguments = {"query": query, "k": 4, "filter": {"page": {"$gte": 1}}}
            answers.append(acme.call("knowledge_search", arguments)[0])
        acme.call("knowledge_get", {"id": setup.forbidden_ids[0]})
        acme.call("knowledge_get", {"id": setup.allowed_ids[0]})
        acme.call("knowledge_stats", {})
        acme.call("knowledge_search", {"query": "x", "k": "many"})
        status, _, _ = _raw_post(url, {"Authorization": "Bearer wrong-token-0000000000"})
        assert status == 401
    finally:
        acme.close()
        err = _stop(process)
    assert "Traceback" not in err, err
    lines = _lines(audit)
    calls = [line for line in lines if line.get("tool")]
    assert [c["tool"] for c in calls] == ["knowledge_search"] * 3 + [
        "knowledge_get", "knowledge_get", "knowledge_stats", "knowledge_search"
    ]  # fmt: skip
    assert {c["token"] for c in calls} == {"acme"}
    first = calls[0]
    assert first["arguments"] == {"query": len("password zebracanary"), "k": 1,
                                  "filter": len(json.dumps({"page": {"$gte": 1}}))}  # fmt: skip
    assert first["filter_keys"] == ["page"] and first["refused"] is False
    for call, answer in zip(calls, answers):  # the ids the caller was shown, in order
        assert call["ids"] and all(i in answer for i in call["ids"])
        assert set(call["ids"]) <= set(setup.allowed_ids)
    assert calls[3]["ids"] == [] and calls[3]["refused"] is True  # a hidden id: unknown
    assert calls[4]["ids"] == [setup.allowed_ids[0]]
    assert calls[6]["refused"] is True
    assert [line["refused"] for line in lines if not line.get("tool")] == ["unknown token"]
    text = audit.read_text(encoding="utf-8")
    # no query, no document text, nothing of what the scope hides
    assert "password" not in text and "invoices" not in text and setup.leaks(text) == []
    assert (audit.stat().st_mode & 0o777) == 0o600


def test_audit_queries_records_the_query_and_filter(setup, tmp_path):
    audit = tmp_path / "audit.jsonl"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    client = _stdio_client(
        setup.db, home, "--filter", "tenant=acme", "--audit", str(audit), "--audit-queries"
    )
    try:
        client.call("knowledge_search", {"query": "invoices", "filter": {"page": 2}})
    finally:
        client.close()
    (line,) = _lines(audit)
    assert line["token"] == "stdio" and line["query"] == "invoices"
    assert line["filter"] == {"page": 2} and len(line["ids"]) >= 1


def test_audit_usage_errors(tmp_path):
    result = run("mcp", "--audit-queries")
    assert result.exit_code == 2 and "--audit-queries goes with --audit" in result.stderr
    missing = tmp_path / "no-such-folder" / "audit.jsonl"
    result = run("mcp", "--audit", str(missing))
    assert result.exit_code != 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: Cannot open the audit file") and not missing.exists()


def test_filter_keys_and_sizes():
    flt = {"$and": [{"team": "ops"}, {"$or": [{"page": {"$gt": 2}}, {"lang": {"$in": ["en"]}}]}]}
    assert filter_keys(flt) == ["lang", "page", "team"]
    assert filter_keys(None) == [] and filter_keys("tenant=acme") == []
    assert argument_sizes({"query": "héllo", "k": 10}) == {"query": 5, "k": 2}


def test_a_line_that_cannot_be_written_fails_the_call():
    """On a full disk (``/dev/full``) recording fails with one StoreError, and over MCP the
    call is answered with that error instead of its unaudited result."""
    from kbcli.audit import AuditLog
    from kbcli.errors import StoreError
    from kbcli.tools import ToolResult

    log = AuditLog("/dev/full")
    try:
        with pytest.raises(StoreError, match="Cannot write the audit file /dev/full"):
            log.call("acme", "knowledge_stats", {}, ToolResult("chunks: 1"), 1.0)
    finally:
        log.close()
