"""Slow and hostile providers through the ``kb`` command and the real SDKs: a server that
never answers, one that trickles a byte at a time, 401, and a 429 storm. Every command must
end within the configured deadline (rag.embedding.timeout / retry_budget) with one clear line
and a non-zero exit code.

The deadlines here are a fraction of a second so the suite stays fast; the logic is the same
at the defaults (30 s per request, 45 s per request with its retries).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import run
from fake_providers import FakeServer

TIMEOUT = 0.4
BUDGET = 1.0
SLACK = 3.0  # seconds for everything that is not waiting on the server (a loaded CI machine)
KEY = "sk-canary-0123456789abcdef"


@pytest.fixture(scope="module", autouse=True)
def _sdks_imported():
    """Import the SDKs once up front, so the timings measure waiting, not importing."""
    import google.genai  # noqa: F401
    import openai  # noqa: F401


@pytest.fixture
def server():
    with FakeServer() as srv:
        yield srv


def configure(tmp_path: Path, monkeypatch, server: FakeServer, provider: str) -> Path:
    base = server.url + "/v1" if provider == "openai" else server.url
    cfg = tmp_path / "jianmu.yaml"
    cfg.write_text(
        "rag:\n  embedding:\n"
        f"    provider: {provider}\n    base_url: {base}\n    model: fake-embed\n"
        f"    timeout: {TIMEOUT}\n    retry_budget: {BUDGET}\n    max_retries: 20\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("KB_CONFIG", str(cfg))
    monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "GOOGLE_API_KEY", KEY)
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "a.md").write_text("# Reset\n\nHow to reset a password.\n", encoding="utf-8")
    return docs


def set_mode(server: FakeServer, mode: str) -> None:
    if mode == "hang":
        server.hang = True
    elif mode == "trickle":
        server.trickle = 0.1  # a complete answer would take well over 10 s
    elif mode == "401":
        server.always = 401
    elif mode == "429":
        server.always = 429


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.stderr
    assert KEY not in result.stderr + result.stdout
    return lines[0]


EXPECT = {
    # a silent server trips the SDK's per-read timeout or kbcli's deadline, whichever is first
    "hang": ("no complete answer", "timed out after"),
    "trickle": ("no complete answer",),  # only the total deadline catches a trickle
    "401": ("rejected the API key",),
    "429": ("status 429",),
}


@pytest.mark.parametrize("provider", ["openai", "gemini"])
@pytest.mark.parametrize("mode", ["hang", "trickle", "401", "429"])
def test_ingest_ends_on_time_with_one_line(tmp_path, monkeypatch, server, provider, mode):
    docs = configure(tmp_path, monkeypatch, server, provider)
    set_mode(server, mode)
    started = time.monotonic()
    result = run("ingest", str(docs))
    took = time.monotonic() - started
    assert result.exit_code == 1
    line = one_error_line(result)
    assert any(text in line for text in EXPECT[mode]), line
    assert took < BUDGET + SLACK, took
    if mode in ("hang", "trickle", "429"):
        assert "retry_budget" in line or "max_retries" in line


@pytest.mark.parametrize("provider", ["openai", "gemini"])
@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_search_ends_on_time_with_one_line(tmp_path, monkeypatch, server, provider, mode):
    docs = configure(tmp_path, monkeypatch, server, provider)
    assert run("ingest", str(docs)).exit_code == 0
    set_mode(server, mode)
    started = time.monotonic()
    result = run("search", "reset password", "--mode", "semantic")
    took = time.monotonic() - started
    assert result.exit_code == 1
    line = one_error_line(result)
    assert any(text in line for text in EXPECT[mode]), line
    assert took < BUDGET + SLACK, took


def test_a_slow_but_complete_answer_within_the_deadline_is_kept(tmp_path, monkeypatch, server):
    docs = configure(tmp_path, monkeypatch, server, "openai")
    server.stalls = [TIMEOUT / 4]
    assert run("ingest", str(docs)).exit_code == 0


def test_hanging_server_does_not_hold_the_process(tmp_path, monkeypatch, server):
    """The abandoned request thread must not keep a real ``kb`` process alive."""
    docs = configure(tmp_path, monkeypatch, server, "openai")
    server.hang = True
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kbcli", "ingest", str(docs)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert any(text in proc.stderr for text in EXPECT["hang"]), proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < BUDGET + 5, took  # interpreter start-up and imports included


def test_rerank_and_chat_endpoint_deadline_cuts_a_trickling_server(server, monkeypatch):
    """The rerank/LLM endpoints (urllib) get the same total deadline per attempt."""
    from kbcli.errors import RerankerError
    from kbcli.providers import retry
    from kbcli.providers.http import JSONEndpoint

    monkeypatch.setattr(retry, "sleep", lambda s: None)
    server.trickle = 0.1
    endpoint = JSONEndpoint(
        server.url + "/v1/embeddings",
        api_key=None,
        label="rerank API",
        setting="rag.rerank",
        timeout=TIMEOUT,
        max_retries=1,
    )
    started = time.monotonic()
    with pytest.raises(RerankerError, match="no complete answer"):
        endpoint.post({"input": ["x"], "model": "m"})
    took = time.monotonic() - started
    assert took < 2 * TIMEOUT + SLACK, took
    assert len(server.requests) == 2
