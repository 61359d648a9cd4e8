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

Hostile answers (issue 37): ``forever`` streams words without end (``stream_gap`` apart) until
the client goes; ``huge`` (bytes) answers that much text, whole (one JSON body, written in
pieces, never held) or streamed (64 KB events); ``gzip`` sends the huge body gzip-compressed
(a few MB that inflate to ``huge``), whatever the client asked for. ``bytes_sent`` counts what
the hostile answers wrote before the client stopped reading.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_providers import FakeServer


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
        self.forever = False
        self.huge: int | None = None
        self.gzip = False
        self.bytes_sent = 0

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of the chat requests received."""
        return [body for _path, _headers, body in self.requests]

    def answer_for(self, body: dict[str, Any]) -> str:
        if self.malformed == "empty":
            return ""
        if callable(self.reply):
            return self.reply(body)
        return self.reply if self.reply is not None else default_reply(body)

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> bool:
        """The chat routes (recording, stalls and scripted failures are FakeServer's)."""
        gemini = ":generateContent" in path or ":streamGenerateContent" in path
        if not gemini and not path.endswith("/chat/completions"):
            return False
        stream = bool(body.get("stream")) or ":streamGenerateContent" in path
        if self.malformed == "html":
            _raw(handler, 200, b"<html><body>It works!</body></html>", "text/html")
        elif self.forever or self.huge is not None:
            self._hostile(handler, gemini, stream)
        elif gemini:
            self._gemini(handler, body, stream=":streamGenerateContent" in path)
        else:
            self._openai(handler, body)
        return True

    def _openai(self, handler: Any, body: dict[str, Any]) -> None:
        text = self.answer_for(body)
        if self.malformed == "no_choices":
            handler._send(200, {"id": "x", "object": "chat.completion"})
            return
        if body.get("stream"):
            events = [
                self._chunk({"role": "assistant", "content": ""}, None),
                *(self._chunk({"content": piece}, None) for piece in _pieces(text)),
                self._chunk({}, self.finish_reason),
            ]
            self._sse(handler, [json.dumps(e) for e in events] + ["[DONE]"])
            return
        message = {"role": "assistant", "content": text}
        handler._send(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": self.model_name,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": self.model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _gemini(self, handler: Any, body: dict[str, Any], stream: bool) -> None:
        text = self.answer_for(body)
        finish = "STOP" if self.finish_reason == "stop" else "MAX_TOKENS"

        def response(piece: str, last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {
                "content": {"role": "model", "parts": [{"text": piece}]},
                "index": 0,
            }
            if last:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "modelVersion": self.model_name}

        if self.malformed == "no_choices":
            handler._send(200, {"modelVersion": self.model_name})
        elif not stream:
            handler._send(200, response(text, True))
        else:
            pieces = _pieces(text) or [""]
            events = [response(p, i == len(pieces) - 1) for i, p in enumerate(pieces)]
            self._sse(handler, [json.dumps(e) for e in events])

    def _sse(self, handler: Any, events: list[str]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        for n, data in enumerate(events):
            if self.break_after is not None and n >= self.break_after:
                return  # the connection closes mid-stream
            if n >= self.gap_from and self.stream_gap and self._stopped.wait(self.stream_gap):
                return
            try:
                handler.wfile.write(f"data: {data}\n\n".encode())
                handler.wfile.flush()
            except OSError:
                return

    # --- hostile answers ----------------------------------------------------------------

    def _hostile(self, handler: Any, gemini: bool, stream: bool) -> None:
        if stream:
            self._endless_or_huge_stream(handler, gemini)
        else:
            self._huge_body(handler, gemini)

    def _envelope(self, gemini: bool, delta: bool) -> tuple[bytes, bytes]:
        """The JSON before and after an answer's text (which goes in between, escaped)."""
        marker = "\u0000MARK\u0000"
        if gemini:
            data: dict[str, Any] = {
                "candidates": [{"content": {"role": "model", "parts": [{"text": marker}]}}],
                "modelVersion": self.model_name,
            }
        elif delta:
            data = self._chunk({"content": marker}, None)
        else:
            data = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": self.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": marker},
                        "finish_reason": "stop",
                    }
                ],
            }
        head, tail = json.dumps(data).split(json.dumps(marker)[1:-1])
        return head.encode(), tail.encode()

    def _write(self, handler: Any, data: bytes) -> bool:
        try:
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError:
            return False
        self.bytes_sent += len(data)
        return not self._stopped.is_set()

    def _huge_body(self, handler: Any, gemini: bool) -> None:
        import zlib

        head, tail = self._envelope(gemini, delta=False)
        size = self.huge or 0
        block = (b"All work and no play makes Jack a dull boy. " * 1500)[: 1 << 16]
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if self.gzip:
            handler.send_header("Content-Encoding", "gzip")
        else:
            handler.send_header("Content-Length", str(len(head) + size + len(tail)))
        handler.end_headers()
        packer = zlib.compressobj(9, zlib.DEFLATED, 31) if self.gzip else None

        def out(data: bytes) -> bool:
            return self._write(handler, packer.compress(data) if packer else data)

        if not out(head):
            return
        for start in range(0, size, len(block)):
            if not out(block[: min(len(block), size - start)]):
                return
        if out(tail) and packer is not None:
            self._write(handler, packer.flush())

    def _endless_or_huge_stream(self, handler: Any, gemini: bool) -> None:
        head, tail = self._envelope(gemini, delta=True)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        piece = b"more words " if self.forever else b"x" * (1 << 16)
        sent = 0
        while self.forever or sent < (self.huge or 0):
            if self.stream_gap and self._stopped.wait(self.stream_gap):
                return
            if not self._write(handler, b"data: " + head + piece + tail + b"\n\n"):
                return
            sent += len(piece)
        finish = {"finish_reason": "stop"} if not gemini else {"finishReason": "STOP"}
        end = self._chunk({}, "stop") if not gemini else {"candidates": [{**finish}]}
        self._write(handler, f"data: {json.dumps(end)}\n\n".encode())


def _raw(handler: Any, status: int, data: bytes, kind: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _pieces(text: str) -> list[str]:
    """``text`` as streamed: a word (with its following space) at a time; CJK a few characters."""
    return (
        re.findall(r"\S+\s*|\s+", text)
        if " " in text
        else [text[i : i + 3] for i in range(0, len(text), 3)]
    )


class EchoChat:
    """A user's own answer model (``rag.answer.provider: fake_chat:EchoChat``): answers with
    the first line of passage [1], citing it, without any server."""

    def __init__(self, model: str = "echo") -> None:
        self.model = model

    @classmethod
    def from_config(cls, settings: Any, model: str | None = None) -> EchoChat:
        return cls(model or settings.model or "echo")

    def complete(self, messages, *, max_tokens=800, temperature=0.0, on_text=None):
        from kbcli.providers.chat import Completion

        text = default_reply({"messages": messages})
        if on_text is not None:
            on_text(text)
        return Completion(text, self.model, "stop")


@contextmanager
def huge_error_server() -> Iterator[tuple[str, list[int]]]:
    """A server answering every POST ``500`` with a 400 MB error body, written in 64 KB blocks
    until the client goes: yields its base URL (``.../v1``) and ``[bytes written]``."""
    sent = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(400 << 20))
            self.end_headers()
            block = (b'{"error": {"message": "' + b"x" * (1 << 16))[: 1 << 16]
            try:
                for _ in range(400 << 4):
                    self.wfile.write(block)
                    sent[0] += 1 << 16
            except OSError:
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", sent
    finally:
        httpd.shutdown()
        httpd.server_close()
