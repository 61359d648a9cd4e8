"""examples/agent_demo.py against a fake OpenAI-compatible chat server: the model first asks
for one knowledge_search call, then answers from what the tool returned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_tool_chat import FakeChatServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_agent_demo_answers_with_citations(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OPENAI_API_KEY": "sk-fake",
        "HOME": os.environ["HOME"],
    }
    with FakeChatServer() as chat:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "agent_demo.py"),
                "--path",
                str(ROOT / "examples" / "docs"),
                "--ext",
                ".md,.txt",
                "--base-url",
                chat.url,
                "--model",
                "fake-model",
                "--db",
                str(tmp_path / "demo.db"),
                "How do I reset my password?",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    answer, sources = done.stdout.split("\nSources:\n")
    assert answer.startswith("From the handbook [1]: ") and "Reset password" in answer
    cited = sources.strip().splitlines()
    assert len(cited) == 2 and cited[0].startswith("[1] source: ")
    assert "account.md" in cited[0] and "; id: " in cited[0]
    assert "Indexed " in done.stderr
    # Exactly two model calls: the tool request, then the answer from the tool's result.
    assert len(chat.requests) == 2
    first, second = chat.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["knowledge_search"]
    assert first["tools"][0]["function"]["parameters"]["properties"]["k"]["maximum"] == 50
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert tool_message["content"].startswith("1. ") and "account.md" in tool_message["content"]
