"""A fake OpenAI-compatible chat server that asks for one ``knowledge_search`` call, then answers
from the tool's result (e2e/test_agent_demo.py, e2e/test_user_scripts.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
        return f"http://{host!s}:{port}/v1"

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
