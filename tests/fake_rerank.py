"""A fake rerank + chat server on 127.0.0.1 for the second-stage tests.

Speaks ``POST …/rerank`` (``{model, query, documents, top_n}`` -> ``{results: [{index,
relevance_score}]}``) and ``POST …/chat/completions`` (OpenAI shape, with ``logprobs`` when
asked). Relevance is word overlap, so a test knows the right order: the share of the query's
words found in the text. Failures are scripted as in :mod:`fake_providers` (``script``,
``always``, ``echo_key_in_errors``); requests are recorded in ``requests``.

Chat answers: a pointwise yes/no prompt gets "yes" when the passage shares a query word (with
``top_logprobs`` P(yes) = the overlap share, unless ``logprobs_supported`` is False); a
listwise prompt gets the numbers of the overlapping passages, best first; a HyDE prompt gets
``hyde_answer``; an expansion prompt gets ``expansions`` one per line.
"""

from __future__ import annotations

import json
import math
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_providers import ERROR_BODIES, FakeServer


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def overlap(query: str, text: str) -> float:
    """Share of the query's words that ``text`` contains (0..1)."""
    q = words(query)
    return len(q & words(text)) / len(q) if q else 0.0


class FakeRerankServer(FakeServer):
    """Rerank and chat endpoints (see module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.hyde_answer = "A hypothetical passage."
        self.expansions = ["first phrasing", "second phrasing", "third phrasing"]
        self.logprobs_supported = True

    def bodies(self, suffix: str) -> list[dict[str, Any]]:
        return [body for path, _h, body in self.requests if path.endswith(suffix)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append((self.path, headers, body))
                    stall = server.stalls.pop(0) if server.stalls else 0.0
                if stall:
                    time.sleep(stall)
                failure = server._next_failure()
                if failure is not None:
                    status, extra = failure
                    message = ERROR_BODIES.get(status, "error")
                    if server.echo_key_in_errors:
                        message += f" (key {headers.get('authorization', '')})"
                    self._send(status, {"error": {"message": message}}, extra)
                    return
                if self.path.endswith("/rerank"):
                    self._rerank(body)
                elif self.path.endswith("/chat/completions"):
                    self._chat(body)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def _rerank(self, body: dict[str, Any]) -> None:
                documents = body["documents"]
                scores = [overlap(body["query"], d) for d in documents]
                order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
                top_n = body.get("top_n") or len(documents)
                results = [{"index": i, "relevance_score": scores[i]} for i in order[:top_n]]
                self._send(200, {"id": "r1", "results": results})

            def _chat(self, body: dict[str, Any]) -> None:
                prompt = body["messages"][-1]["content"]
                logprobs = None
                if "Answer yes or no" in prompt:
                    query = prompt.split("Query: ", 1)[1].split("\n", 1)[0]
                    passage = prompt.split("Passage:\n", 1)[1].rsplit("\n\nDoes", 1)[0]
                    share = overlap(query, passage)
                    text = "yes" if share > 0 else "no"
                    if body.get("logprobs") and server.logprobs_supported:
                        p = min(max(share, 1e-6), 1 - 1e-6)
                        top = [
                            {"token": "yes", "logprob": math.log(p)},
                            {"token": "no", "logprob": math.log(1 - p)},
                        ]
                        logprobs = {
                            "content": [{"token": text, "logprob": 0.0, "top_logprobs": top}]
                        }
                elif "List the numbers" in prompt:
                    query = prompt.split("Query: ", 1)[1].split("\n", 1)[0]
                    passages = re.findall(r"^\[(\d+)\] (.*)$", prompt, flags=re.M)
                    scored = [(overlap(query, t), int(n)) for n, t in passages]
                    ranked = [n for s, n in sorted(scored, key=lambda x: (-x[0], x[1])) if s > 0]
                    text = " > ".join(f"[{n}]" for n in ranked) or "none"
                elif "answers the question" in prompt:
                    text = server.hyde_answer
                elif "different search queries" in prompt:
                    text = "\n".join(server.expansions)
                else:
                    text = "?"
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
                if logprobs is not None:
                    choice["logprobs"] = logprobs
                self._send(200, {"id": "c1", "object": "chat.completion", "choices": [choice]})

            def _send(self, status: int, payload: Any, extra: dict[str, str] | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler


class OverlapReranker:
    """A user's own reranker, selected in jianmu.yaml by ``fake_rerank:OverlapReranker``: scores
    each hit by word overlap with the query."""

    instances = 0

    def __init__(self) -> None:
        OverlapReranker.instances += 1

    def rerank(self, query: str, results: list) -> list:
        from kbcli import SearchResult

        scored = [
            SearchResult(r.document, overlap(query, r.document.text), r.explain) for r in results
        ]
        return sorted(scored, key=lambda r: -r.score)
