"""One chat client (issue 38): ``kb ask``, the LLM reranker and query rewriting all reach
:class:`kbcli.providers.chat_client.ChatModel` through the real ``openai`` SDK, against one
local fake chat server (tests/fake_chat.py); what differs between the callers (settings named
in messages, error type, retries, deadline, variables, reply cap, empty answers) are
parameters of that client. Only ``kbcli.providers.retry.sleep`` is replaced."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import fake_chat
import kbcli.providers
from fake_chat import FakeChatServer, prompt_text
from kbcli import Document, SearchResult
from kbcli.config.schema import AnswerConfig, RerankConfig, RewriteConfig
from kbcli.errors import AnswerError, RerankerError
from kbcli.providers import retry
from kbcli.providers.chat import OpenAIChat, build_chat_model
from kbcli.providers.chat_client import ChatModel
from kbcli.search.rerank.llm import LLMReranker
from kbcli.search.rewrite import rewriter_from

SECRET = "sk-one-client-0123456789abcdef"
ASK = [{"role": "user", "content": "Where is the VPN gateway?"}]


def hits(*texts: str) -> list[SearchResult]:
    return [SearchResult(Document(f"d{i}", t), 1.0) for i, t in enumerate(texts)]


def judge(body: dict[str, Any]) -> str:
    """Answers every caller's prompt: yes/no for the reranker, a passage for HyDE."""
    prompt = prompt_text(body)
    if "Answer yes or no" in prompt:
        return "yes" if "gateway" in prompt.split("Passage:", 1)[1] else "no"
    if "answers the question" in prompt:
        return "The VPN gateway is vpn.example.com."
    return "The gateway is vpn.example.com [1]."


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(retry, "sleep", lambda s: None)


@pytest.fixture
def server():
    with FakeChatServer() as srv:
        srv.reply = judge
        yield srv


def the_three(url: str, **rerank: Any) -> tuple[ChatModel, LLMReranker, Any]:
    """The answer model, the reranker and the rewriter, each built from its own settings."""
    answer = build_chat_model(AnswerConfig(model="m", base_url=url, deadline=5))
    reranker = LLMReranker.from_config(
        RerankConfig(provider="llm", model="m", base_url=url, **rerank)
    )
    rewriter = rewriter_from(RewriteConfig(mode="hyde", model="m", base_url=url))
    return answer, reranker, rewriter


def test_answer_rerank_and_rewrite_reach_the_one_client_through_one_server(server):
    answer, reranker, rewriter = the_three(server.url + "/v1")
    assert type(answer) is type(reranker.client) is type(rewriter.client) is OpenAIChat

    assert answer.complete(ASK).text == "The gateway is vpn.example.com [1]."
    ranked = reranker.rerank("vpn gateway", hits("Water the tomatoes.", "The gateway is up."))
    assert [h.document.id for h in ranked] == ["d1", "d0"]
    assert rewriter.routes("vpn", "hybrid") == [
        ("hyde", "The VPN gateway is vpn.example.com.", "semantic")
    ]
    # one protocol on the wire: the same endpoint and header shape for every caller
    assert {path for path, _h, _b in server.requests} == {"/v1/chat/completions"}
    assert {h["authorization"] for _p, h, _b in server.requests} == {"Bearer no-key"}
    asked = [b for b in server.bodies() if "logprobs" in b]
    assert len(asked) == 2 and all(b["max_tokens"] == 1 for b in asked)  # the reranker's


def test_no_other_chat_client_is_left():
    """The only class under kbcli.providers that sends chat completions is ChatModel (and its
    providers); the urllib ChatClient is gone."""
    senders = set()
    for info in pkgutil.iter_modules(kbcli.providers.__path__, "kbcli.providers."):
        module = importlib.import_module(info.name)
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and "complete" in vars(cls):
                senders.add(cls)
    assert senders == {ChatModel}
    assert not hasattr(importlib.import_module("kbcli.providers.http"), "ChatClient")


def test_each_caller_keeps_its_retries_setting_and_error_type(server):
    server.always = 503
    answer, reranker, rewriter = the_three(server.url + "/v1")
    host = server.url.removeprefix("http://")

    with pytest.raises(AnswerError) as err:
        answer.complete(ASK)
    assert str(err.value) == (
        f"answer model m at {host} failed after 3 attempts (status 503): Service unavailable; "
        "try again later or raise rag.answer.max_retries"
    )
    assert len(server.requests) == 3  # rag.answer.max_retries: 2

    server.requests.clear()
    with pytest.raises(RerankerError) as err:
        reranker.rerank("vpn", hits("The gateway is up."))
    assert not isinstance(err.value, AnswerError)
    assert str(err.value).startswith(f"LLM reranker m at {host} failed after 4 attempts")
    assert str(err.value).endswith("try again later or raise rag.rerank.max_retries")
    assert len(server.requests) == 4  # rag.rerank.max_retries: 3

    server.requests.clear()
    with pytest.raises(RerankerError, match=r"^query rewriter m at .* failed after 4 attempts"):
        rewriter.routes("vpn", "hybrid")
    assert len(server.requests) == 4

    server.requests.clear()
    _a, reranker, _r = the_three(server.url + "/v1", max_retries=0)
    with pytest.raises(RerankerError, match="failed after 1 attempts"):
        reranker.rerank("vpn", hits("The gateway is up."))
    assert len(server.requests) == 1


def test_each_caller_keeps_its_deadline(server):
    server.hang = True
    host = server.url.removeprefix("http://")
    answer = build_chat_model(AnswerConfig(model="m", base_url=server.url + "/v1", deadline=1))
    reranker = LLMReranker.from_config(
        RerankConfig(provider="llm", model="j", base_url=server.url + "/v1", deadline=1)
    )
    with pytest.raises(AnswerError) as err:
        answer.complete(ASK)
    assert str(err.value) == (
        f"answer model m at {host} gave no complete answer within rag.answer.deadline (1 s): "
        "stopped; try again later, or raise rag.answer.deadline"
    )
    with pytest.raises(RerankerError) as err:
        # three passages, one worker: the deadline is the rerank's, not each request's
        LLMReranker("j", server.url + "/v1", workers=1, deadline=1).rerank(
            "vpn", hits("a", "b", "c")
        )
    assert "within rag.rerank.deadline (1 s): stopped" in str(err.value)
    assert reranker.client.deadline == 1.0
    # one request each: the rerank's other two passages were never asked for
    assert len(server.requests) == 2


def test_each_caller_finds_its_key_and_server_in_its_own_variables(server, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", SECRET)
    monkeypatch.setenv("LLM_BASE_URL", server.url + "/v1/chat/completions")
    monkeypatch.setenv("LLM_MODEL", "judge-2")
    reranker = LLMReranker()  # everything from LLM_*
    reranker.rerank("vpn gateway", hits("The gateway is up."))
    path, headers, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["model"] == "judge-2"
    assert headers["authorization"] == f"Bearer {SECRET}"
    # kb ask reads OPENAI_* only: LLM_API_KEY is not its key
    with pytest.raises(AnswerError, match="No API key for the openai answer model: set OPENAI"):
        build_chat_model(AnswerConfig())
    monkeypatch.delenv("LLM_API_KEY")
    monkeypatch.delenv("LLM_BASE_URL")
    with pytest.raises(RerankerError) as err:
        LLMReranker()
    assert str(err.value) == (
        "No API key for the LLM reranker (LLM_API_KEY/OPENAI_API_KEY/API_KEY): set one, or "
        "set rag.rerank.base_url to a local OpenAI-compatible server"
    )


def test_an_empty_answer_fails_kb_ask_and_scores_zero_in_a_rerank(server):
    server.malformed = "empty"
    answer, reranker, rewriter = the_three(server.url + "/v1")
    with pytest.raises(AnswerError, match="returned an empty answer"):
        answer.complete(ASK)
    assert [h.score for h in reranker.rerank("vpn", hits("The gateway is up."))] == [0.0]
    assert rewriter.routes("vpn", "hybrid") == []  # no passage, no route


@pytest.fixture
def huge_error_server():
    """Answers every request 500 with a 400 MB error body, counting what it wrote."""
    with fake_chat.huge_error_server() as served:
        yield served


def test_a_huge_error_body_is_read_only_as_far_as_its_message_by_kb_ask(huge_error_server):
    url, sent = huge_error_server
    answer = build_chat_model(AnswerConfig(model="m", base_url=url, max_retries=0))
    with pytest.raises(AnswerError) as err:
        answer.complete(ASK)
    message = str(err.value)
    assert message.startswith("answer model m at ") and "(status 500)" in message
    assert len(message) < 600 and "\n" not in message
    assert sent[0] < (64 << 20)  # the 64 KB kb reads, plus what the sockets buffer


def test_a_bad_deadline_is_refused_with_the_callers_error_and_setting():
    with pytest.raises(RerankerError, match=r"^rag.rerank.deadline must be a positive number"):
        LLMReranker("m", "http://127.0.0.1:9/v1", deadline=0)
    with pytest.raises(AnswerError, match=r"^rag.answer.timeout must be a positive number"):
        OpenAIChat("m", "http://127.0.0.1:9/v1", timeout=-1)
