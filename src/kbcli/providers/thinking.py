"""The ``<think>…</think>`` block reasoning models (served by Ollama, vLLM or llama.cpp) put
before their answer: left out of what ``kb ask`` shows, whether the answer arrives whole or in
pieces."""

from __future__ import annotations


class ThinkFilter:
    """Drops a leading ``<think>…</think>`` block from text that arrives in pieces."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self._held = ""
        self._state = "start"  # start -> thinking -> text, or start -> text

    def feed(self, piece: str) -> str:
        """The part of ``piece`` that belongs to the answer (held back while undecided)."""
        if self._state == "text":
            return piece
        self._held += piece
        if self._state == "start":
            head = self._held.lstrip()
            if len(head) < len(self.OPEN) and self.OPEN.startswith(head):
                return ""  # may still become "<think>"
            if not head.startswith(self.OPEN):
                self._state = "text"
                out, self._held = self._held, ""
                return out
            self._state = "thinking"
        end = self._held.find(self.CLOSE)
        if end < 0:
            return ""
        out = self._held[end + len(self.CLOSE) :].lstrip()
        self._held, self._state = "", "text"
        return out

    def close(self) -> str:
        """What is still held at the end (a reply that never left its ``<think>`` block has
        no answer)."""
        out = self._held if self._state == "start" else ""
        self._held = ""
        return out


def strip_thinking(text: str) -> str:
    """``text`` without a leading ``<think>…</think>`` block."""
    think = ThinkFilter()
    return think.feed(text) + think.close()
