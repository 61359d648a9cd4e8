"""Chat completions through the providers' own SDKs: the model that writes ``kb ask`` answers.

Two providers share one request path (:class:`ChatModel`): any OpenAI-compatible chat endpoint
through the ``openai`` SDK (:class:`OpenAIChat`: OpenAI, llama.cpp's ``llama-server``, Ollama,
vLLM, LM Studio, DeepSeek ...) and Gemini through ``google-genai`` (:class:`GeminiChat`). What
they share with the embedders is imported, not copied: the retry policy of
:mod:`kbcli.providers.retry` (the SDKs' own retries are off), each SDK's error classification
(``classify_error`` in :mod:`kbcli.embedders.openai` and :mod:`kbcli.embedders.gemini`), key
lookup and redaction (:mod:`kbcli.embedders.provider_settings`) and the one-line messages of
:func:`kbcli.providers.http.describe_failure`. Keys are never part of a message.

* **Not streamed**: an attempt has ``timeout`` seconds from sending to the last byte; 408, 429,
  5xx, timeouts and connection errors are retried ``max_retries`` times with backoff.
* **Streamed** (``on_text``): an attempt lasts until the first piece of text arrives (at most
  ``timeout`` seconds, retried like any request). After that nothing is retried (the text is
  already shown): a failure, or a pause of more than ``timeout`` seconds between two pieces,
  ends the answer with an error.
* **The whole answer** ends within ``deadline`` seconds (``rag.answer.deadline``: every
  attempt, wait and streamed piece; a server that streams forever is cut there) and holds at
  most ``max_answer_mb`` of text (``rag.answer.max_answer_mb``, a ``<think>`` block included),
  counted while the reply is read: a body (or one line of a stream) is read up to four times
  that plus 1 MB (:func:`kbcli.providers.replies.reply_cap_hook`), so memory stays bounded
  whatever the server sends. Past either the answer ends with an :class:`~kbcli.errors.AnswerError`.
* A ``<think>…</think>`` block at the start of the answer (reasoning models served by Ollama,
  vLLM or llama.cpp) is left out.
* An answer without text (a provider's safety filter, ``max_tokens`` spent before any text)
  and a reply that is not a chat completion are :class:`~kbcli.errors.AnswerError`\\ s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kbcli.config.registry import CHAT_MODELS, load_class
from kbcli.config.schema import AnswerConfig
from kbcli.embedders.gemini import classify_error as gemini_failure
from kbcli.embedders.openai import classify_error as openai_failure
from kbcli.embedders.provider_settings import find_api_key, first_env, host_of, redact, short
from kbcli.errors import AnswerError, require
from kbcli.protocols import ChatModelProtocol
from kbcli.providers.http import TOO_LARGE, describe_failure, last_attempt, past_deadline
from kbcli.providers.replies import UnreadableReply, megabytes, reply_cap_hook, too_large_in
from kbcli.providers.retry import (
    AttemptTimeout,
    EmbedderRequestError,
    Failure,
    RetryPolicy,
    call_with_retries,
    relay,
)
from kbcli.providers.thinking import ThinkFilter, strip_thinking

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}
T = TypeVar("T")
#: ``(text, finish_reason, model)``: one piece of a completion, as a provider reads it.
Piece = tuple[str, str | None, str | None]
KEYLESS = "no-key"  # what the SDKs are given for a local server that needs no key


@dataclass(frozen=True)
class Completion:
    """One answer: its text (without a leading ``<think>`` block), the model that wrote it
    and why it stopped (``stop``, ``length`` ...; None when the server does not say)."""

    text: str
    model: str
    finish_reason: str | None = None


class _Malformed(Exception):
    """The server answered 2xx with something that is not a chat completion."""


class _TooLong(Exception):
    """The answer's text passed ``max_answer_mb`` (raised while it is read)."""


TOO_LONG = "answer too long"  # a Failure's reason
REPLY_FACTOR = 4  # a reply's body (a stream's line) is read up to this x the answer's cap ...
REPLY_SLACK = 1 << 20  # ... plus this: JSON escapes and the envelope around the text


class ChatModel:
    """One chat model behind an SDK, with kbcli's retries, deadlines and messages.

    Subclasses set ``provider``, ``default_model`` and ``key_env`` and implement
    ``_make_client``, ``_create`` (one completion), ``_stream`` (``(text, finish_reason,
    model)`` pieces) and ``_classify`` (an SDK exception as a
    :class:`~kbcli.providers.retry.Failure`).
    ``api_key`` is the key itself; else the variable ``api_key_env`` names; else the
    provider's variables. ``label`` and ``setting`` name the model and its configuration
    section in messages. ``deadline`` (seconds) and ``max_answer_mb`` bound each answer (see
    the module docstring); a client made by ``_make_client`` reads its replies through
    ``self._reply_hook`` and asks for uncompressed replies.
    """

    provider = ""
    default_model = ""
    key_env: tuple[str, ...] = ()
    default_host = ""
    endpoint = "a chat endpoint"  # for messages: what base_url must point at

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        label: str = "answer model",
        setting: str = "rag.answer",
        deadline: float = 300.0,
        max_answer_mb: float = 1.0,
    ) -> None:
        self.model = model or self.default_model
        self.label = label
        self.setting = setting
        self.key_env = (api_key_env,) if api_key_env else type(self).key_env
        key, source = find_api_key(api_key, self.key_env)
        self.base_url = base_url or self._base_url_from_env()
        # A variable named in the configuration must be set; otherwise a server of the user's
        # own (not the provider's) may do without a key.
        if not key and (api_key_env or not self._keyless()):
            raise AnswerError(self._no_key_message(api_key_env))
        self._api_key = key
        self.key_source = source
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        for name, value in (("timeout", self.timeout), ("deadline", self.deadline)):
            if not value > 0:
                raise AnswerError(f"{setting}.{name} must be a positive number of seconds")
        if not max_answer_mb > 0:
            raise AnswerError(f"{setting}.max_answer_mb must be a positive number")
        self.max_answer_mb = float(max_answer_mb)
        self.max_answer_bytes = max(1, int(max_answer_mb * (1 << 20)))
        self.reply_limit = REPLY_FACTOR * self.max_answer_bytes + REPLY_SLACK
        self._reply_hook = reply_cap_hook(self.reply_limit)
        self.retry_policy = RetryPolicy(
            max_retries=max(0, int(max_retries)), timeout=self.timeout, budget=self.deadline
        )
        self._client = self._make_client()

    @classmethod
    def from_config(cls, settings: AnswerConfig, model: str | None = None) -> ChatModel:
        """Build from ``rag.answer`` (``model`` overrides ``settings.model``)."""
        return cls(
            model or settings.model,
            settings.base_url,
            api_key_env=settings.api_key_env,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            deadline=settings.deadline,
            max_answer_mb=settings.max_answer_mb,
        )

    @property
    def host(self) -> str:
        """Host (and port) of the server, for messages."""
        return host_of(self.base_url or self.default_host)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, host={self.host!r})"

    # --- what a provider supplies ---------------------------------------------------------

    def _base_url_from_env(self) -> str | None:
        return None

    def _keyless(self) -> bool:
        """True when no key is needed: a server of the user's own at ``base_url``."""
        return bool(self.base_url) and self.host != host_of(self.default_host)

    def _no_key_message(self, api_key_env: str | None) -> str:
        if api_key_env:
            return (
                f"No API key for the {self.provider} answer model: {self.setting}.api_key_env "
                f"names {api_key_env}, which is not set"
            )
        return (
            f"No API key for the {self.provider} answer model: set "
            f"{'/'.join(self.key_env)} (or name another variable in {self.setting}.api_key_env)"
        )

    def _make_client(self) -> Any:
        raise NotImplementedError

    def _create(self, messages: list[Message], max_tokens: int, temperature: float) -> Piece:
        """``(text, finish_reason, model)`` of one completion; raises ``_Malformed``."""
        raise NotImplementedError

    def _stream(
        self, messages: list[Message], max_tokens: int, temperature: float
    ) -> Iterator[Piece]:
        """``(text, finish_reason, model)`` pieces of a streamed completion."""
        raise NotImplementedError

    def _classify(self, exc: BaseException) -> Failure | None:
        raise NotImplementedError

    # --- the shared request path -----------------------------------------------------------

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 800,
        temperature: float = 0.0,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """The model's answer to ``messages``; with ``on_text`` the request is streamed and
        each piece of the answer is passed to it as it arrives."""
        if on_text is None:
            text, finish, served = self._retried(
                lambda: self._create(messages, max_tokens, temperature)
            )
            if len((text or "").encode("utf-8")) > self.max_answer_bytes:
                raise AnswerError(self._too_long())
            text = strip_thinking(text or "")
        else:
            text, finish, served = self._streamed(messages, max_tokens, temperature, on_text)
        if not text.strip():
            why = f" (finish reason {finish})" if finish else ""
            hint = (
                f": raise {self.setting}.max_tokens" if finish in ("length", "MAX_TOKENS") else ""
            )
            raise AnswerError(f"{self._where()} returned an empty answer{why}{hint}")
        return Completion(text, served or self.model, finish)

    def _where(self) -> str:
        return f"{self.label} {self.model} at {self.host}"

    def _too_long(self) -> str:
        cap = f"{self.setting}.max_answer_mb ({self.max_answer_mb:g} MB)"
        return (
            f"{self._where()} sent more than {cap} of answer: stopped reading it; lower "
            f"{self.setting}.max_tokens, or raise {self.setting}.max_answer_mb for answers "
            "that long"
        )

    def _past_deadline(self, what: str = "") -> str:
        return past_deadline(self._where(), self.setting, self.deadline, what)

    def _metered(self, pieces: Iterator[Piece]) -> Iterator[Piece]:
        """``pieces`` of a stream, counting their text (thinking included): ``_TooLong``
        once it passes ``max_answer_bytes``."""
        seen = 0
        for text, finish, model in pieces:
            seen += len((text or "").encode("utf-8"))
            if seen > self.max_answer_bytes:
                raise _TooLong
            yield text, finish, model

    def _retried(self, fn: Callable[[], T]) -> T:
        try:
            return call_with_retries(
                fn,
                policy=self.retry_policy,
                classify=self._classify_any,
                describe=self._describe,
                on_abandon=self._abandon,
            )
        except EmbedderRequestError as exc:
            raise AnswerError(str(exc)) from None

    def _streamed(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        on_text: Callable[[str], None],
    ) -> Piece:
        state: dict[str, Any] = {"finish": None, "model": None}

        def note(finish: str | None, model: str | None) -> None:
            state["finish"] = finish or state["finish"]
            state["model"] = model or state["model"]

        started = time.monotonic()

        def first_text() -> tuple[str, Iterator[Piece], ThinkFilter]:
            think = ThinkFilter()  # per attempt: a failed one may have stopped mid-thought
            pieces = self._metered(self._stream(messages, max_tokens, temperature))
            for text, finish, model in pieces:
                note(finish, model)
                shown = think.feed(text or "")
                if shown:
                    return shown, pieces, think
            return "", iter(()), think

        shown, rest, think = self._retried(first_text)
        parts = [shown]
        if shown:
            on_text(shown)
        # the rest is read in a worker thread, so the deadline holds even while a read waits
        left = self.deadline - (time.monotonic() - started)
        try:
            for text, finish, model in relay(rest, left, self._abandon):
                note(finish, model)
                piece = think.feed(text or "")
                if piece:
                    parts.append(piece)
                    on_text(piece)
        except AttemptTimeout:
            raise AnswerError(self._past_deadline("; it was still streaming")) from None
        except _TooLong:
            raise AnswerError(self._too_long()) from None
        except Exception as exc:  # noqa: BLE001 - classify decides what is ours
            failure = self._classify_any(exc)
            if failure is not None and failure.reason in (TOO_LARGE, TOO_LONG):
                raise AnswerError(self._describe(failure, 1)) from None
            if failure is None:
                raise
            detail = f": {failure.detail}" if failure.detail else ""
            what = f"status {failure.status}" if failure.status else failure.reason
            raise AnswerError(
                f"{self._where()} stopped in the middle of the answer ({what}){detail}"
            ) from None
        if state["finish"] is None:
            raise AnswerError(
                f"{self._where()} stopped in the middle of the answer (the stream ended without "
                "a finish reason)"
            )
        tail = think.close()
        if tail:
            parts.append(tail)
            on_text(tail)
        return "".join(parts), state["finish"], state["model"]

    def _classify_any(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, _TooLong):
            return Failure(False, None, TOO_LONG)
        too_large = too_large_in(exc)  # raised while the SDK read the reply
        if too_large is not None:
            return Failure(False, None, TOO_LARGE, None, megabytes(too_large.limit))
        if isinstance(exc, (_Malformed, UnreadableReply)):
            return Failure(
                False, None, "invalid response", None, short(redact(str(exc), self._api_key))
            )
        return self._classify(exc)

    def _describe(self, failure: Failure, attempts: int) -> str:
        if failure.reason == TOO_LONG:
            return self._too_long()
        if failure.reason == TOO_LARGE:
            cap = f"{self.setting}.max_answer_mb ({self.max_answer_mb:g} MB)"
            return (
                f"{self._where()} sent a reply of more than {failure.detail}, over what {cap} "
                f"lets kb read: stopped reading it; lower {self.setting}.max_tokens, or check "
                f"{self.setting}.base_url"
            )
        if failure.exhausted == "budget":
            return self._past_deadline(last_attempt(failure, attempts))
        if failure.reason == "invalid response" and failure.status is None:
            return (
                f"{self._where()} did not answer with a chat completion ({failure.detail}): is "
                f"{self.setting}.base_url {self.endpoint}?"
            )
        return describe_failure(
            failure,
            attempts,
            where=self._where(),
            setting=self.setting,
            key_env=self.key_env,
            has_key=bool(self._api_key),
            key_source=self.key_source,
            host=self.host,
        )

    def _abandon(self) -> None:
        """Replace the client after an attempt ran past its deadline, closing its sockets."""
        old, self._client = self._client, self._make_client()
        old.close()


class OpenAIChat(ChatModel):
    """Any OpenAI-compatible ``/chat/completions`` endpoint, through the ``openai`` SDK.

    With nothing configured, the key and the server come from ``OPENAI_API_KEY`` and
    ``OPENAI_BASE_URL`` as the SDK reads them, so a local llama.cpp, Ollama or vLLM server
    works with ``OPENAI_BASE_URL=http://localhost:8080/v1`` (no key needed for a server other
    than api.openai.com). The model defaults to ``gpt-4o-mini``.
    """

    provider = "openai"
    default_model = "gpt-4o-mini"
    key_env = ("OPENAI_API_KEY",)
    default_host = "https://api.openai.com/v1"
    endpoint = "an OpenAI-compatible endpoint (ending in /v1)"

    def _base_url_from_env(self) -> str | None:
        return first_env("OPENAI_BASE_URL")[0]

    def _no_key_message(self, api_key_env: str | None) -> str:
        return (
            f"{super()._no_key_message(api_key_env)}, or point OPENAI_BASE_URL or "
            f"{self.setting}.base_url at a local OpenAI-compatible server"
        )

    def _make_client(self) -> Any:
        openai = require("openai", feature="The openai answer model")
        self._openai = openai
        # max_retries=0: retries are ours (kbcli.providers.retry), bounded and testable.
        # Replies are read within bounds (the hook) and asked for uncompressed.
        http_client = openai.DefaultHttpxClient(
            event_hooks={"response": [self._reply_hook]},
            headers={"Accept-Encoding": "identity"},
        )
        return openai.OpenAI(
            api_key=self._api_key or KEYLESS,
            base_url=self.base_url or self.default_host,
            max_retries=0,
            timeout=self.timeout,
            http_client=http_client,
        )

    def _create(self, messages: list[Message], max_tokens: int, temperature: float) -> Piece:
        response = self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        try:
            choice = response.choices[0]
            text = choice.message.content
            if text is not None and not isinstance(text, str):
                raise TypeError
        except (AttributeError, IndexError, KeyError, TypeError):
            shown = short(response, 80) if isinstance(response, str) else "no choices"
            raise _Malformed(f"{shown}") from None
        return text or "", choice.finish_reason, getattr(response, "model", None) or None

    def _stream(
        self, messages: list[Message], max_tokens: int, temperature: float
    ) -> Iterator[Piece]:
        stream = self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
        )
        events = 0
        for chunk in stream:
            events += 1
            choices = getattr(chunk, "choices", None)
            if choices is None:
                raise _Malformed("a stream event without choices")
            if not choices:  # a usage-only event
                continue
            delta = getattr(choices[0], "delta", None)
            text = getattr(delta, "content", None) if delta is not None else None
            yield text or "", choices[0].finish_reason, getattr(chunk, "model", None) or None
        if not events:
            raise _Malformed("no stream events")

    def _classify(self, exc: BaseException) -> Failure | None:
        return openai_failure(self._openai, exc, api_key=self._api_key, timeout=self.timeout)


class GeminiChat(ChatModel):
    """Gemini's ``generateContent`` / ``streamGenerateContent`` through ``google-genai``.

    The key comes from ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY`` (or ``api_key_env``); the
    model defaults to ``gemini-2.5-flash``. The system message becomes the request's
    ``system_instruction``.
    """

    provider = "gemini"
    default_model = "gemini-2.5-flash"
    key_env = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
    default_host = "https://generativelanguage.googleapis.com"
    endpoint = "the Gemini API"

    def _make_client(self) -> Any:
        genai = require("google.genai", feature="The gemini answer model", package="google-genai")
        self._types = require("google.genai.types", package="google-genai")
        self._errors = require("google.genai.errors", package="google-genai")
        options = self._types.HttpOptions(
            base_url=self.base_url,
            timeout=max(1, int(self.timeout * 1000)),  # milliseconds
            # attempts=1: the SDK never retries; kbcli.providers.retry does.
            retry_options=self._types.HttpRetryOptions(attempts=1),
            # replies are read within bounds (the hook) and asked for uncompressed
            client_args={
                "event_hooks": {"response": [self._reply_hook]},
                "headers": {"Accept-Encoding": "identity"},
            },
        )
        return genai.Client(api_key=self._api_key or KEYLESS, vertexai=False, http_options=options)

    def _request(
        self, messages: list[Message], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        contents = [
            {
                "role": "model" if m["role"] == "assistant" else "user",
                "parts": [{"text": m["content"]}],
            }
            for m in messages
            if m["role"] != "system"
        ]
        config = self._types.GenerateContentConfig(
            system_instruction=system or None,
            max_output_tokens=max_tokens,
            temperature=temperature,
        )
        return {"model": self.model.removeprefix("models/"), "contents": contents, "config": config}

    @staticmethod
    def _text_of(response: Any) -> tuple[str, str | None]:
        candidates = getattr(response, "candidates", None)
        if candidates is None:
            feedback = getattr(response, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None)
            if reason is not None:
                return "", f"blocked: {getattr(reason, 'value', reason)}"
            raise _Malformed("no candidates")
        if not candidates:
            return "", None
        first = candidates[0]
        finish = getattr(first, "finish_reason", None)
        content = getattr(first, "content", None)
        parts = getattr(content, "parts", None) or []
        text = "".join(
            p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", False)
        )
        return text, getattr(finish, "value", finish)

    def _create(self, messages: list[Message], max_tokens: int, temperature: float) -> Piece:
        response = self._client.models.generate_content(
            **self._request(messages, max_tokens, temperature)
        )
        text, finish = self._text_of(response)
        return text, finish, getattr(response, "model_version", None)

    def _stream(
        self, messages: list[Message], max_tokens: int, temperature: float
    ) -> Iterator[Piece]:
        events = 0
        for chunk in self._client.models.generate_content_stream(
            **self._request(messages, max_tokens, temperature)
        ):
            events += 1
            text, finish = self._text_of(chunk)
            yield text, finish, getattr(chunk, "model_version", None)
        if not events:
            raise _Malformed("no stream events")

    def _classify(self, exc: BaseException) -> Failure | None:
        failure = gemini_failure(self._errors, exc, api_key=self._api_key, timeout=self.timeout)
        if failure is None and isinstance(exc, (ValueError, self._errors.UnknownApiResponseError)):
            # the SDK's own JSON decoding failed: the server is not the Gemini API
            detail = short(redact(str(exc), self._api_key), 80)
            return Failure(False, None, "invalid response", None, detail)
        return failure


def build_chat_model(settings: AnswerConfig, model: str | None = None) -> ChatModelProtocol:
    """The chat model ``rag.answer`` describes (``model`` overrides ``settings.model``): a
    registered provider, or a user's ``"package.module:Class"`` built with its
    ``from_config(settings, model)`` when it has one."""
    cls = load_class(settings.provider, CHAT_MODELS, kind="answer model")
    from_config = getattr(cls, "from_config", None)
    chat: ChatModelProtocol = from_config(settings, model) if callable(from_config) else cls()
    return chat
