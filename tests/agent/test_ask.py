"""KnowledgeBase.ask against a local chat server, through the real openai and google-genai SDKs.

The knowledge bases are real SQLite files; the chat server (tests/fake_chat.py) speaks the
OpenAI chat-completions protocol (plain and SSE) and Gemini's generateContent. Only
``kbcli.providers.retry.sleep`` is replaced, so retries do not wait.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tenants
from cli_helpers import minimal_pdf
from fake_chat import FakeChatServer, prompt_text
from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
from kbcli.agent.answer import (
    Answer,
    TermWeights,
    budget_evidence,
    build_messages,
    check_citations,
    citations_in,
    content_text,
    question_language,
)
from kbcli.config.lookup import AnswerConfig, Config, RAGConfig
from kbcli.config.parse import build_config
from kbcli.errors import AnswerError, ConfigError, InvalidOptionError
from kbcli.providers import retry
from kbcli.providers.thinking import ThinkFilter, strip_thinking
from kbcli.search.rerank import rescored
from kbcli.text.analysis import keyword_counts
from kbcli.text.bm25 import bm25_idf

SECRET = "sk-answer-secret-0123456789abcdef"
VPN = (
    "# VPN\n\nThe VPN gateway is vpn.example.com.\n\n## Password\n\n"
    "The VPN password rotates every month; reset it from the self-service portal.\n"
)
TOMATOES = "# Tomatoes\n\nWater the tomatoes every morning in summer; keep basil in the shade.\n"
ZH = "# 密码\n\n重置密码：打开设置，选择安全，然后点击重置密码。重置链接会发送到你的邮箱。\n"


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(retry, "sleep", lambda s: None)


@pytest.fixture
def server():
    with FakeChatServer() as srv:
        yield srv


def answer_config(server, **settings) -> Config:
    settings.setdefault("base_url", server.url + "/v1")
    return Config(rag=RAGConfig(answer=AnswerConfig(**settings)))


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    out = {
        "vpn": folder / "vpn.md",
        "tomatoes": folder / "tomatoes.md",
        "zh": folder / "zh.md",
        "manual": folder / "manual.pdf",
    }
    out["vpn"].write_text(VPN, encoding="utf-8")
    out["tomatoes"].write_text(TOMATOES, encoding="utf-8")
    out["zh"].write_text(ZH, encoding="utf-8")
    out["manual"].write_bytes(minimal_pdf("Reset the router password from the admin page."))
    return out


def open_kb(tmp_path, config: Config, files=None, **parts) -> KnowledgeBase:
    kb = KnowledgeBase.open(tmp_path / "kb.db", config=config, embedder=SimpleEmbedder(), **parts)
    for path in (files or {}).values():
        kb.ingest_file(path)
    return kb


@pytest.fixture
def kb(tmp_path, server, files):
    kb = open_kb(tmp_path, answer_config(server), files)
    yield kb
    kb.close()


# --- prompt, numbering, citations --------------------------------------------------------------


@pytest.mark.slow
def test_the_prompt_numbers_the_evidence_best_first_with_source_page_and_section(kb, server, files):
    answer = kb.ask("How often does the VPN password rotate?")
    (body,) = server.bodies()
    system, user = body["messages"]
    assert system["role"] == "system" and "only the numbered sources" in system["content"]
    assert user["role"] == "user"
    content = user["content"]
    assert content.startswith("Sources:\n\n[1] ")
    assert content.endswith("Question: How often does the VPN password rotate?")
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", content, re.M)]
    assert numbers == list(range(1, len(answer.evidence) + 1))
    first = answer.evidence[0]
    assert "rotates every month" in first.text  # the best passage is [1]
    assert f"[1] source: {files['vpn'].resolve()}; section: VPN > Password\n" in content
    assert first.text in content
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.0
    assert body["max_tokens"] == 800 and "stream" not in body


def test_the_cited_source_resolves_to_the_line_an_editor_opens(kb, server, files):
    answer = kb.ask("How often does the VPN password rotate?")
    assert answer.text == "## Password The VPN password rotates every month; [1]."
    assert answer.cited == [1] and answer.unknown_citations == []
    (cited,) = answer.citations
    lines = VPN.splitlines()
    # what $EDITOR +LINE path opens: the line holding the question's terms, not the chunk's
    # first line (the heading above it)
    assert cited.metadata["line"] == 5 and lines[4] == "## Password"
    assert lines[cited.line - 1].startswith("The VPN password rotates every month")
    assert cited.location == f"{files['vpn'].resolve()}:{cited.line}"
    assert answer.model == "fake-chat-1" and answer.finish_reason == "stop"


def test_a_pdf_passage_is_given_with_its_page(kb, server, files):
    answer = kb.ask("How do I reset the router password?")
    manual = next(e for e in answer.evidence if e.source == str(files["manual"].resolve()))
    assert manual.page == 1
    assert f"[{manual.n}] source: {manual.source}; page 1" in prompt_text(server.bodies()[0])


def test_a_citation_naming_no_source_is_flagged_not_dropped(kb, server):
    server.reply = "It rotates monthly [1][2]. The gateway is vpn.example.com [9] (see [0])."
    answer = kb.ask("How often does the VPN password rotate?", min_coverage=0.0)
    given = len(answer.evidence)
    assert given >= 2
    assert answer.cited == [1, 2]
    assert answer.unknown_citations == [9, 0]
    data = answer.to_dict()
    assert data["unknown_citations"] == [9, 0]
    assert [c["n"] for c in data["citations"]] == [1, 2]


def test_json_shape(kb, server, files):
    data = kb.ask("How often does the VPN password rotate?").to_dict()
    assert list(data) == ["answer", "citations", "unknown_citations", "refused", "reason", "model"]
    (citation,) = data["citations"]
    assert list(citation) == ["n", "source", "location", "line", "page", "id", "text", "note_by"]
    source = str(files["vpn"].resolve())
    assert citation["source"] == source and citation["line"] == 7  # the matching line
    assert citation["location"] == f"{source}:7"
    assert citation["page"] is None and "rotates every month" in citation["text"]
    assert data["refused"] is False and data["reason"] is None and data["model"] == "fake-chat-1"
    json.dumps(data)  # plain JSON


def test_strict_turns_an_answer_citing_nothing_into_a_refusal(kb, server):
    server.reply = "The password rotates monthly."
    loose = kb.ask("How often does the VPN password rotate?")
    assert not loose.refused and loose.cited == []
    strict = kb.ask("How often does the VPN password rotate?", strict=True)
    assert strict.refused and "cites none" in strict.reason
    assert strict.text == "The password rotates monthly."  # kept, for the record
    server.reply = "Only a made-up source [7]."
    assert kb.ask("How often does the VPN password rotate?", strict=True).refused


# --- refusal without a request ---------------------------------------------------------------


def test_no_matching_passage_refuses_without_a_request(kb, server):
    answer = kb.ask("What is the capital of Peru?")
    assert answer.refused and answer.text is None and answer.model is None
    assert answer.message == (
        "No relevant knowledge found: no indexed passage matches the question."
    )
    assert server.requests == []


def test_weak_evidence_refuses_without_a_request_and_says_how_weak(kb, server):
    question = "How do I reset the watering schedule of the greenhouse irrigation robot?"
    answer = kb.ask(question)
    assert answer.refused and server.requests == []
    assert "of the question's terms (weighted by rarity), under min_coverage 0.3" in answer.reason
    # the same question with the floor lowered goes to the model
    assert not kb.ask(question, min_coverage=0.0).refused
    assert len(server.requests) == 1


def test_a_reranker_refusal_makes_no_request(tmp_path, server, files):
    class Low:
        def rerank(self, query, results):
            return rescored(results, [0.1] * len(results))

    kb = open_kb(tmp_path, answer_config(server), files, reranker=Low())
    try:
        answer = kb.ask("How often does the VPN password rotate?", min_relevance=0.5)
        assert answer.refused and server.requests == []
        assert answer.reason.startswith("none of the") and "min_relevance 0.5 (best 0.100)" in (
            answer.reason
        )
        # min_relevance met: the reranker decides, the coverage floor is not applied
        weak = kb.ask("irrigation robot greenhouse tomatoes", min_relevance=0.05)
        assert not weak.refused and all(e.coverage is None for e in weak.evidence)
    finally:
        kb.close()


def test_a_refusal_names_a_folder_or_key_that_explains_it(kb, server, tmp_path):
    elsewhere = str(tmp_path / "nowhere") + "/"
    answer = kb.ask("VPN password", filter={"source": {"$prefix": elsewhere}})
    assert answer.refused and f"nothing is indexed under {elsewhere!r}" in answer.reason
    answer = kb.ask("VPN password", filter={"tem": "ops"})
    assert answer.refused and "no indexed passage has the metadata key 'tem'" in answer.reason
    assert server.requests == []


# --- languages -------------------------------------------------------------------------------


def test_a_chinese_question_gets_a_chinese_instruction(kb, server, files):
    server.reply = "打开设置，选择安全，点击重置密码 [1]。"
    answer = kb.ask("如何重置密码？")
    assert not answer.refused and answer.language == "zh"
    system, user = server.bodies()[0]["messages"]
    assert system["content"].startswith("你只能根据下面编号的资料回答用户的问题")
    assert user["content"].startswith("资料：\n\n[1] 来源：")
    assert user["content"].endswith("问题：如何重置密码？")
    assert answer.citations[0].source == str(files["zh"].resolve())
    assert answer.cited == [1]


def test_question_language_and_question_words():
    assert question_language("如何重置密码？") == "zh"
    assert question_language("陸特和漢斯雷頓開創了哪一地區？") == "zh"
    assert question_language("パスワードを変更するには？") == "en"  # Japanese: English rules
    assert question_language("How do I reset it?") == "en"
    assert content_text("How do I reset the password?").split() == ["reset", "the", "password?"]
    assert "什么" not in content_text("锣鼓经是什么？") and "锣鼓经" in content_text(
        "锣鼓经是什么？"
    )
    assert "show" in content_text("Does it show the password?")  # whole words only


# --- streaming and providers -----------------------------------------------------------------


def test_streamed_answer_arrives_in_pieces_over_sse(kb, server):
    pieces: list[str] = []
    answer = kb.ask("How often does the VPN password rotate?", on_text=pieces.append)
    assert len(pieces) > 3 and "".join(pieces) == answer.text
    assert server.bodies()[0]["stream"] is True
    assert answer.cited == [1]


@pytest.mark.parametrize("streamed", [False, True])
def test_gemini_answers_through_google_genai(tmp_path, server, files, monkeypatch, streamed):
    monkeypatch.setenv("GOOGLE_API_KEY", SECRET)
    config = answer_config(server, provider="gemini", base_url=server.url, model="gemini-x")
    kb = open_kb(tmp_path, config, files)
    try:
        pieces: list[str] = []
        answer = kb.ask(
            "How often does the VPN password rotate?",
            on_text=pieces.append if streamed else None,
        )
    finally:
        kb.close()
    path, headers, body = server.requests[0]
    verb = "streamGenerateContent?alt=sse" if streamed else "generateContent"
    assert path.endswith(f"/models/gemini-x:{verb}")
    assert headers["x-goog-api-key"] == SECRET
    assert "only the numbered sources" in body["systemInstruction"]["parts"][0]["text"]
    assert body["contents"][0]["parts"][0]["text"].startswith("Sources:\n\n[1] ")
    assert body["generationConfig"]["maxOutputTokens"] == 800
    assert answer.cited == [1] and answer.model == "fake-chat-1"
    assert ("".join(pieces) == answer.text) if streamed else pieces == []


def test_no_configuration_uses_the_sdks_own_variables(tmp_path, server, files, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    kb = open_kb(tmp_path, Config(), files)
    try:
        answer = kb.ask("How often does the VPN password rotate?", model="llama-3.2-3b")
    finally:
        kb.close()
    _path, headers, body = server.requests[0]
    assert headers["authorization"] == f"Bearer {SECRET}" and body["model"] == "llama-3.2-3b"
    assert answer.cited == [1]


def test_a_local_server_needs_no_key(tmp_path, server, files):
    kb = open_kb(tmp_path, answer_config(server), files)
    try:
        kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    assert server.requests[0][1]["authorization"] == "Bearer no-key"


def test_api_key_env_names_the_variable_and_model_the_model(tmp_path, server, files, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", SECRET)
    config = answer_config(server, api_key_env="DEEPSEEK_API_KEY", model="deepseek-chat")
    kb = open_kb(tmp_path, config, files)
    try:
        kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    _path, headers, body = server.requests[0]
    assert headers["authorization"] == f"Bearer {SECRET}" and body["model"] == "deepseek-chat"


def test_a_leading_think_block_is_left_out(kb, server):
    server.reply = (
        "<think>The user asks about the VPN. Source 1 says monthly.</think>\n\nMonthly [1]."
    )
    assert kb.ask("How often does the VPN password rotate?").text == "Monthly [1]."
    pieces: list[str] = []
    answer = kb.ask("How often does the VPN password rotate?", on_text=pieces.append)
    assert answer.text == "Monthly [1]." and "".join(pieces) == "Monthly [1]."


def test_think_filter_pieces():
    think = ThinkFilter()
    out = [think.feed(p) for p in [" <th", "ink>plan", " [9]</thi", "nk> Answer", " [1]."]]
    assert "".join(out) + think.close() == "Answer [1]."
    assert strip_thinking("<b>bold</b> [1]") == "<b>bold</b> [1]"
    assert strip_thinking("<think>never closed") == ""


# --- errors ----------------------------------------------------------------------------------


def test_a_missing_key_is_one_line_naming_the_variable(tmp_path, server, files):
    config = Config(rag=RAGConfig(answer=AnswerConfig()))  # api.openai.com, no key anywhere
    kb = open_kb(tmp_path, config, files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask("How often does the VPN password rotate?")
        message = str(caught.value)
        assert "No API key for the openai answer model: set OPENAI_API_KEY" in message
        assert "OPENAI_BASE_URL" in message and "\n" not in message
        # a refusal needs no key: nothing would be sent
        assert kb.ask("What is the capital of Peru?").refused
    finally:
        kb.close()


@pytest.mark.parametrize("local", [False, True])
def test_an_unset_api_key_env_is_named(tmp_path, server, files, local):
    base_url = server.url + "/v1" if local else None  # named explicitly: needed even locally
    config = Config(rag=RAGConfig(answer=AnswerConfig(api_key_env="MY_LLM_KEY", base_url=base_url)))
    kb = open_kb(tmp_path, config, files)
    try:
        with pytest.raises(AnswerError, match="api_key_env names MY_LLM_KEY, which is not set"):
            kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    assert server.requests == []


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    "status,expected,attempts",
    [
        (401, "rejected the API key (status 401): check OPENAI_API_KEY", 1),
        (403, "refused access (status 403)", 1),
        (404, "answered 404 (not found): The model does not exist", 1),
        (400, "failed (status 400): Invalid request", 1),
        (429, "failed after 3 attempts (status 429): Rate limit reached", 3),
        (503, "failed after 3 attempts (status 503): Service unavailable", 3),
    ],
)
def test_http_errors_are_one_line_and_never_show_the_key(
    tmp_path, server, files, monkeypatch, status, expected, attempts, streamed
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.always = status
    server.echo_key_in_errors = True  # a server quoting the key back
    kb = open_kb(tmp_path, answer_config(server), files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(
                "How often does the VPN password rotate?",
                on_text=(lambda piece: None) if streamed else None,
            )
    finally:
        kb.close()
    message = str(caught.value)
    assert expected in message and SECRET not in message and "\n" not in message
    assert f"answer model gpt-4o-mini at 127.0.0.1:{server.url.rsplit(':', 1)[1]}" in message
    assert len(server.requests) == attempts
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_retried_failure_then_an_answer(kb, server):
    server.script = [503, (429, {"Retry-After": "1"})]
    answer = kb.ask("How often does the VPN password rotate?")
    assert answer.cited == [1] and len(server.requests) == 3


@pytest.mark.parametrize("streamed", [False, True])
def test_a_server_that_does_not_answer_in_time(tmp_path, server, files, streamed):
    server.hang = True
    kb = open_kb(tmp_path, answer_config(server, timeout=0.5, max_retries=1), files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask("How often does the VPN password rotate?", on_text=print if streamed else None)
    finally:
        kb.close()
    assert "failed after 2 attempts (" in str(caught.value)
    assert "0.5 s" in str(caught.value) and len(server.requests) == 2


def test_a_stream_pausing_longer_than_the_timeout_ends_with_an_error(tmp_path, server, files):
    server.stream_gap, server.gap_from = 1.0, 3  # silent after the first words
    server.reply = "First words arrive, then the server falls silent [1]."
    kb = open_kb(tmp_path, answer_config(server, timeout=0.4, max_retries=0), files)
    shown: list[str] = []
    try:
        with pytest.raises(AnswerError, match=r"stopped in the middle of the answer \(timed out"):
            kb.ask("How often does the VPN password rotate?", on_text=shown.append)
    finally:
        kb.close()
    assert "".join(shown).startswith("First words")


def test_a_stream_cut_before_its_end_is_an_error(kb, server):
    server.break_after = 3
    shown: list[str] = []
    with pytest.raises(AnswerError, match="the stream ended without a finish reason"):
        kb.ask("How often does the VPN password rotate?", on_text=shown.append)
    assert shown  # what arrived was shown; the error says it is incomplete


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    "malformed,expected",
    [
        ("html", "did not answer with a chat completion"),
        ("no_choices", "did not answer with a chat completion"),
        ("empty", "returned an empty answer (finish reason stop)"),
    ],
)
def test_empty_or_malformed_completions(kb, server, malformed, expected, streamed):
    server.malformed = malformed
    with pytest.raises(AnswerError) as caught:
        kb.ask("How often does the VPN password rotate?", on_text=print if streamed else None)
    assert expected in str(caught.value) and len(server.requests) == 1


def test_an_answer_cut_at_max_tokens_before_any_text_says_so(kb, server):
    server.malformed, server.finish_reason = "empty", "length"
    with pytest.raises(AnswerError, match=r"\(finish reason length\): raise rag.answer.max_tokens"):
        kb.ask("How often does the VPN password rotate?")


@pytest.mark.parametrize("malformed", ["html", "no_choices", "empty"])
def test_gemini_malformed_answers(tmp_path, server, files, monkeypatch, malformed):
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    server.malformed = malformed
    kb = open_kb(tmp_path, answer_config(server, provider="gemini", base_url=server.url), files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    assert "answer model gemini-2.5-flash" in str(caught.value) and SECRET not in str(caught.value)


# --- the whole answer's deadline and size (issue 37) ----------------------------------------

QUESTION = "How often does the VPN password rotate?"


def ask_with(tmp_path, server, files, monkeypatch, provider: str, **settings):
    """``kb.ask`` through ``provider``'s real SDK against the fake server, with ``settings``."""
    if provider == "gemini":
        monkeypatch.setenv("GEMINI_API_KEY", SECRET)
        settings = {"provider": "gemini", "base_url": server.url, **settings}
    return open_kb(tmp_path, answer_config(server, **settings), files)


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_a_stream_that_never_ends_is_cut_at_the_answers_deadline(
    tmp_path, server, files, monkeypatch, provider
):
    server.forever, server.stream_gap = True, 0.01
    kb = ask_with(tmp_path, server, files, monkeypatch, provider, deadline=1.5)
    shown: list[str] = []
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(QUESTION, on_text=shown.append)
    finally:
        kb.close()
    assert str(caught.value).endswith(
        "gave no complete answer within rag.answer.deadline (1.5 s; it was still streaming): "
        "stopped; try again later, or raise rag.answer.deadline"
    )
    assert "".join(shown).startswith("more words more words")  # shown as it came, then cut


@pytest.mark.parametrize("streamed", [False, True])
def test_the_deadline_bounds_every_attempt_and_wait_together(tmp_path, server, files, streamed):
    server.hang = True  # each attempt alone could wait 30 s, and three are allowed
    config = answer_config(server, timeout=30, max_retries=2, deadline=1)
    kb = open_kb(tmp_path, config, files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(QUESTION, on_text=print if streamed else None)
    finally:
        kb.close()
    assert "gave no complete answer within rag.answer.deadline (1 s)" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", ["openai", "gemini"])
@pytest.mark.parametrize("gzip", [False, True])
def test_a_huge_answer_is_refused_while_it_is_read(
    tmp_path, server, files, monkeypatch, provider, gzip
):
    # max_answer_mb 0.01: a reply body is read up to 4 x 10 KB + 1 MB, then dropped
    server.huge, server.gzip = 64 << 20, gzip
    kb = ask_with(tmp_path, server, files, monkeypatch, provider, max_answer_mb=0.01)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(QUESTION)
    finally:
        kb.close()
    message = str(caught.value)
    assert "sent a reply of more than 1.04 MB, over what rag.answer.max_answer_mb (0.01 MB)" in (
        message
    )
    assert len(server.requests) == 1  # not retried
    assert server.bytes_sent < (16 << 20)  # the client stopped reading long before the end


def test_an_answer_over_max_answer_mb_in_a_small_reply_is_refused(tmp_path, server, files):
    server.reply = "The password rotates monthly [1]. " * 400  # 13.6 KB of text, a 14 KB body
    kb = open_kb(tmp_path, answer_config(server, max_answer_mb=0.01), files)
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(QUESTION)
    finally:
        kb.close()
    assert str(caught.value).endswith(
        "sent more than rag.answer.max_answer_mb (0.01 MB) of answer: stopped reading it; "
        "lower rag.answer.max_tokens, or raise rag.answer.max_answer_mb for answers that long"
    )


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_a_streamed_answer_is_counted_as_it_arrives(tmp_path, server, files, monkeypatch, provider):
    server.huge = 64 << 20  # 64 KB events, without end as far as the client can tell
    kb = ask_with(tmp_path, server, files, monkeypatch, provider, max_answer_mb=0.5)
    shown: list[str] = []
    try:
        with pytest.raises(AnswerError) as caught:
            kb.ask(QUESTION, on_text=shown.append)
    finally:
        kb.close()
    assert "sent more than rag.answer.max_answer_mb (0.5 MB) of answer" in str(caught.value)
    assert 0 < len("".join(shown)) <= 512 * 1024  # what was shown stayed within the cap
    assert server.bytes_sent < (8 << 20)


def test_a_think_block_that_never_closes_is_counted_too(tmp_path, server, files):
    server.reply = "<think> " + "pondering " * 3000  # 30 KB of thinking, never an answer
    kb = open_kb(tmp_path, answer_config(server, max_answer_mb=0.01), files)
    shown: list[str] = []
    try:
        with pytest.raises(AnswerError, match=r"sent more than rag.answer.max_answer_mb"):
            kb.ask(QUESTION, on_text=shown.append)
    finally:
        kb.close()
    assert shown == [] and len(server.requests) == 1


# --- scopes ----------------------------------------------------------------------------------


@pytest.fixture
def shared(tmp_path, server):
    built = tenants.build(tmp_path / "tenants")
    kb = KnowledgeBase(
        store=SQLiteStore(built.db), embedder=SimpleEmbedder(), config=answer_config(server)
    )
    yield built, kb
    kb.close()


def _files_digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()
    }


@pytest.mark.slow
def test_nothing_outside_the_scope_reaches_the_prompt_the_answer_or_the_logs(
    shared, server, caplog
):
    built, kb = shared
    scoped = kb.scoped(tenants.SCOPE)
    scoped.search(tenants.ACME_TEXTS[0])  # the index's derived files (vector cache) exist now
    before = _files_digest(built.db.parent)
    server.reply = lambda body: prompt_text(body)  # the model repeats its whole prompt
    questions = [*tenants.ACME_TEXTS, *tenants.CANARIES, "password invoices vpn backups"]
    caplog.set_level(logging.DEBUG)
    answered = 0
    for question in questions:
        for answer in (
            scoped.ask(question, min_coverage=0.0),
            kb.ask(question, filter=tenants.SCOPE, min_coverage=0.0),
        ):
            answered += not answer.refused
            assert built.leaks(json.dumps(answer.to_dict(), ensure_ascii=False)) == []
            assert all(e.metadata["tenant"] == "acme" for e in answer.evidence)
    assert answered >= 2 * len(tenants.ACME_TEXTS)
    assert server.requests, "the sweep reached the model"
    for _path, _headers, body in server.requests:
        assert built.leaks(json.dumps(body, ensure_ascii=False)) == []
    assert built.leaks(caplog.text) == []
    assert _files_digest(built.db.parent) == before  # no cache of questions or answers kept
    control = kb.ask(tenants.CANARIES[0])  # unscoped, the same check does see other tenants
    assert built.leaks(json.dumps(control.to_dict(), ensure_ascii=False))


def test_the_floor_weighs_terms_inside_the_scope_only(shared, server):
    built, kb = shared
    canary = tenants.CANARIES[0]
    assert not kb.ask(f"{canary}?").refused  # another tenant's word
    scoped = kb.scoped(tenants.SCOPE).ask(f"{canary}?")
    assert scoped.refused and server.requests[1:] == []
    # and the refusal's hints read only the scope: a key only another tenant has is unknown
    hint = kb.scoped(tenants.SCOPE).ask("password", filter={"heading": canary})
    assert hint.refused and built.leaks(hint.reason) == []


# --- the floor: exact idf through the keyword index -----------------------------------------


def test_term_weights_are_the_index_idf_and_absent_terms_weigh_the_most(kb, files):
    question = "How often does the VPN password rotate, and what is a zyzzyva?"
    weights = TermWeights(kb, question, None)
    analyzer = kb.analyzer
    docs = list(kb.store.iter_documents(None))
    df = Counter(t for d in docs for t in keyword_counts(analyzer, d.text, d.metadata))
    for term, weight in weights.weights.items():
        assert math.isclose(weight, bm25_idf(len(docs), df[term]), rel_tol=1e-9), term
    assert weights.weights["zyzzyva"] == max(weights.weights.values())
    assert "how" not in weights.weights and "what" not in weights.weights  # question words


def test_term_weights_of_chinese_bigrams_are_exact(kb):
    weights = TermWeights(kb, "如何重置密码？", None)
    analyzer = kb.analyzer
    docs = list(kb.store.iter_documents(None))
    df = Counter(t for d in docs for t in keyword_counts(analyzer, d.text, d.metadata))
    assert "重置" in weights.weights and "密码" in weights.weights  # bigrams, by subtraction
    for term, weight in weights.weights.items():
        assert math.isclose(weight, bm25_idf(len(docs), df[term]), rel_tol=1e-9), term


TEXTS = [
    ("The VPN password rotates every month.", "ops"),
    ("Reset the router password from the admin page; the router reboots.", "ops"),
    ("Water the tomatoes every morning.", "garden"),
    ("重置密码：打开设置，选择安全。", "ops"),
    ("密码每个月更换一次。", "garden"),
]


def _store(kind: str, tmp_path, request):
    if kind == "memory":
        from kbcli import InMemoryStore

        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "weights.db")
    dsn = request.getfixturevalue("pg_dsn")  # skips naming the extra when psycopg is missing
    from kbcli.stores.postgres import PostgresStore

    return PostgresStore(dsn, request.getfixturevalue("pg_table"))


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_every_keyword_index_gives_the_exact_idf_inside_a_filter(kind, tmp_path, request):
    kb = KnowledgeBase(store=_store(kind, tmp_path, request), embedder=SimpleEmbedder())
    try:
        for text, team in TEXTS:
            kb.add(text, {"team": team, "source": f"/{team}/{len(text)}.md"})
        docs = list(kb.store.iter_documents(None))
        df = Counter(t for d in docs for t in keyword_counts(kb.analyzer, d.text, d.metadata))
        inside = Counter(
            t
            for d in docs
            if d.metadata["team"] == "ops"
            for t in keyword_counts(kb.analyzer, d.text, d.metadata)
        )
        unknown = set()
        for question in ("How does the router password reset?", "如何重置密码？", "tomatoes?"):
            weights = TermWeights(kb, question, {"team": "ops"})
            assert weights.weights
            for term, weight in weights.weights.items():
                known = inside[term] > 0  # a term only other teams hold counts as unknown
                if not known:
                    unknown.add(term)
                expected = bm25_idf(len(docs), df[term] if known else 0)
                assert math.isclose(weight, expected, rel_tol=1e-9), (kind, term)
        assert unknown == {"tomato"}
    finally:
        kb.close()


def test_coverage_is_the_weighted_share_of_terms_a_passage_holds(kb):
    weights = TermWeights(kb, "VPN password zyzzyva", None)
    hit = kb.search("VPN password rotates", k=1, mode="keyword")[0]
    w = weights.weights
    expected = (w["vpn"] + w["password"]) / (w["vpn"] + w["password"] + w["zyzzyva"])
    assert weights.coverage(hit) == pytest.approx(expected)


# --- budget, prompt override, citations -------------------------------------------------------


def test_the_evidence_budget_keeps_the_best_first_and_cuts_the_last(kb, server):
    hits = kb.search("password reset vpn router", k=4, mode="keyword")
    scored = [(h, 1.0) for h in hits]
    total = sum(len(h.document.text) for h in hits)
    given = budget_evidence(scored, total)
    assert [e.result.document.id for e in given] == [h.document.id for h in hits]
    first = len(hits[0].document.text)
    cut = budget_evidence(scored, first + 30)
    assert len(cut) == 1  # what is left of the budget is under MIN_PIECE: left out
    small = budget_evidence(scored, 40)
    assert len(small) == 1 and small[0].text.endswith(" …") and len(small[0].text) <= 42
    tokens = budget_evidence(scored, 12, "tokens")
    assert len(tokens) == 1 and len(tokens[0].text) <= 12 * 4 + 2


def test_max_evidence_from_the_config_bounds_the_prompt(tmp_path, server, files):
    kb = open_kb(tmp_path, answer_config(server, max_evidence=60), files)
    try:
        answer = kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    assert len(answer.evidence) == 1 and len(answer.evidence[0].text) <= 62


def test_a_prompt_replaces_the_instruction_or_the_whole_message(kb, server):
    kb.ask("How often does the VPN password rotate?", prompt="Reply in French, cite [n].")
    system, user = server.bodies()[0]["messages"]
    assert system["content"] == "Reply in French, cite [n]." and "[1] source:" in user["content"]
    template = "Q: {question}\n\nNotes:\n{evidence}\n\nAnswer with [n]."
    kb.ask("How often does the VPN password rotate?", prompt=template)
    (only,) = server.bodies()[1]["messages"]
    assert only["role"] == "user"
    assert only["content"].startswith("Q: How often does the VPN password rotate?\n\nNotes:\n[1] ")
    with pytest.raises(InvalidOptionError, match="also needs {question}"):
        kb.ask("How often?", prompt="Notes: {evidence}")
    with pytest.raises(InvalidOptionError, match="The prompt is empty"):
        kb.ask("How often?", prompt="  ")
    assert len(server.requests) == 2


def test_dry_run_builds_the_prompt_and_sends_nothing(kb, server):
    answer = kb.ask("How often does the VPN password rotate?", dry_run=True)
    assert answer.text is None and not answer.refused and answer.messages[1]["content"]
    assert server.requests == []


def test_build_messages_without_page_or_heading_names_the_id():
    from kbcli.agent.answer import Evidence
    from kbcli.types import Document, SearchResult

    result = SearchResult(Document("abc123", "plain text", {}), 1.0)
    (system, user) = build_messages("q?", [Evidence(1, result, "plain text")])
    assert "[1] source: abc123\nplain text" in user["content"]


@pytest.mark.parametrize(
    "text,numbers",
    [
        ("a [1] b [2][3]", [1, 2, 3]),
        ("see [1, 4] and [1]", [1, 4]),
        ("ranges [2-4]", [2, 3, 4]),
        ("wide [1-999]", [1, 999]),
        ("footnote [^3]", [3]),
        ("中文【1】和［2］、[3，4]", [1, 2, 3, 4]),
        ("no citation here, [a] or [ ]", []),
    ],
)
def test_citations_in(text, numbers):
    assert citations_in(text) == numbers


def test_check_citations_splits_known_and_unknown():
    assert check_citations("x [1] y [5] z [0]", 3) == ([1], [5, 0])


def test_an_empty_question_and_a_bad_floor_are_refused_as_usage(kb):
    with pytest.raises(InvalidOptionError):
        kb.ask("   ")
    with pytest.raises(InvalidOptionError, match="min_coverage"):
        kb.ask("vpn", min_coverage=1.5)


def test_answer_message_for_a_refusal():
    assert Answer("q", refused=True, reason="x").message == "No relevant knowledge found: x."
    assert Answer("q").message == ""


# --- configuration ---------------------------------------------------------------------------


def test_rag_answer_is_read_and_checked():
    answer = build_config(
        {
            "rag": {
                "answer": {
                    "provider": "Gemini",
                    "model": "gemini-x",
                    "api_key_env": "MY_KEY",
                    "max_evidence": "1500 tokens",
                    "temperature": 0.2,
                    "min_coverage": 0.4,
                }
            }
        },
        None,
    ).rag.answer
    assert (answer.provider, answer.model, answer.api_key_env) == ("gemini", "gemini-x", "MY_KEY")
    assert (answer.max_evidence, answer.evidence_unit) == (1500, "tokens")
    assert answer.temperature == 0.2 and answer.min_coverage == 0.4
    assert build_config({}, None).rag.answer == AnswerConfig()


@pytest.mark.parametrize(
    "section,message",
    [
        ({"provider": "claude"}, "must be one of openai, gemini"),
        ({"max_evidence": 0}, "rag.answer.max_evidence: must be a positive number"),
        ({"max_evidence": "many"}, "rag.answer.max_evidence"),
        ({"temperature": 5}, "between 0.0 and 2.0"),
        ({"min_coverage": 2}, "rag.answer.min_coverage"),
        ({"max_tokens": 0}, "rag.answer.max_tokens: must be at least 1"),
        ({"modle": "x"}, "did you mean model?"),
        ({"api_key_env": SECRET}, "must name an environment variable in capitals"),
        ({"deadline": 0}, "rag.answer.deadline: must be between 0.001 and 86400.0"),
        ({"deadline": "soon"}, "rag.answer.deadline: must be a number"),
        ({"max_answer_mb": 0}, "rag.answer.max_answer_mb: must be between 0.001 and 100.0"),
        ({"max_answer_mb": 4096}, "rag.answer.max_answer_mb: must be between 0.001 and 100.0"),
    ],
)
def test_bad_rag_answer_values(section, message):
    with pytest.raises(ConfigError) as caught:
        build_config({"rag": {"answer": section}}, None)
    assert message in str(caught.value) and SECRET not in str(caught.value)


@pytest.mark.slow
def test_the_readme_python_lines_for_ask_run_verbatim(tmp_path, server):
    """README's ``kb ask`` Python block, as a user's script in its own process, against a
    local OpenAI-compatible server named by OPENAI_BASE_URL."""
    from cli_helpers import PASSWORD_TEXT

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### `kb ask QUESTION [options]`") :]
    block = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL).group(1)
    work = tmp_path / "project"
    (work / "docs").mkdir(parents=True)
    guide = work / "docs" / "guide.md"
    guide.write_text(PASSWORD_TEXT, encoding="utf-8")
    prepared = KnowledgeBase.open(work / "notes.db", embedder=SimpleEmbedder())
    prepared.ingest_file(guide, {"team": "ops"})
    prepared.close()
    (work / "ask.py").write_text(block, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "XDG_"))}
    env["OPENAI_BASE_URL"] = server.url + "/v1"
    env["HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "ask.py"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    first, cited, streamed = done.stdout.split("\n", 2)
    assert first.endswith(" [1].") and "password" in first
    assert cited == f"[1] {guide.resolve()}:1"
    assert streamed.endswith(" [1].") and len(server.requests) == 2
    assert server.bodies()[1]["stream"] is True


# --- a class of one's own, and trust ------------------------------------------------------


def test_an_answer_model_of_ones_own(tmp_path, files):
    config = Config(rag=RAGConfig(answer=AnswerConfig(provider="fake_chat:EchoChat", model="m")))
    kb = open_kb(tmp_path, config, files)
    try:
        answer = kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()
    assert answer.model == "m" and answer.cited == [1]


@pytest.mark.parametrize(
    "provider,words",
    [
        ("fake_chat:default_reply", "is a function, not a class"),
        ("fake_chat:FakeChatServer", "lacks the methods of ChatModelProtocol (complete)"),
        ("claude", "Unknown answer model 'claude': choose from openai, gemini"),
    ],
)
def test_an_answer_provider_must_be_a_chat_model_class(tmp_path, files, provider, words):
    config = Config(rag=RAGConfig(answer=AnswerConfig(provider=provider)))
    kb = open_kb(tmp_path, config, files)
    try:
        with pytest.raises(InvalidOptionError, match=re.escape(words)):
            kb.ask("How often does the VPN password rotate?")
    finally:
        kb.close()


@pytest.mark.parametrize(
    "section,key",
    [
        ("base_url: http://attacker.example/v1", "rag.answer.base_url"),
        ("api_key_env: GITHUB_TOKEN", "rag.answer.api_key_env"),
        ("provider: 'fake_chat:EchoChat'", "rag.answer.provider"),
        ("provider: gemini", "rag.answer.provider"),  # another provider: kb ask's data goes there
        ("model: gpt-4.1", "rag.answer.model"),  # another model receives (and bills) it
    ],
)
def test_a_working_directory_config_needs_trust_for_the_answer_model(section, key):
    from kbcli.config.lookup import load_config

    file = Path.cwd() / "jianmu.yaml"
    file.write_text(f"rag:\n  answer:\n    {section}\n")
    with pytest.raises(ConfigError) as info:
        load_config()
    assert key in str(info.value) and f"kb trust {file}" in str(info.value)


def test_answer_settings_that_choose_no_receiver_apply_without_trust():
    from kbcli.config.lookup import load_config

    (Path.cwd() / "jianmu.yaml").write_text(
        "rag:\n  answer:\n    provider: openai\n    max_tokens: 300\n"
        "    min_coverage: 0.4\n    max_evidence: 2000 tokens\n"
    )
    answer = load_config().rag.answer
    assert (answer.provider, answer.max_tokens, answer.max_evidence) == ("openai", 300, 2000)
