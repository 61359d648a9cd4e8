"""GeminiEmbedder against a fake Gemini server on loopback, through the real google-genai SDK.

Only ``kbcli.providers.retry.sleep`` is replaced (by a recorder), so retries don't wait.
"""

from __future__ import annotations

import math
import sys

import pytest

from fake_providers import FakeServer, fake_vector
from kbcli.config.lookup import Config, EmbeddingConfig, RAGConfig
from kbcli.embedders.gemini import GeminiEmbedder
from kbcli.errors import EmbedderError
from provider_embedders import build, clean_env_fixture, server_fixture, sleeps_fixture  # noqa: F401

KEY = "AIza-test-very-secret-0123456789"


def make(server, **kwargs) -> GeminiEmbedder:
    return build(GeminiEmbedder, KEY, server.url, **kwargs)


@pytest.mark.parametrize("n,batch", [(10, 4), (7, 7), (250, 500)])
def test_batches_make_ceil_n_over_batch_requests(server, n, batch):
    texts = [f"text number {i}" for i in range(n)]
    vectors = make(server, batch_size=batch).embed_documents(texts)
    per_request = min(batch, 100)  # batchEmbedContents takes at most 100
    assert len(server.requests) == math.ceil(n / per_request)
    assert all(len(chunk) <= per_request for chunk in server.inputs())
    assert vectors == [fake_vector(t) for t in texts]


def test_request_shape_and_task_types(server):
    embedder = make(server)
    embedder.embed_documents(["passage"])
    embedder.embed_query("question")
    (path, headers, doc_body), (_p, _h, query_body) = server.requests
    assert path.endswith("/models/text-embedding-004:batchEmbedContents")
    assert headers["x-goog-api-key"] == KEY
    assert doc_body["requests"][0]["taskType"] == "RETRIEVAL_DOCUMENT"
    assert doc_body["requests"][0]["model"] == "models/text-embedding-004"
    assert query_body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"


def test_dimensions_become_output_dimensionality(server):
    embedder = make(server, dimensions=5)
    assert embedder.info.dimension == 5
    assert len(embedder.embed_query("a")) == 5
    assert server.requests[0][2]["requests"][0]["outputDimensionality"] == 5


def test_429_then_success_is_retried(server, sleeps):
    server.script = [(429, {"Retry-After": "4"}), None]
    assert make(server).embed_query("hello") == fake_vector("hello")
    assert len(server.requests) == 2
    assert sleeps == [4.0]


def test_permanent_503_is_bounded_and_explained(server, sleeps):
    server.always = 503
    with pytest.raises(EmbedderError) as info:
        make(server, max_retries=2).embed_documents(["a"])
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    message = str(info.value)
    for part in ("gemini", "text-embedding-004", server.url.removeprefix("http://"), "503"):
        assert part in message
    assert "3 attempts" in message


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried_and_hide_the_key(server, sleeps, status):
    server.always = status
    server.echo_key_in_errors = True
    with pytest.raises(EmbedderError) as info:
        make(server).embed_query("x")
    assert len(server.requests) == 1
    assert sleeps == []
    assert str(status) in str(info.value)
    assert KEY not in str(info.value)


def test_401_names_the_env_var(server, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    server.always = 401
    with pytest.raises(EmbedderError, match="GEMINI_API_KEY"):
        GeminiEmbedder(base_url=server.url, config=Config()).embed_query("x")


def test_timeout_is_retried(server, sleeps):
    server.stalls = [1.5]
    assert make(server, timeout=0.3).embed_query("slow") == fake_vector("slow")
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_empty_text_is_sent_as_a_space(server):
    make(server).embed_documents(["", "x"])
    assert server.inputs() == [[" ", "x"]]


def test_missing_key_names_both_variables():
    with pytest.raises(EmbedderError, match=r"GOOGLE_API_KEY/GEMINI_API_KEY"):
        GeminiEmbedder(config=Config())


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"GOOGLE_API_KEY": "k-google", "GEMINI_API_KEY": "k-gemini"}, "k-google"),
        ({"GEMINI_API_KEY": "k-gemini"}, "k-gemini"),
    ],
)
def test_key_precedence(server, monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    GeminiEmbedder(base_url=server.url, config=Config()).embed_query("a")
    assert server.requests[0][1]["x-goog-api-key"] == expected


def test_key_argument_beats_env(server, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", "k-env")
    GeminiEmbedder("k-arg", base_url=server.url, config=Config()).embed_query("a")
    assert server.requests[0][1]["x-goog-api-key"] == "k-arg"


@pytest.mark.parametrize("winner", ["EMBEDDING_BASE_URL", "BASE_URL"])
def test_base_url_env_precedence(monkeypatch, winner):
    with FakeServer() as srv:
        if winner == "EMBEDDING_BASE_URL":
            monkeypatch.setenv("BASE_URL", "http://127.0.0.1:9")
        monkeypatch.setenv(winner, srv.url)
        embedder = GeminiEmbedder(api_key=KEY, config=Config(), max_retries=0)
        assert embedder.embed_query("a") == fake_vector("a")
        assert len(srv.requests) == 1


@pytest.mark.parametrize(
    "arg,config_model,env,expected",
    [
        ("m-arg", "m-config", {"GEMINI_EMBED_MODEL": "m-env"}, "m-arg"),
        (None, "m-config", {"GEMINI_EMBED_MODEL": "m-env"}, "m-config"),
        (None, None, {"GEMINI_EMBED_MODEL": "m-env", "EMBEDDING_MODEL": "m-generic"}, "m-env"),
        (None, None, {"EMBEDDING_MODEL": "m-generic"}, "m-generic"),
        (None, None, {}, "text-embedding-004"),
    ],
)
def test_model_precedence(server, monkeypatch, arg, config_model, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = Config(rag=RAGConfig(embedding=EmbeddingConfig(model=config_model)))
    make(server, model=arg, config=config).embed_query("a")
    assert server.requests[0][0].endswith(f"/models/{expected}:batchEmbedContents")


def test_info_and_repr_hide_the_key(server):
    embedder = make(server)
    embedder.embed_query("a")
    assert embedder.info.provider == "gemini"
    assert embedder.info.dimension == 8
    assert KEY not in repr(embedder) and KEY not in str(embedder.info)


def test_missing_sdk_gives_the_pip_command(monkeypatch):
    # Simulate an environment without google-genai installed.
    monkeypatch.setitem(sys.modules, "google.genai", None)
    from kbcli.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match="pip install google-genai"):
        GeminiEmbedder(api_key=KEY, config=Config())


def test_a_refused_connection_says_nothing_is_listening_there(sleeps):
    with FakeServer() as srv:
        url = srv.url
    host = url.split("//")[1]
    embedder = GeminiEmbedder(api_key=KEY, base_url=url, max_retries=0, config=Config())
    with pytest.raises(EmbedderError) as caught:
        embedder.embed_query("x")
    assert str(caught.value).endswith(
        f"at {host}: nothing is listening at {host} (connection refused): start the server, "
        "or check rag.embedding.base_url"
    )
