"""Fake embedding servers on 127.0.0.1 speaking the OpenAI and Gemini REST protocols.

The real SDKs talk to these over real HTTP; nothing in the SDKs is mocked. Vectors are derived
from the text (``fake_vector``), so a test can tell which vector belongs to which input.
Failures are scripted: ``server.script = [(429, {"Retry-After": "2"}), None, ...]`` answers the
next requests with those statuses (None: a normal answer); ``server.always = 500`` fails every
request; ``server.stalls = [2.0]`` makes the next answer late (for timeouts);
``server.hang = True`` never answers (until the server stops); ``server.trickle = 0.3``
sends every answer one byte at a time, that many seconds apart, status line included. Each
request is recorded in ``server.requests`` as ``(path, headers, body)``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def fake_vector(text: str, dim: int = 8) -> list[float]:
    """A deterministic vector for ``text``: float32-exact numbers from its SHA-256."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    # Multiples of 1/256 are exact in float32, so base64 round trips compare equal.
    return [(digest[i % len(digest)] - 128) / 256.0 + i for i in range(dim)]


ERROR_BODIES = {
    400: "Invalid request",
    401: "Incorrect API key provided",
    403: "You are not allowed to use this model",
    404: "The model does not exist",
    429: "Rate limit reached",
    500: "The server had an error",
    503: "Service unavailable",
}


class FakeServer:
    """A threaded HTTP server answering both providers' embedding endpoints."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.script: list[tuple[int, dict[str, str]] | int | None] = []
        self.always: int | None = None
        self.shuffle = False
        self.stalls: list[float] = []  # seconds to wait before answering the next requests
        self.echo_key_in_errors = False
        self.error_code: str | None = None  # OpenAI's error.code, e.g. "insufficient_quota"
        self.force_float = False  # answer JSON floats even when base64 is asked for
        self.hang = False  # accept the request, never answer
        self.trickle: float | None = None  # seconds between the bytes of each answer
        self._stopped = threading.Event()
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.handle_error = self._handle_error  # type: ignore[method-assign]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def _handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (deadline tests) closes its socket mid-answer: not an error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        ThreadingHTTPServer.handle_error(self._httpd, request, client_address)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # releases hanging and trickling handlers
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inputs(self) -> list[list[str]]:
        """The texts of each recorded request, whichever protocol it used."""
        out = []
        for _path, _headers, body in self.requests:
            if "input" in body:
                value = body["input"]
                out.append([value] if isinstance(value, str) else list(value))
            else:
                out.append([r["content"]["parts"][0]["text"] for r in body.get("requests", [])])
        return out

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> bool:
        """A subclass's own routes: answer through ``handler`` and return True, or False for a
        404. Recording, stalls and scripted failures have happened already."""
        return False

    def _next_failure(self) -> tuple[int, dict[str, str]] | None:
        with self._lock:
            if self.always is not None:
                return self.always, {}
            if self.script:
                item = self.script.pop(0)
                if item is None:
                    return None
                if isinstance(item, int):
                    return item, {}
                return item
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
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
                failure = server._next_failure()
                if failure is not None:
                    status, extra = failure
                    message = ERROR_BODIES.get(status, "error")
                    if server.echo_key_in_errors:
                        message += f" (key {self._key(headers)})"
                    self._send(status, self._error(status, message), extra)
                    return
                path = self.path.split("?", 1)[0]
                if path.endswith("/embeddings"):
                    self._openai(body)
                elif path.endswith(":batchEmbedContents"):
                    self._gemini(body)
                elif not server.answer(self, path, body):
                    self._send(404, self._error(404, f"no route {path}"))

            def _key(self, headers: dict[str, str]) -> str:
                auth = headers.get("authorization", "")
                return auth.removeprefix("Bearer ") or headers.get("x-goog-api-key", "")

            def _error(self, status: int, message: str) -> dict[str, Any]:
                if "batchEmbedContents" in self.path or "enerateContent" in self.path:
                    return {"error": {"code": status, "message": message, "status": "ERROR"}}
                return {"error": {"message": message, "type": "error", "code": server.error_code}}

            def _openai(self, body: dict[str, Any]) -> None:
                inputs = body.get("input")
                inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                if not inputs or any(t == "" for t in inputs):
                    # the real API rejects empty strings
                    self._send(400, self._error(400, "'$.input' is invalid"))
                    return
                dim = int(body.get("dimensions") or server.dim)
                data = []
                for i, text in enumerate(inputs):
                    vec = fake_vector(text, dim)
                    if body.get("encoding_format") == "base64" and not server.force_float:
                        emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode()
                    else:
                        emb = vec
                    data.append({"object": "embedding", "index": i, "embedding": emb})
                if server.shuffle:
                    random.Random(len(inputs)).shuffle(data)
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model"),
                        "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
                    },
                )

            def _gemini(self, body: dict[str, Any]) -> None:
                embeddings = []
                for req in body.get("requests", []):
                    text = req["content"]["parts"][0]["text"]
                    dim = int(req.get("outputDimensionality") or server.dim)
                    embeddings.append({"values": fake_vector(text, dim)})
                self._send(200, {"embeddings": embeddings})

            def _send(self, status: int, payload: Any, extra: dict[str, str] | None = None):
                data = json.dumps(payload).encode()
                if server.trickle:
                    self._trickle(status, data, extra)
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, status: int, data: bytes, extra: dict[str, str] | None) -> None:
                head = [f"HTTP/1.1 {status} OK", "Content-Type: application/json"]
                head.append(f"Content-Length: {len(data)}")
                head += [f"{k}: {v}" for k, v in (extra or {}).items()]
                raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
                for i in range(len(raw)):
                    if server._stopped.wait(server.trickle):
                        return
                    try:
                        self.wfile.write(raw[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return

        return Handler


PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "BASE_URL",
    "OPENAI_EMBED_MODEL",
    "EMBEDDING_MODEL",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "EMBEDDING_BASE_URL",
    "GEMINI_EMBED_MODEL",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "KB_CONFIG",
)


def clean_env(monkeypatch: Any, tmp_path: Any) -> None:
    """No provider variables and no config file from the developer's machine."""
    from kbcli.config.lookup import reset_config_cache

    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    reset_config_cache()


class EchoEmbedder:
    """A user's own embedder class, selected by its dotted path in tests."""

    provider = "echo"

    def __init__(self, model: str = "echo-1") -> None:
        self.model = model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(len(text))]


class PlainStore:
    """A user's own store class with only the reference methods, selected by its dotted path
    (``store.backend``); its other ``store`` keys arrive as keyword arguments."""

    def __init__(self, **settings: Any) -> None:
        from kbcli import InMemoryStore

        self.settings = settings
        self.inner = InMemoryStore()

    def add(self, docs: list, embeddings: list | None = None) -> list[str]:
        return self.inner.add(docs, embeddings)

    def search(self, query_vec: list[float], k: int = 5, filter: dict | None = None) -> list:
        return self.inner.search(query_vec, k, filter)

    def delete(self, ids: list[str]) -> bool:
        return self.inner.delete(ids)
