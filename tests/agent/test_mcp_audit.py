"""``kb mcp --audit FILE``: one JSON line per tool call, over HTTP with bearer tokens (a real
``kb mcp`` subprocess, the SDK's client) and over stdio; the lines name what was called and
what came back, never document text or the query (unless ``--audit-queries``), and only ids
the caller's scope shows. Requests without a valid token are summarised, every field is
bounded (issue 37)."""

from __future__ import annotations

import json

import pytest

import tenants as shared
from cli_helpers import run
from extras import need
from kbcli.agent.mcp.audit import argument_sizes, filter_keys

need("mcp")

from mcp_clients import (  # noqa: E402
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
    (summary,) = [line for line in lines if not line.get("tool")]  # written at shutdown
    assert summary["refused"] == "not authenticated" and summary["requests"] == 1
    assert summary["reasons"] == {"unknown token": 1} and summary["peers"] == {"127.0.0.1": 1}
    text = audit.read_text(encoding="utf-8")
    # no query, no document text, nothing of what the scope hides
    assert "password" not in text and "invoices" not in text and setup.leaks(text) == []
    assert (audit.stat().st_mode & 0o777) == 0o600


@pytest.mark.slow
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
    from kbcli.agent.mcp.audit import AuditLog
    from kbcli.agent.tools.read import ToolResult
    from kbcli.errors import StoreError

    log = AuditLog("/dev/full")
    try:
        with pytest.raises(StoreError, match="Cannot write the audit file /dev/full"):
            log.call("acme", "knowledge_stats", {}, ToolResult("chunks: 1"), 1.0)
    finally:
        log.close()


# --- bounded: a flood without a token, a huge argument (issue 37) ---------------------------

FLOOD = 3000  # requests without a token
FLOOD_THREADS = 4
AUDIT_BOUND = 64 * 1024  # bytes the audit file may reach through such a flood


def _flood(url: str, count: int, done: list[int]) -> None:
    """``count`` POSTs to ``url``, half without a token, half with an unknown one."""
    for n in range(count):
        headers = {} if n % 2 else {"Authorization": "Bearer not-a-known-token-000000"}
        status, _, _ = _raw_post(url, headers)
        done.append(status)


@pytest.mark.slow
def test_a_flood_without_tokens_is_summarised_while_token_holders_are_audited(setup, tmp_path):
    """3,000 requests without a valid token (4 threads) used to append a line each (about
    300 bytes): now they are counted and summarised, the audit stays under 64 KB, and a token
    holder calling meanwhile is answered and audited one line per call."""
    import threading

    audit = tmp_path / "audit.jsonl"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    process, port = _start_http(setup.db, home, _tokens(home), "--audit", str(audit))
    url = f"http://127.0.0.1:{port}/mcp"
    statuses: list[int] = []
    threads = [
        threading.Thread(target=_flood, args=(url, FLOOD // FLOOD_THREADS, statuses))
        for _ in range(FLOOD_THREADS)
    ]
    acme = ClientThread(_http_client(url, TOKENS["acme"]))
    answered = 0
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads) or answered < 5:
            text, is_error = acme.call("knowledge_search", {"query": "invoices", "k": 2})
            assert not is_error and "acme" in text and "globex" not in text, text
            answered += 1
        for thread in threads:
            thread.join()
    finally:
        acme.close()
        err = _stop(process)
    assert "Traceback" not in err, err
    assert statuses == [401] * FLOOD
    size = audit.stat().st_size
    lines = _lines(audit)
    calls = [line for line in lines if line.get("tool")]
    summaries = [line for line in lines if not line.get("tool")]
    print(f"\n{FLOOD} refused requests, {answered} token-holder calls: audit {size:,} bytes, "
          f"{len(summaries)} summary line(s)")  # fmt: skip
    assert size < AUDIT_BOUND
    assert len(calls) == answered and {c["token"] for c in calls} == {"acme"}
    assert all(c["refused"] is False for c in calls)
    assert 1 <= len(summaries) <= 3  # one a minute and one at shutdown
    assert sum(s["requests"] for s in summaries) == FLOOD
    assert sum(s["reasons"].get("no token", 0) for s in summaries) == FLOOD // 2
    assert all(set(s["peers"]) == {"127.0.0.1"} for s in summaries)


def test_a_huge_filter_key_or_many_arguments_make_a_short_line(setup, tmp_path):
    """A token holder's call is audited whatever it sends, but no field grows with it: a
    filter with a 3 MB key used to write a 3 MB line."""
    audit = tmp_path / "audit.jsonl"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    process, port = _start_http(
        setup.db, home, _tokens(home), "--audit", str(audit), "--audit-queries"
    )
    acme = ClientThread(_http_client(f"http://127.0.0.1:{port}/mcp", TOKENS["acme"]))
    try:
        huge = {"k" * 3_000_000: 1}
        text, is_error = acme.call("knowledge_search", {"query": "invoices", "filter": huge})
        assert is_error and "filter is too long" in text
        many = {f"argument{n}": n for n in range(5000)}
        text, is_error = acme.call("knowledge_search", {"query": "q" * 300_000, **many})
        assert is_error and text.startswith("Error: Unknown argument")
    finally:
        acme.close()
        err = _stop(process)
    assert "Traceback" not in err, err
    first, second = _lines(audit)
    assert len(audit.read_bytes()) < 16_000
    assert first["filter_keys"] == ["k" * 64] and first["refused"] is True
    assert first["filter_chars"] > 3_000_000 and len(first["filter"]) == 2000
    assert len(second["arguments"]) == 32 and second["more_arguments"] == 5001 - 32
    assert len(second["query"]) == 2000 and second["query_chars"] == 300_000


def test_refusals_are_summarised_with_the_busiest_peers(tmp_path):
    """A summary names the ten busiest peers; the others are counted, and peers beyond 1,000
    in an interval are counted without being told apart."""
    from kbcli.agent.mcp.audit import MAX_PEERS, TOP_PEERS, AuditLog

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, summary_every=3600)
    try:
        for n in range(MAX_PEERS + 500):
            for _ in range(3 if n < TOP_PEERS else 1):
                log.refused("no token", f"10.0.{n // 256}.{n % 256}")
        log.refused("unknown token", "x" * 500)
        log.summarise()
        log.summarise()  # nothing refused since: no line
        log.refused("unknown token", "y" * 500)
    finally:
        log.close()  # the last summary
    first, last = _lines(path)
    assert first["requests"] == MAX_PEERS + 500 + 2 * TOP_PEERS + 1
    assert first["reasons"] == {"no token": MAX_PEERS + 500 + 2 * TOP_PEERS, "unknown token": 1}
    assert list(first["peers"]) == [f"10.0.0.{n}" for n in range(TOP_PEERS)]
    assert set(first["peers"].values()) == {3}
    assert first["other_peers"] == MAX_PEERS - TOP_PEERS
    assert first["other_requests"] == first["requests"] - 3 * TOP_PEERS
    assert first["peers_not_counted"] is True
    assert last["requests"] == 1 and last["peers"] == {"y" * 64: 1}
    assert len(path.read_bytes()) < 2000


def test_a_summary_is_written_each_interval_with_refusals(tmp_path):
    """The background summary: a line within the interval after refusals, none for quiet
    intervals."""
    import time

    from kbcli.agent.mcp.audit import AuditLog

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, summary_every=0.2)
    try:
        log.refused("no token", "127.0.0.1")
        deadline = time.monotonic() + 20
        while not path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)  # three quiet intervals
        (line,) = _lines(path)
        assert line["requests"] == 1 and line["reasons"] == {"no token": 1}
    finally:
        log.close()
    assert len(_lines(path)) == 1


def test_a_summary_that_cannot_be_written_refuses_nothing(caplog):
    """On a full disk (``/dev/full``) a call's line fails the call (fail-closed), but counting
    and summarising refusals never raises: the summary is logged as lost."""
    from kbcli.agent.mcp.audit import AuditLog
    from kbcli.agent.tools.read import ToolResult
    from kbcli.errors import StoreError

    log = AuditLog("/dev/full")
    try:
        for _ in range(100):
            log.refused("no token", "127.0.0.1")  # never raises, never writes
        with caplog.at_level("WARNING", logger="kbcli.mcp"):
            log.summarise()
        assert "Cannot write the audit file /dev/full" in caplog.text
        assert "100 refused requests not summarised" in caplog.text
        with pytest.raises(StoreError):
            log.call("acme", "knowledge_stats", {}, ToolResult("chunks: 1"), 1.0)
    finally:
        log.close()
