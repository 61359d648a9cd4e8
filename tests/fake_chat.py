"""A fake chat server on 127.0.0.1 speaking the OpenAI chat-completions protocol (plain and SSE
streamed) and Gemini's ``generateContent`` / ``streamGenerateContent?alt=sse``.

The real ``openai`` and ``google-genai`` SDKs talk to it over real HTTP; nothing in them is
mocked. The answer is ``server.reply``: a string, a function of the request body, or None for
the default, which cites the first passage of the prompt: ``"<its first words> [1]."``.
Streamed answers are sent a word at a time (``stream_gap`` seconds apart, from event
``gap_from`` on). Failures are
scripted as in :mod:`fake_providers` (``script``, ``always``, ``stalls``, ``hang``,
``trickle``, ``echo_key_in_errors``); ``malformed`` answers 200 with ``"html"`` (not JSON),
``"no_choices"`` (JSON without choices) or ``"empty"`` (an empty answer); ``break_after``
ends a stream after that many events without finishing it. Each request is recorded in
``server.requests`` as ``(path, headers, body)``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_providers import ERROR_BODIES, FakeServer


def prompt_text(body: dict[str, Any]) -> str:
    """Every message of a request (either protocol) as one text."""
    if "messages" in body:
        return "\n".join(str(m.get("content", "")) for m in body["messages"])
    parts = [p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", [])]
    system = body.get("systemInstruction", {}).get("parts", [])
    return "\n".join([*(p.get("text", "") for p in system), *parts])


def default_reply(body: dict[str, Any]) -> str:
    """The first words of passage [1] of the prompt, citing it."""
    found = re.search(r"^\[1\][^\n]*\n(.+)$", prompt_text(body), re.MULTILINE)
    if not found:
        return "The sources do not answer this."
    words = found.group(1).split()[:8]
    return " ".join(words).rstrip(".") + " [1]."


class FakeChatServer(FakeServer):
    """Chat endpoints of both protocols (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.reply: str | Callable[[dict[str, Any]], str] | None = None
        self.model_name = "fake-chat-1"
        self.stream_gap = 0.0
        self.gap_from = 1  # the first stream event the gap comes before
        self.malformed: str | None = None
        self.break_after: int | None = None
        self.finish_reason = "stop"

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of the chat requests received."""
        return [body for _path, _headers, body in self.requests]

    def answer_for(self, body: dict[str, Any]) -> str:
        if self.malformed == "empty":
            return ""
        if callable(self.reply):
            return self.reply(body)
        return self.reply if self.reply is not None else default_reply(body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append((self.path, headers, body))
                    stall = server.stalls.pop(0) if server.stalls else 0.0
                if stall:
                    time.sleep(stall)
                if server.hang:
                    server._stopped.wait()
                    return
                gemini = ":generateContent" in self.path or ":streamGenerateContent" in self.path
                failure = server._next_failure()
                if failure is not None:
                    status, extra = failure
                    message = ERROR_BODIES.get(status, "error")
                    if server.echo_key_in_errors:
                        key = headers.get("authorization", "").removeprefix("Bearer ")
                        message += f" (key {key or headers.get('x-goog-api-key', '')})"
                    if gemini:
                        error = {"code": status, "message": message, "status": "ERROR"}
                    else:
                        error = {"message": message, "type": "error", "code": server.error_code}
                    self._json(status, {"error": error}, extra)
                    return
                if server.malformed == "html":
                    self._raw(200, b"<html><body>It works!</body></html>", "text/html")
                    return
                path = self.path.split("?", 1)[0]
                if path.endswith("/chat/completions"):
                    self._openai(body)
                elif gemini:
                    self._gemini(body, stream=":streamGenerateContent" in self.path)
                else:
                    self._json(404, {"error": {"message": f"no route {path}"}})

            # --- OpenAI ------------------------------------------------------------------

            def _openai(self, body: dict[str, Any]) -> None:
                text = server.answer_for(body)
                if server.malformed == "no_choices":
                    self._json(200, {"id": "x", "object": "chat.completion"})
                    return
                if body.get("stream"):
                    events = [
                        self._chunk({"role": "assistant", "content": ""}, None),
                        *(self._chunk({"content": piece}, None) for piece in _pieces(text)),
                        self._chunk({}, server.finish_reason),
                    ]
                    self._sse([json.dumps(e) for e in events] + ["[DONE]"])
                    return
                self._json(
                    200,
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 1,
                        "model": server.model_name,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": server.finish_reason,
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

            @staticmethod
            def _chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
                return {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": server.model_name,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }

            # --- Gemini ------------------------------------------------------------------

            def _gemini(self, body: dict[str, Any], stream: bool) -> None:
                text = server.answer_for(body)
                finish = "STOP" if server.finish_reason == "stop" else "MAX_TOKENS"

                def response(piece: str, last: bool) -> dict[str, Any]:
                    candidate: dict[str, Any] = {
                        "content": {"role": "model", "parts": [{"text": piece}]},
                        "index": 0,
                    }
                    if last:
                        candidate["finishReason"] = finish
                    return {"candidates": [candidate], "modelVersion": server.model_name}

                if server.malformed == "no_choices":
                    self._json(200, {"modelVersion": server.model_name})
                    return
                if not stream:
                    self._json(200, response(text, True))
                    return
                pieces = _pieces(text) or [""]
                events = [response(p, i == len(pieces) - 1) for i, p in enumerate(pieces)]
                self._sse([json.dumps(e) for e in events])

            # --- sending -----------------------------------------------------------------

            def _sse(self, events: list[str]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for n, data in enumerate(events):
                    if server.break_after is not None and n >= server.break_after:
                        return  # the connection closes mid-stream
                    if (
                        n >= server.gap_from
                        and server.stream_gap
                        and server._stopped.wait(server.stream_gap)
                    ):
                        return
                    try:
                        self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()
                    except OSError:
                        return

            def _json(self, status: int, payload: Any, extra: dict[str, str] | None = None):
                data = json.dumps(payload).encode()
                if server.trickle:
                    head = [f"HTTP/1.1 {status} OK", "Content-Type: application/json"]
                    head.append(f"Content-Length: {len(data)}")
                    raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
                    for i in range(len(raw)):
                        if server._stopped.wait(server.trickle):
                            return
                        try:
                            self.wfile.write(raw[i : i + 1])
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                self._raw(status, data, "application/json", extra)

            def _raw(
                self,
                status: int,
                data: bytes,
                kind: str,
                extra: dict[str, str] | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _pieces(text: str) -> list[str]:
    """``text`` as streamed: a word (with its following space) at a time; CJK a few characters."""
    return (
        re.findall(r"\S+\s*|\s+", text)
        if " " in text
        else [text[i : i + 3] for i in range(0, len(text), 3)]
    )
