"""LLMReranker and query rewriting (HyDE, expansion) against a local fake chat server."""

from __future__ import annotations

import pytest

from fake_rerank import FakeRerankServer
from kbcli import Document, KnowledgeBase, RAGPipeline, SearchOptions, SearchResult
from kbcli.errors import InvalidOptionError, RerankerError
from kbcli.providers import retry
from kbcli.search.fusion import FUSION_WINDOW
from kbcli.search.rerank import LLMReranker
from kbcli.search.rerank.llm import listwise_scores, yes_probability
from kbcli.search.rewrite import QueryRewriter, build_rewriter

SECRET = "sk-chat-0123456789abcdef"
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
    monkeypatch.setattr(retry, "sleep", lambda s: None)


def test_pointwise_uses_the_yes_probability(server):
    reranker = LLMReranker("judge-1", server.url + "/v1", SECRET, workers=2)
    out = reranker.rerank("reset password", hits())
    assert [h.document.id for h in out][:2] == ["d1", "d3"]
    assert out[0].score == pytest.approx(1.0, abs=1e-4)
    assert out[1].score == pytest.approx(0.5, abs=1e-4)
    assert out[-1].score < 1e-3
    bodies = server.bodies("/chat/completions")
    assert len(bodies) == 4 and all(b["model"] == "judge-1" for b in bodies)
    assert bodies[0]["logprobs"] is True and bodies[0]["max_tokens"] == 1
    assert bodies[0]["temperature"] == 0.0
    assert server.requests[0][0] == "/v1/chat/completions"
    assert server.requests[0][1]["authorization"] == f"Bearer {SECRET}"


def test_pointwise_without_logprobs_scores_yes_as_one(server):
    server.logprobs_supported = False
    out = LLMReranker("m", server.url, logprobs=False).rerank("reset password", hits())
    assert [h.score for h in out] == [1.0, 1.0, 0.0, 0.0]
    assert [h.document.id for h in out] == ["d1", "d3", "d0", "d2"]  # ties keep recall order
    assert "logprobs" not in server.bodies("/chat/completions")[0]


def test_listwise_is_one_request_and_scores_listed_above_a_half(server):
    out = LLMReranker("m", server.url, method="listwise").rerank("reset password", hits())
    assert len(server.requests) == 1
    prompt = server.bodies("/chat/completions")[0]["messages"][-1]["content"]
    assert "[1] Water the tomatoes" in prompt and "[4] Password rules" in prompt
    assert [(h.document.id, h.score) for h in out] == [
        ("d1", 1.0),
        ("d3", 0.75),
        ("d0", 0.0),
        ("d2", 0.0),
    ]


def test_answer_parsing():
    assert yes_probability("Yes", None) == 1.0 and yes_probability("no", None) == 0.0
    assert yes_probability("x", {" Yes": -0.1, "No": -2.3}) == pytest.approx(0.9, abs=0.01)
    assert listwise_scores("[2] > [9] > [2] > [1]", 3) == [0.75, 1.0, 0.0]
    assert listwise_scores("none", 2) == [0.0, 0.0]


def test_chat_errors_are_one_line_without_the_key(server):
    server.always = 401
    server.echo_key_in_errors = True
    with pytest.raises(RerankerError) as err:
        LLMReranker("m", server.url, SECRET, workers=1).rerank("q", hits())
    assert "status 401" in str(err.value) and SECRET not in str(err.value)
    assert "\n" not in str(err.value)


def test_openai_without_a_key_is_refused_up_front():
    with pytest.raises(RerankerError, match="No API key for the LLM reranker"):
        LLMReranker("gpt-4o-mini")
    with pytest.raises(InvalidOptionError):
        LLMReranker("m", "http://127.0.0.1:1", method="sideways")


def test_hyde_and_expand_routes(server):
    server.hyde_answer = "Open Settings, then Security, and click Reset password."
    rewriter = QueryRewriter("both", "writer", server.url)
    routes = rewriter.routes("forgot my login", "hybrid")
    assert routes[0] == ("hyde", server.hyde_answer, "semantic")
    assert [r[0] for r in routes[1:]] == ["expand1", "expand2", "expand3"]
    assert all(mode == "hybrid" for _l, _t, mode in routes[1:])
    assert QueryRewriter("hyde", "w", server.url).routes("q", "keyword")[0][2] == "keyword"
    server.expansions = ["1. forgot my login", "- sign in help", "sign in help", ""]
    assert QueryRewriter("expand", "w", server.url).expand("Forgot my login") == ["sign in help"]


class RecordingRetriever:
    def __init__(self, docs):
        self.docs = docs
        self.calls = []

    def search(self, query, k=5, options=None):
        self.calls.append((query, options.mode, k))
        from fake_rerank import overlap

        scored = [(overlap(query, d.text), d) for d in self.docs]
        ranked = [d for s, d in sorted(scored, key=lambda x: -x[0]) if s > 0][:k]
        return [SearchResult(d, 1.0) for d in ranked]


def test_hyde_passage_is_searched_beside_the_original_query(server):
    server.hyde_answer = "Open settings and click reset password."
    docs = [Document(f"d{i}", t) for i, t in enumerate(DOCS)]
    retriever = RecordingRetriever(docs)
    pipeline = RAGPipeline(retriever, rewriter=QueryRewriter("hyde", "w", server.url))
    out = pipeline.search("forgot login", SearchOptions(k=2, explain=True))
    # the original query first; each route recalled as deep as RRF's window, whatever k
    assert retriever.calls[0] == ("forgot login", "hybrid", FUSION_WINDOW)
    assert retriever.calls[1] == (server.hyde_answer, "semantic", FUSION_WINDOW)
    assert len(out) == 2
    assert out[0].document.id == "d1"  # found only through the hypothetical answer
    assert out[0].explain["query"] is None and out[0].explain["hyde"]["rank"] == 1
    assert out[0].explain["fusion"] == "rrf"


def test_rewrite_option_overrides_and_none_switches_it_off(server, tmp_path):
    from kbcli.config.lookup import load_config

    file = tmp_path / "cwd" / "jianmu.yaml"
    file.write_text(f"rag: {{rewrite: {{mode: none, model: w, base_url: '{server.url}'}}}}\n")
    from kbcli.config.trust import trust

    trust(file, file.read_bytes())  # it is in the cwd and names a server
    config = load_config(file)
    assert build_rewriter(config) is None
    assert build_rewriter(config, "expand").mode == "expand"
    retriever = RecordingRetriever([Document(f"d{i}", t) for i, t in enumerate(DOCS)])
    pipeline = RAGPipeline.configured(retriever, config)
    pipeline.search("reset password", SearchOptions(k=2, rewrite="expand"))
    assert len(retriever.calls) == 4 and server.requests  # original + three phrasings
    retriever.calls.clear()
    pipeline.rewriter = QueryRewriter("hyde", "w", server.url)
    pipeline.search("reset password", SearchOptions(k=2, rewrite="none"))
    assert len(retriever.calls) == 1


def test_rewriting_with_rerank_judges_the_original_query(server):
    server.hyde_answer = "Open settings and click reset password."
    seen = []

    class Judge:
        def rerank(self, query, results):
            seen.append(query)
            return results

    kb = KnowledgeBase(reranker=Judge())
    for text in DOCS:
        kb.add(text)
    kb.pipeline.rewriter = QueryRewriter("hyde", "w", server.url)
    kb.search("forgot login", k=2, mode="keyword")
    assert seen == ["forgot login"]


# --- every rerank and rewrite within a deadline, every reply within a size (issue 37) ---------


@pytest.fixture
def chat():
    from fake_chat import FakeChatServer

    with FakeChatServer() as srv:
        yield srv


@pytest.mark.parametrize("method", ["pointwise", "listwise"])
def test_a_rerank_ends_at_its_deadline_whatever_the_server_does(chat, method):
    chat.hang = True  # each request alone may take timeout x 4 attempts = 2 minutes
    reranker = LLMReranker(
        "m", chat.url + "/v1", SECRET, method=method, workers=2, timeout=30, deadline=1
    )
    with pytest.raises(RerankerError) as err:
        reranker.rerank("reset password", hits())
    assert str(err.value) == (
        f"LLM reranker m at {chat.url.removeprefix('http://')} gave no complete answer within "
        "rag.rerank.deadline (1 s): stopped; try again later, or raise rag.rerank.deadline"
    )


def test_a_rewrite_ends_at_its_deadline(chat):
    chat.hang = True
    rewriter = QueryRewriter("both", "w", chat.url + "/v1", SECRET, timeout=30, deadline=1)
    with pytest.raises(RerankerError, match=r"within rag.rewrite.deadline \(1 s\): stopped"):
        rewriter.routes("reset password", "hybrid")
    assert len(chat.requests) == 1  # the second route was never asked for


@pytest.mark.parametrize("who", ["reranker", "rewriter"])
def test_a_huge_reply_is_dropped_while_read(chat, who):
    chat.huge = 400 << 20
    with pytest.raises(RerankerError) as err:
        if who == "reranker":
            LLMReranker("m", chat.url + "/v1", SECRET, workers=1).rerank("q", hits())
        else:
            QueryRewriter("hyde", "w", chat.url + "/v1", SECRET).routes("q", "hybrid")
    setting = "rag.rerank" if who == "reranker" else "rag.rewrite"
    assert str(err.value).endswith(
        "sent a reply of more than 16 MB, more than kb reads: stopped reading it; check that "
        f"{setting}.base_url is the right server"
    )
    assert len(chat.requests) == 1 and chat.bytes_sent < (64 << 20)  # not retried, not read


def test_kb_search_with_a_rewriter_that_never_answers_ends_in_one_line(chat, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    chat.hang = True
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Password\n\nTo reset your password open settings.\n")
    config = tmp_path / "limits.yaml"
    config.write_text(
        f"rag:\n  rewrite:\n    mode: hyde\n    base_url: {chat.url}/v1\n    deadline: 1\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src, "KB_CONFIG": str(config), "LLM_API_KEY": SECRET}

    def kb(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "kbcli", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    assert kb("ingest", str(docs), "-q").returncode == 0
    done = kb("search", "reset password", "--json")
    assert done.returncode == 1 and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "query rewriter gpt-4o-mini at " in lines[0]
    assert lines[0].endswith(
        "gave no complete answer within rag.rewrite.deadline (1 s): stopped; try again later, "
        "or raise rag.rewrite.deadline"
    )
    plain = kb("search", "reset password", "--rewrite", "none", "--json")
    assert plain.returncode == 0 and json.loads(plain.stdout)


def test_the_api_reranker_shares_the_deadline(server):
    from kbcli.search.rerank.api import APIReranker

    server.stalls = [5.0, 5.0, 5.0]
    reranker = APIReranker(server.url, "r", SECRET, max_documents=2, timeout=30, deadline=1)
    with pytest.raises(RerankerError, match=r"within rag.rerank.deadline \(1 s\): stopped"):
        reranker.rerank("reset password", hits())
    assert len(server.requests) == 1


@pytest.mark.parametrize("key", ["rerank", "rewrite"])
def test_deadlines_come_from_the_config_and_are_checked(tmp_path, key):
    from kbcli.config.parse import build_config
    from kbcli.errors import ConfigError

    config = build_config({"rag": {key: {"deadline": 7}}}, None)
    assert getattr(config.rag, key).deadline == 7
    assert build_config({}, None).rag.rerank.deadline == 120
    assert build_config({}, None).rag.rewrite.deadline == 60
    with pytest.raises(ConfigError, match=rf"rag.{key}.deadline: must be between"):
        build_config({"rag": {key: {"deadline": 0}}}, None)


def test_a_huge_error_body_is_read_only_as_far_as_its_message():
    from fake_chat import huge_error_server

    with huge_error_server() as (url, sent):
        reranker = LLMReranker("m", url, SECRET, workers=1, max_retries=0)
        with pytest.raises(RerankerError) as err:
            reranker.rerank("q", hits()[:1])
    assert "(status 500)" in str(err.value) and len(str(err.value)) < 600
    assert sent[0] < (64 << 20)  # the 64 KB kb reads, plus what the sockets buffer
