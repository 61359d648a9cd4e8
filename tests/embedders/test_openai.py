"""OpenAIEmbedder against a fake OpenAI server on loopback, through the real openai SDK.

Only ``kbcli.providers.retry.sleep`` is replaced (by a recorder), so retries don't wait.
"""

from __future__ import annotations

import email.utils
import math
import time

import pytest

from fake_providers import FakeServer, fake_vector
from kbcli.config.lookup import Config, EmbeddingConfig, RAGConfig
from kbcli.embedders.openai import OpenAIEmbedder
from kbcli.errors import EmbedderError
from kbcli.providers import retry
from provider_embedders import build, clean_env_fixture, server_fixture, sleeps_fixture  # noqa: F401

KEY = "sk-test-very-secret-0123456789"


def make(server, **kwargs) -> OpenAIEmbedder:
    return build(OpenAIEmbedder, KEY, server.url + "/v1", **kwargs)


@pytest.mark.parametrize("n,batch", [(10, 4), (8, 4), (1, 64), (130, 64)])
def test_batches_make_ceil_n_over_batch_requests(server, n, batch):
    texts = [f"text number {i}" for i in range(n)]
    vectors = make(server, batch_size=batch).embed_documents(texts)
    assert len(server.requests) == math.ceil(n / batch)
    assert all(len(chunk) <= batch for chunk in server.inputs())
    assert vectors == [fake_vector(t) for t in texts]


def test_sdk_asks_for_base64_and_vectors_decode_exactly(server):
    make(server).embed_documents(["alpha"])
    path, headers, body = server.requests[0]
    assert path == "/v1/embeddings"
    assert body["encoding_format"] == "base64"
    assert headers["authorization"] == f"Bearer {KEY}"


def test_server_answering_plain_floats_works_too(server):
    server.force_float = True
    assert make(server).embed_documents(["alpha", "beta"]) == [
        fake_vector("alpha"),
        fake_vector("beta"),
    ]


def test_order_kept_when_server_shuffles_data(server):
    server.shuffle = True
    texts = [f"doc {i}" for i in range(7)]
    assert make(server, batch_size=16).embed_documents(texts) == [fake_vector(t) for t in texts]


def test_429_then_success_is_retried_honouring_retry_after(server, sleeps):
    server.script = [(429, {"Retry-After": "7"}), None]
    assert make(server).embed_query("hello") == fake_vector("hello")
    assert len(server.requests) == 2
    assert sleeps == [7.0]


def test_retry_after_is_capped(server, sleeps):
    server.script = [(429, {"Retry-After": "100000"}), None]
    make(server, retry_budget=1000).embed_query("hello")
    assert sleeps == [retry.RetryPolicy().max_retry_after]


def test_retry_after_past_the_budget_gives_up_at_once(server, sleeps):
    server.script = [(429, {"Retry-After": "100"}), None]
    with pytest.raises(EmbedderError, match="asked to wait 100 s.*retry_budget"):
        make(server, retry_budget=30).embed_query("hello")
    assert sleeps == [] and len(server.requests) == 1


def test_permanent_500_is_bounded_and_explained(server, sleeps):
    server.always = 500
    embedder = make(server, max_retries=3, model="my-embed")
    with pytest.raises(EmbedderError) as info:
        embedder.embed_documents(["a", "b"])
    assert len(server.requests) == 4  # max_retries + 1
    assert len(sleeps) == 3
    policy = retry.RetryPolicy()
    for n, wait in enumerate(sleeps, start=1):
        backoff = min(policy.max_delay, policy.base_delay * 2 ** (n - 1))
        assert backoff / 2 <= wait <= backoff
    message = str(info.value)
    host = server.url.removeprefix("http://")
    for part in ("openai", "my-embed", host, "500", "4 attempts"):
        assert part in message
    assert info.value.attempts == 4 and info.value.status == 500


def test_timeout_is_retried(server, sleeps):
    server.stalls = [1.5]
    embedder = make(server, timeout=0.2, max_retries=2)
    assert embedder.embed_query("slow") == fake_vector("slow")
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_connection_error_is_retried_then_explained(sleeps):
    with FakeServer() as srv:
        url = srv.url + "/v1"
    # the server is gone: nothing listens on that port now
    embedder = OpenAIEmbedder(api_key=KEY, base_url=url, max_retries=2, config=Config())
    with pytest.raises(EmbedderError, match="after 3 attempts.*connection error"):
        embedder.embed_query("x")
    assert len(sleeps) == 2


def test_a_refused_connection_says_nothing_is_listening_there(sleeps):
    """Was 'try again later or raise rag.embedding.max_retries': no retry count helps when
    nothing listens at the address."""
    with FakeServer() as srv:
        url = srv.url + "/v1"
    host = url.split("//")[1].split("/")[0]
    embedder = OpenAIEmbedder(api_key=KEY, base_url=url, max_retries=1, config=Config())
    with pytest.raises(EmbedderError) as caught:
        embedder.embed_query("x")
    assert str(caught.value) == (
        f"openai embedding request failed after 2 attempts (connection error) for model "
        f"text-embedding-3-small at {host}: nothing is listening at {host} (connection "
        "refused): start the server, or check rag.embedding.base_url"
    )


def test_401_is_not_retried_names_the_env_var_and_hides_the_key(server, sleeps, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.always = 401
    server.echo_key_in_errors = True  # the body quotes the key; our message must not
    embedder = OpenAIEmbedder(base_url=server.url + "/v1", config=Config())
    with pytest.raises(EmbedderError) as info:
        embedder.embed_query("x")
    assert len(server.requests) == 1
    assert sleeps == []
    assert "OPENAI_API_KEY" in str(info.value)
    assert "401" in str(info.value)
    assert KEY not in str(info.value)
    assert info.value.__cause__ is None and KEY not in repr(info.value)


@pytest.mark.parametrize("status,words", [(400, "400"), (403, "403"), (404, "not found")])
def test_client_errors_fail_at_once(server, sleeps, status, words):
    server.always = status
    server.echo_key_in_errors = True
    with pytest.raises(EmbedderError) as info:
        make(server).embed_query("x")
    assert len(server.requests) == 1
    assert sleeps == []
    assert words in str(info.value)
    assert KEY not in str(info.value)


def test_exhausted_quota_429_is_not_retried(server, sleeps):
    server.always = 429
    server.error_code = "insufficient_quota"  # what OpenAI sends for an empty balance
    with pytest.raises(EmbedderError, match="quota"):
        make(server, max_retries=3).embed_query("x")
    assert len(server.requests) == 1
    assert sleeps == []


def test_empty_text_is_sent_as_a_space(server):
    # the fake server, like the real API, rejects "" with 400
    vectors = make(server).embed_documents(["", "  ", "x"])
    assert server.inputs() == [[" ", " ", "x"]]
    assert vectors[0] == fake_vector(" ")


def test_long_input_is_truncated_to_the_per_input_limit(server):
    embedder = make(server)
    make(server).embed_documents(["é" * 20_000])
    sent = server.inputs()[0][0]
    assert len(sent.encode("utf-8")) <= embedder.max_input_bytes
    assert sent == "é" * (embedder.max_input_bytes // 2)


def test_token_budget_splits_requests(server):
    embedder = make(server, batch_size=64)
    embedder.max_tokens_per_request = 25  # each text below is estimated at 10 tokens
    texts = ["x" * 20 for _ in range(5)]
    embedder.embed_documents(texts)
    assert [len(b) for b in server.inputs()] == [2, 2, 1]


def test_dimensions_are_sent_and_known_upfront(server):
    embedder = make(server, dimensions=4)
    assert embedder.info.dimension == 4
    vectors = embedder.embed_documents(["a"])
    assert server.requests[0][2]["dimensions"] == 4
    assert len(vectors[0]) == 4


def test_info_learns_dimension_and_never_shows_the_key(server):
    embedder = make(server, model="custom-model")
    assert embedder.info.dimension is None
    embedder.embed_query("a")
    assert embedder.info.provider == "openai"
    assert embedder.info.model == "custom-model"
    assert embedder.info.dimension == 8
    for text in (repr(embedder), str(embedder.info), str(vars(embedder.info))):
        assert KEY not in text


def test_missing_key_message(monkeypatch):
    with pytest.raises(EmbedderError) as info:
        OpenAIEmbedder(config=Config())
    assert str(info.value).startswith("OpenAI API key not found (OPENAI_API_KEY/API_KEY)")


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"OPENAI_API_KEY": "k-openai", "API_KEY": "k-generic"}, "k-openai"),
        ({"API_KEY": "k-generic"}, "k-generic"),
        ({"OPENAI_API_KEY": "", "API_KEY": "k-generic"}, "k-generic"),
    ],
)
def test_key_precedence(server, monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    OpenAIEmbedder(base_url=server.url + "/v1", config=Config()).embed_query("a")
    assert server.requests[0][1]["authorization"] == f"Bearer {expected}"


def test_key_argument_beats_env(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k-env")
    OpenAIEmbedder("k-arg", base_url=server.url + "/v1", config=Config()).embed_query("a")
    assert server.requests[0][1]["authorization"] == "Bearer k-arg"


@pytest.mark.parametrize("winner", ["OPENAI_BASE_URL", "OPENAI_API_BASE", "BASE_URL"])
def test_base_url_env_precedence(monkeypatch, winner):
    order = ["OPENAI_BASE_URL", "OPENAI_API_BASE", "BASE_URL"]
    dead = "http://127.0.0.1:9/v1"  # discard port: a request there would fail
    with FakeServer() as srv:
        for name in order[order.index(winner) + 1 :]:
            monkeypatch.setenv(name, dead)
        monkeypatch.setenv(winner, srv.url + "/v1")
        embedder = OpenAIEmbedder(api_key=KEY, config=Config(), max_retries=0)
        assert embedder.embed_query("a") == fake_vector("a")
        assert len(srv.requests) == 1


def test_base_url_argument_then_config_beat_env(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    config = Config(rag=RAGConfig(embedding=EmbeddingConfig(base_url=server.url + "/v1")))
    assert OpenAIEmbedder(api_key=KEY, config=config).embed_query("a") == fake_vector("a")
    other = "http://127.0.0.1:10/v1"
    assert OpenAIEmbedder(api_key=KEY, base_url=other, config=config).base_url == other


@pytest.mark.parametrize(
    "arg,config_model,env,expected",
    [
        ("m-arg", "m-config", {"OPENAI_EMBED_MODEL": "m-env"}, "m-arg"),
        (None, "m-config", {"OPENAI_EMBED_MODEL": "m-env"}, "m-config"),
        (None, None, {"OPENAI_EMBED_MODEL": "m-env", "EMBEDDING_MODEL": "m-generic"}, "m-env"),
        (None, None, {"EMBEDDING_MODEL": "m-generic"}, "m-generic"),
        (None, None, {}, "text-embedding-3-small"),
    ],
)
def test_model_precedence(server, monkeypatch, arg, config_model, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = Config(rag=RAGConfig(embedding=EmbeddingConfig(model=config_model)))
    make(server, model=arg, config=config).embed_query("a")
    assert server.requests[0][2]["model"] == expected


def test_config_model_for_another_provider_is_ignored(server):
    emb = EmbeddingConfig(provider="gemini", model="text-embedding-004", provider_set=True)
    embedder = make(server, config=Config(rag=RAGConfig(embedding=emb)))
    assert embedder.model == "text-embedding-3-small"


def test_config_numbers_apply(server, sleeps):
    emb = EmbeddingConfig(batch_size=2, max_retries=1)
    embedder = make(server, config=Config(rag=RAGConfig(embedding=emb)))
    embedder.embed_documents(["a", "b", "c"])
    assert len(server.requests) == 2
    server.always = 503
    with pytest.raises(EmbedderError, match="2 attempts"):
        embedder.embed_query("x")


def test_backoff_grows_is_capped_and_jittered():
    policy = retry.RetryPolicy(base_delay=1.0, max_delay=8.0)
    assert [policy.delay(n, rand=lambda: 1.0) for n in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    assert [policy.delay(n, rand=lambda: 0.0) for n in range(1, 5)] == [0.5, 1, 2, 4]
    assert policy.delay(1, retry_after=20.0, rand=lambda: 0.0) == 20.0
    assert policy.delay(1, retry_after=1e6) == policy.max_retry_after


def test_retry_after_header_forms():
    assert retry.parse_retry_after({"retry-after": "3"}) == 3.0
    assert retry.parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry.parse_retry_after({"retry-after": later}) <= 30
    assert retry.parse_retry_after({"retry-after": "soon"}) is None
    assert retry.parse_retry_after({}) is None
