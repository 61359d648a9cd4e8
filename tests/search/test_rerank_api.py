"""APIReranker against a local server speaking the rerank protocol."""

from __future__ import annotations

import pytest

from fake_rerank import FakeRerankServer
from kbcli import Document, SearchResult
from kbcli.errors import RerankerError
from kbcli.providers import retry
from kbcli.search.rerank import APIReranker

SECRET = "sk-rerank-0123456789abcdef"
DOCS = [
    "Water the tomatoes every morning.",
    "To reset your password open settings and click reset password.",
    "Invoices are due within thirty days.",
    "Password rules: at least twelve characters.",
]


def hits(texts=DOCS):
    return [SearchResult(Document(f"d{i}", t), 1.0 - i / 10) for i, t in enumerate(texts)]


@pytest.fixture
def server():
    with FakeRerankServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    waits = []
    monkeypatch.setattr(retry, "sleep", waits.append)
    return waits


def test_orders_by_the_servers_relevance_and_sends_the_protocol(server):
    reranker = APIReranker(server.url + "/v1", "rerank-1", api_key=SECRET)
    out = reranker.rerank("reset password", hits())
    assert [h.document.id for h in out] == ["d1", "d3", "d0", "d2"]
    assert out[0].score == 1.0 and out[1].score == 0.5
    path, headers, body = server.requests[0]
    assert path == "/v1/rerank"
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert body == {"model": "rerank-1", "query": "reset password", "documents": DOCS, "top_n": 4}


def test_top_n_is_sent_and_only_the_best_are_returned(server):
    out = APIReranker(server.url, top_n=2).rerank("reset password", hits())
    assert [h.document.id for h in out] == ["d1", "d3"]
    assert server.bodies("/rerank")[0]["top_n"] == 2
    assert "model" not in server.bodies("/rerank")[0]  # no model given: none sent
    assert "authorization" not in server.requests[0][1]  # and no key: no header


def test_base_url_may_already_end_with_rerank_and_batches_are_merged(server):
    reranker = APIReranker(server.url + "/v2/rerank", "m", batch_size=3)
    out = reranker.rerank("reset password", hits())
    assert [len(b["documents"]) for b in server.bodies("/rerank")] == [3, 1]
    assert [p for p, _h, _b in server.requests] == ["/v2/rerank", "/v2/rerank"]
    assert [h.document.id for h in out] == ["d1", "d3", "d0", "d2"]


def test_retries_429_and_5xx_then_succeeds(server, no_waiting):
    server.script = [(429, {"Retry-After": "2"}), 503, 500, None]
    out = APIReranker(server.url, "m", max_retries=3).rerank("reset password", hits())
    assert out[0].document.id == "d1"
    assert len(server.requests) == 4
    assert no_waiting[0] >= 2.0  # Retry-After honoured
    assert len(no_waiting) == 3


def test_gives_up_after_max_retries_with_one_line(server):
    server.always = 503
    with pytest.raises(RerankerError) as err:
        APIReranker(server.url, "m", max_retries=2).rerank("q", hits())
    message = str(err.value)
    assert len(server.requests) == 3
    assert "\n" not in message and "after 3 attempts" in message and "503" in message
    assert "rag.rerank.max_retries" in message


def test_401_fails_at_once_with_a_clear_line_and_never_the_key(server, monkeypatch):
    monkeypatch.setenv("RERANK_API_KEY", SECRET)
    server.always = 401
    server.echo_key_in_errors = True
    with pytest.raises(RerankerError) as err:
        APIReranker(server.url, "m").rerank("q", hits())
    message = str(err.value)
    assert len(server.requests) == 1  # not retried
    assert "rejected the API key (status 401)" in message and "RERANK_API_KEY" in message
    assert SECRET not in message and "\n" not in message
    assert SECRET not in repr(APIReranker(server.url, "m"))


def test_401_without_a_key_says_which_variable_to_set(server):
    server.always = 401
    with pytest.raises(RerankerError, match="needs an API key .*RERANK_API_KEY"):
        APIReranker(server.url).rerank("q", hits())


def test_server_message_is_quoted_redacted(server):
    server.always = 400
    server.echo_key_in_errors = True
    with pytest.raises(RerankerError) as err:
        APIReranker(server.url, api_key=SECRET).rerank("q", hits())
    assert "Invalid request" in str(err.value) and SECRET not in str(err.value)


def test_a_wrong_answer_is_an_error_not_a_crash(server, monkeypatch):
    reranker = APIReranker(server.url)
    monkeypatch.setattr(
        reranker._endpoint, "post", lambda payload, **_: {"results": [{"index": 9}]}
    )
    with pytest.raises(RerankerError, match="invalid answer"):
        reranker.rerank("q", hits())


def test_tei_style_requests_and_answers(server, monkeypatch):
    reranker = APIReranker(server.url, documents_field="texts")
    sent = []
    answer = [{"index": 2, "score": 0.9}, {"index": 0, "score": 0.1}]
    monkeypatch.setattr(
        reranker._endpoint, "post", lambda payload, **_: sent.append(payload) or answer
    )
    out = reranker.rerank("q", hits(DOCS[:3]))
    assert [h.document.id for h in out] == ["d2", "d0"]
    assert sent[0]["texts"] == DOCS[:3] and "documents" not in sent[0]


def test_unreachable_server_is_retried_then_one_line(no_waiting):
    with pytest.raises(RerankerError) as err:
        APIReranker("http://127.0.0.1:9", max_retries=1).rerank("q", hits())
    assert "connection error" in str(err.value) and len(no_waiting) == 1


def test_a_refused_connection_says_nothing_is_listening_there(no_waiting):
    with FakeRerankServer() as srv:
        url = srv.url
    host = url.split("//")[1]
    with pytest.raises(RerankerError) as err:
        APIReranker(url, max_retries=1).rerank("q", hits())
    assert str(err.value).endswith(
        f"failed after 2 attempts (connection error): nothing is listening at {host} "
        "(connection refused): start the server, or check rag.rerank.base_url"
    )


def test_needs_a_base_url(monkeypatch):
    with pytest.raises(RerankerError, match="rag.rerank.base_url"):
        APIReranker()
    monkeypatch.setenv("RERANK_BASE_URL", "http://127.0.0.1:1/v1")
    assert APIReranker().base_url == "http://127.0.0.1:1/v1"


def test_no_candidates_no_request(server):
    assert APIReranker(server.url).rerank("q", []) == []
    assert server.requests == []


# --- one request per pool ------------------------------------------------------------------------


def test_a_pool_goes_in_one_request_up_to_max_documents(server):
    """Requests used to carry 32 documents (rag.rerank.batch_size): four billed calls for a
    pool of 100 where providers price per request."""
    texts = [f"reset password step {i}" for i in range(150)]
    out = APIReranker(server.url, "m").rerank("reset password", hits(texts))
    assert [len(b["documents"]) for b in server.bodies("/rerank")] == [150]
    assert len(out) == 150
    server.requests.clear()
    APIReranker(server.url, "m", max_documents=64).rerank("reset password", hits(texts))
    assert [len(b["documents"]) for b in server.bodies("/rerank")] == [64, 64, 22]


@pytest.mark.parametrize(
    ("settings", "options", "expected"),
    [
        ("", {}, [50]),
        ("", {"candidates": 300}, [300]),
        ("", {"k": 80}, [160]),
        (", max_documents: 100", {"candidates": 250}, [100, 100, 50]),
        (", batch_size: 8", {}, [50]),  # batch_size is the cross-encoder's
    ],
)
def test_the_library_sends_the_candidates_in_one_request(
    server, tmp_path, settings, options, expected
):
    from kbcli import KnowledgeBase, SimpleEmbedder
    from kbcli.config.lookup import load_config

    config_file = tmp_path / "jianmu.yaml"
    config_file.write_text(
        f"rag: {{rerank: {{provider: api, base_url: '{server.url}', model: m{settings}}}}}\n"
    )
    kb = KnowledgeBase.from_config(
        load_config(config_file), db=tmp_path / "lib.db", embedder=SimpleEmbedder()
    )
    try:
        for i in range(400):
            kb.add(f"reset password note {i} " + "x" * (i % 7), {"source": f"/n/{i % 40}.md"})
        k = options.pop("k", 5)
        found = kb.search("reset password", k=k, **options)
    finally:
        kb.close()
    assert [len(b["documents"]) for b in server.bodies("/rerank")] == expected
    assert len(found) == k
