"""The one chat client: every request kb makes to a chat model goes through :class:`ChatModel`.

Three callers share it: ``kb ask`` (:mod:`kbcli.agent.answer`, the model ``rag.answer``
names), the LLM reranker (:mod:`kbcli.search.rerank.llm`) and query rewriting
(:mod:`kbcli.search.rewrite`). Two providers share one request path
(:mod:`kbcli.providers.chat`): any OpenAI-compatible chat endpoint through the ``openai`` SDK
(``OpenAIChat``: OpenAI, llama.cpp's ``llama-server``, Ollama, vLLM, LM Studio, DeepSeek ...)
and Gemini through ``google-genai`` (``GeminiChat``, for ``kb ask`` only). Both SDKs are core
dependencies and honour ``base_url`` for a local server, and they give what the callers need
(streaming, Gemini's own protocol, ``logprobs``), so kb speaks to chat models through them
and to nothing else. What they share with the embedders is imported, not copied: the retry
policy of :mod:`kbcli.providers.retry` (the SDKs' own retries are off), each SDK's error
classification (``classify_error`` in :mod:`kbcli.embedders.openai` and
:mod:`kbcli.embedders.gemini`), key lookup and redaction
(:mod:`kbcli.embedders.provider_settings`), the bounded reading of
:mod:`kbcli.providers.replies` and the one-line messages of
:func:`kbcli.providers.http.describe_failure`. Keys are never part of a message.

What differs between the callers is documented behaviour, so it is a parameter of the client,
never a second client: the names in messages (``label``, ``setting``), the error raised
(:class:`~kbcli.errors.AnswerError` for ``kb ask``, :class:`~kbcli.errors.RerankerError` for
search), the variables a key, server and model come from, retries (``rag.answer`` 2, search
3), the deadline, the reply cap, and whether an empty answer is an error
(:func:`kbcli.providers.chat.search_chat` builds the search callers' client).

* **Not streamed**: an attempt has ``timeout`` seconds from sending to the last byte; 408, 429,
  5xx, timeouts and connection errors are retried ``max_retries`` times with backoff.
* **Streamed** (``on_text``): an attempt lasts until the first piece of text arrives (at most
  ``timeout`` seconds, retried like any request). After that nothing is retried (the text is
  already shown): a failure, or a pause of more than ``timeout`` seconds between two pieces,
  ends the answer with an error.
* **One call** ends within ``deadline`` seconds (``rag.answer.deadline``, ``rag.rerank.deadline``,
  ``rag.rewrite.deadline``: every attempt, wait and streamed piece; a server that streams
  forever is cut there), or at ``until`` when a caller's call is made of several requests (a
  rerank, a rewrite). An answer holds at most ``max_answer_mb`` of text
  (``rag.answer.max_answer_mb``, a ``<think>`` block included), counted while the reply is
  read: a body (or one line of a stream) is read up to four times that plus 1 MB, or
  ``max_reply_bytes`` when the caller gives it (16 MB for search), and an error's body up to
  64 KB (:func:`kbcli.providers.replies.reply_cap_hook`), so memory stays bounded whatever the
  server sends.
* A ``<think>…</think>`` block at the start of the answer (reasoning models served by Ollama,
  vLLM or llama.cpp) is left out.
* An answer without text (a provider's safety filter, ``max_tokens`` spent before any text) is
  an error unless the caller accepts it (``empty_ok``: a reranker scores it 0); a reply that
  is not a chat completion always is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kbcli.config.schema import AnswerConfig
from kbcli.embedders.provider_settings import find_api_key, first_env, host_of, redact, short
from kbcli.errors import AnswerError, KBError
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
    and why it stopped (``stop``, ``length`` ...; None when the server does not say); when
    asked for (``logprobs``) and served, the first token's alternatives as
    ``{token: logprob}``."""

    text: str
    model: str
    finish_reason: str | None = None
    top_logprobs: dict[str, float] | None = None


@dataclass(frozen=True)
class Reply:
    """One completion as a provider's ``_create`` reads it, before kb checks it."""

    text: str
    finish: str | None
    model: str | None
    top_logprobs: dict[str, float] | None = None


class MalformedReply(Exception):
    """The server answered 2xx with something that is not a chat completion (a provider's
    ``_create`` or ``_stream`` raises it)."""


class _TooLong(Exception):
    """The answer's text passed ``max_answer_mb`` (raised while it is read)."""


TOO_LONG = "answer too long"  # a Failure's reason
REPLY_FACTOR = 4  # a reply's body (a stream's line) is read up to this x the answer's cap ...
REPLY_SLACK = 1 << 20  # ... plus this: JSON escapes and the envelope around the text


class ChatModel:
    """One chat model behind an SDK, with kbcli's retries, deadlines, caps and messages.

    Subclasses set ``provider``, ``default_model``, ``key_env`` and ``base_url_env`` and
    implement ``_make_client``, ``_create`` (one completion), ``_stream`` (``(text,
    finish_reason, model)`` pieces) and ``_classify`` (an SDK exception as a
    :class:`~kbcli.providers.retry.Failure`).
    ``api_key`` is the key itself; else the variable ``api_key_env`` names; else the first of
    ``key_env`` set (default: the provider's variables). ``base_url`` and ``model`` likewise
    fall back on ``base_url_env`` and ``model_env``. ``label`` and ``setting`` name the caller
    and its configuration section in messages, ``error`` is the error it raises and
    ``missing_key`` its message when no key is found. ``deadline`` (seconds) bounds each call,
    ``max_answer_mb`` each answer, ``max_reply_bytes`` (default: from ``max_answer_mb``) each
    reply's body (see the module docstring); a client made by ``_make_client`` reads its
    replies through ``self._reply_hook`` and asks for uncompressed replies.
    """

    provider = ""
    default_model = ""
    key_env: tuple[str, ...] = ()
    base_url_env: tuple[str, ...] = ()
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
        key_env: tuple[str, ...] | None = None,
        base_url_env: tuple[str, ...] | None = None,
        model_env: tuple[str, ...] = (),
        error: type[KBError] = AnswerError,
        missing_key: str | None = None,
        max_reply_bytes: int | None = None,
    ) -> None:
        self.error = error
        self.model = model or first_env(*model_env)[0] or self.default_model
        self.label = label
        self.setting = setting
        self.key_env = (api_key_env,) if api_key_env else key_env or type(self).key_env
        key, source = find_api_key(api_key, self.key_env)
        self.base_url_env = type(self).base_url_env if base_url_env is None else base_url_env
        self.base_url = base_url or first_env(*self.base_url_env)[0]
        # A variable named in the configuration must be set; otherwise a server of the user's
        # own (not the provider's) may do without a key.
        if not key and (api_key_env or not self._keyless()):
            raise error(missing_key or self._no_key_message(api_key_env))
        self._api_key = key
        self.key_source = source
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        for name, value in (("timeout", self.timeout), ("deadline", self.deadline)):
            if not value > 0:
                raise error(f"{setting}.{name} must be a positive number of seconds")
        if not max_answer_mb > 0:
            raise error(f"{setting}.max_answer_mb must be a positive number")
        self.max_answer_mb = float(max_answer_mb)
        self.max_answer_bytes = max(1, int(max_answer_mb * (1 << 20)))
        self._cap_from_answer = max_reply_bytes is None  # a too large reply names max_answer_mb
        self.reply_limit = max_reply_bytes or REPLY_FACTOR * self.max_answer_bytes + REPLY_SLACK
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

    def _keyless(self) -> bool:
        """True when no key is needed: a server of the user's own at ``base_url``."""
        return bool(self.base_url) and self.host != host_of(self.default_host)

    def _no_key_message(self, api_key_env: str | None) -> str:
        if api_key_env:
            return (
                f"No API key for the {self.provider} {self.label}: {self.setting}.api_key_env "
                f"names {api_key_env}, which is not set"
            )
        return (
            f"No API key for the {self.provider} {self.label}: set "
            f"{'/'.join(self.key_env)} (or name another variable in {self.setting}.api_key_env)"
        )

    def _make_client(self) -> Any:
        """A new SDK client. ``Any``: each subclass's SDK (openai, google-genai: optional
        packages) has its own, read defensively (a server may send anything)."""
        raise NotImplementedError

    def _create(
        self, messages: list[Message], max_tokens: int, temperature: float, logprobs: bool
    ) -> Reply:
        """One completion (``logprobs``: ask for the first token's alternatives, where the
        provider has them); raises ``MalformedReply``."""
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
        logprobs: bool = False,
        until: float | None = None,
        empty_ok: bool = False,
    ) -> Completion:
        """The model's answer to ``messages``; with ``on_text`` the request is streamed and
        each piece of the answer is passed to it as it arrives. ``logprobs`` asks for the
        first token's alternatives (not streamed). ``until`` (a :func:`time.monotonic` time)
        ends every attempt and wait, for a call made of several requests; else ``deadline``
        from now. ``empty_ok`` returns an answer without text instead of raising."""
        ends = time.monotonic() + self.deadline if until is None else until
        top: dict[str, float] | None = None
        if on_text is None:
            reply = self._retried(
                lambda: self._create(messages, max_tokens, temperature, logprobs), ends
            )
            if len((reply.text or "").encode("utf-8")) > self.max_answer_bytes:
                raise self.error(self._too_long())
            text, finish, served = strip_thinking(reply.text or ""), reply.finish, reply.model
            top = reply.top_logprobs
        else:
            text, finish, served = self._streamed(messages, max_tokens, temperature, on_text, ends)
        if not text.strip() and not empty_ok:
            why = f" (finish reason {finish})" if finish else ""
            hint = (
                f": raise {self.setting}.max_tokens" if finish in ("length", "MAX_TOKENS") else ""
            )
            raise self.error(f"{self._where()} returned an empty answer{why}{hint}")
        return Completion(text, served or self.model, finish, top)

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

    def _retried(self, fn: Callable[[], T], ends: float) -> T:
        policy = replace(self.retry_policy, budget=ends - time.monotonic())
        try:
            return call_with_retries(
                fn,
                policy=policy,
                classify=self._classify_any,
                describe=self._describe,
                on_abandon=self._abandon,
            )
        except EmbedderRequestError as exc:
            raise self.error(str(exc)) from None

    def _streamed(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        on_text: Callable[[str], None],
        ends: float,
    ) -> Piece:
        state: dict[str, Any] = {"finish": None, "model": None}

        def note(finish: str | None, model: str | None) -> None:
            state["finish"] = finish or state["finish"]
            state["model"] = model or state["model"]

        def first_text() -> tuple[str, Iterator[Piece], ThinkFilter]:
            think = ThinkFilter()  # per attempt: a failed one may have stopped mid-thought
            pieces = self._metered(self._stream(messages, max_tokens, temperature))
            for text, finish, model in pieces:
                note(finish, model)
                shown = think.feed(text or "")
                if shown:
                    return shown, pieces, think
            return "", iter(()), think

        shown, rest, think = self._retried(first_text, ends)
        parts = [shown]
        if shown:
            on_text(shown)
        # the rest is read in a worker thread, so the deadline holds even while a read waits
        try:
            for text, finish, model in relay(rest, ends - time.monotonic(), self._abandon):
                note(finish, model)
                piece = think.feed(text or "")
                if piece:
                    parts.append(piece)
                    on_text(piece)
        except AttemptTimeout:
            raise self.error(self._past_deadline("; it was still streaming")) from None
        except _TooLong:
            raise self.error(self._too_long()) from None
        except Exception as exc:  # noqa: BLE001 - classify decides what is ours
            failure = self._classify_any(exc)
            if failure is not None and failure.reason in (TOO_LARGE, TOO_LONG):
                raise self.error(self._describe(failure, 1)) from None
            if failure is None:
                raise
            detail = f": {failure.detail}" if failure.detail else ""
            what = f"status {failure.status}" if failure.status else failure.reason
            raise self.error(
                f"{self._where()} stopped in the middle of the answer ({what}){detail}"
            ) from None
        if state["finish"] is None:
            raise self.error(
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
        if isinstance(exc, (MalformedReply, UnreadableReply)):
            return Failure(
                False, None, "invalid response", None, short(redact(str(exc), self._api_key))
            )
        return self._classify(exc)

    def _describe(self, failure: Failure, attempts: int) -> str:
        if failure.reason == TOO_LONG:
            return self._too_long()
        if failure.reason == TOO_LARGE and self._cap_from_answer:
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
