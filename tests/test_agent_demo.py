"""examples/agent_demo.py against a fake OpenAI-compatible chat server: the model first asks
for one knowledge_search call, then answers from what the tool returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class FakeChatServer:
    """``POST /v1/chat/completions``: without a tool result in the conversation it asks for
    ``knowledge_search``; with one it answers with the tool's first hit, cited as [1]."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "knowledge_search",
                            "arguments": json.dumps({"query": "reset password", "k": 2}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        else:
            first = tool_results[-1]["content"].splitlines()[0]
            passage = first.split(". ", 1)[1].rsplit(" (", 1)[0]
            message = {"role": "assistant", "content": f"From the handbook [1]: {passage}"}
            finish = "stop"
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                if not self.path.endswith("/chat/completions"):
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(server.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


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
