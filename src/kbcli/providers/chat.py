"""The chat models kb builds: the one chat client (:class:`~kbcli.providers.chat_client.ChatModel`)
over each provider's SDK, and who builds which.

:class:`OpenAIChat` speaks to any OpenAI-compatible chat endpoint through the ``openai`` SDK
(OpenAI, llama.cpp's ``llama-server``, Ollama, vLLM, LM Studio, DeepSeek ...);
:class:`GeminiChat` to Gemini through ``google-genai`` (``kb ask`` only: the reranker and the
rewriter speak OpenAI-compatible servers). :func:`build_chat_model` builds ``kb ask``'s model
from ``rag.answer``; :func:`search_chat` the LLM reranker's and query rewriting's, with their
own variables, error type and reply cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kbcli.config.registry import CHAT_MODELS, load_class
from kbcli.config.schema import AnswerConfig
from kbcli.embedders.gemini import classify_error as gemini_failure
from kbcli.embedders.openai import classify_error as openai_failure
from kbcli.embedders.provider_settings import redact, short
from kbcli.errors import RerankerError, require
from kbcli.protocols import ChatModelProtocol
from kbcli.providers.chat_client import (
    KEYLESS,
    ChatModel,
    Completion,
    MalformedReply,
    Message,
    Piece,
    Reply,
)
from kbcli.providers.http import MAX_REPLY_BYTES
from kbcli.providers.retry import Failure

__all__ = [
    "ChatModel",
    "Completion",
    "GeminiChat",
    "OpenAIChat",
    "build_chat_model",
    "search_chat",
]

#: Where the LLM reranker and query rewriting find their key, server and model (docs/rerank.md).
SEARCH_KEY_ENV = ("LLM_API_KEY", "OPENAI_API_KEY", "API_KEY")
SEARCH_BASE_URL_ENV = ("LLM_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE")
SEARCH_MODEL_ENV = ("LLM_MODEL",)


class OpenAIChat(ChatModel):
    """Any OpenAI-compatible ``/chat/completions`` endpoint, through the ``openai`` SDK.

    With nothing configured, the key and the server come from ``OPENAI_API_KEY`` and
    ``OPENAI_BASE_URL`` as the SDK reads them, so a local llama.cpp, Ollama or vLLM server
    works with ``OPENAI_BASE_URL=http://localhost:8080/v1`` (no key needed for a server other
    than api.openai.com). The model defaults to ``gpt-4o-mini``. The LLM reranker and query
    rewriting look in ``LLM_*`` variables first (:func:`search_chat`). A ``base_url`` ending in
    ``/chat/completions`` is taken as the endpoint itself.
    """

    provider = "openai"
    default_model = "gpt-4o-mini"
    key_env = ("OPENAI_API_KEY",)
    base_url_env = ("OPENAI_BASE_URL",)
    default_host = "https://api.openai.com/v1"
    endpoint = "an OpenAI-compatible endpoint (ending in /v1)"

    def _no_key_message(self, api_key_env: str | None) -> str:
        return (
            f"{super()._no_key_message(api_key_env)}, or point {self.base_url_env[0]} or "
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
        # a base_url of the whole endpoint (``…/v1/chat/completions``) works too
        base_url = (self.base_url or self.default_host).rstrip("/")
        return openai.OpenAI(
            api_key=self._api_key or KEYLESS,
            base_url=base_url.removesuffix("/chat/completions"),
            max_retries=0,
            timeout=self.timeout,
            http_client=http_client,
        )

    def _create(
        self, messages: list[Message], max_tokens: int, temperature: float, logprobs: bool
    ) -> Reply:
        extra: dict[str, Any] = {"logprobs": True, "top_logprobs": 5} if logprobs else {}
        response = self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            **extra,
        )
        try:
            choice = response.choices[0]
            text = choice.message.content
            if text is not None and not isinstance(text, str):
                raise TypeError
        except (AttributeError, IndexError, KeyError, TypeError):
            shown = short(response, 80) if isinstance(response, str) else "no choices"
            raise MalformedReply(f"{shown}") from None
        served = getattr(response, "model", None) or None
        top = _top_logprobs(choice) if logprobs else None
        return Reply(text or "", choice.finish_reason, served, top)

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
                raise MalformedReply("a stream event without choices")
            if not choices:  # a usage-only event
                continue
            delta = getattr(choices[0], "delta", None)
            text = getattr(delta, "content", None) if delta is not None else None
            yield text or "", choices[0].finish_reason, getattr(chunk, "model", None) or None
        if not events:
            raise MalformedReply("no stream events")

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
            raise MalformedReply("no candidates")
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

    def _create(
        self, messages: list[Message], max_tokens: int, temperature: float, logprobs: bool
    ) -> Reply:
        # logprobs: only the LLM reranker asks, and it speaks OpenAI-compatible servers only
        response = self._client.models.generate_content(
            **self._request(messages, max_tokens, temperature)
        )
        text, finish = self._text_of(response)
        return Reply(text, finish, getattr(response, "model_version", None))

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
            raise MalformedReply("no stream events")

    def _classify(self, exc: BaseException) -> Failure | None:
        failure = gemini_failure(self._errors, exc, api_key=self._api_key, timeout=self.timeout)
        if failure is None and isinstance(exc, (ValueError, self._errors.UnknownApiResponseError)):
            # the SDK's own JSON decoding failed: the server is not the Gemini API
            detail = short(redact(str(exc), self._api_key), 80)
            return Failure(False, None, "invalid response", None, detail)
        return failure


def _top_logprobs(choice: Any) -> dict[str, float] | None:
    """The first token's alternatives of an SDK ``choice`` as ``{token: logprob}`` (the token
    itself when the server lists no alternatives); None when the server sent none."""
    try:
        first = choice.logprobs.content[0]
        alternatives = getattr(first, "top_logprobs", None) or [first]
        return {str(a.token): float(a.logprob) for a in alternatives}
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def search_chat(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    *,
    label: str,
    setting: str,
    timeout: float,
    max_retries: int,
    deadline: float,
) -> OpenAIChat:
    """The chat client of the LLM reranker and query rewriting (``label``, ``setting``): an
    OpenAI-compatible endpoint whose key, server and model come from the argument, else
    ``LLM_*`` / ``OPENAI_*`` variables (:data:`SEARCH_KEY_ENV` ...); failures raise
    :class:`~kbcli.errors.RerankerError`, and a reply is read up to 16 MB."""
    keys = "/".join(SEARCH_KEY_ENV)
    return OpenAIChat(
        model,
        base_url,
        api_key,
        label=label,
        setting=setting,
        timeout=timeout,
        max_retries=max_retries,
        deadline=deadline,
        key_env=SEARCH_KEY_ENV,
        base_url_env=SEARCH_BASE_URL_ENV,
        model_env=SEARCH_MODEL_ENV,
        error=RerankerError,
        missing_key=(
            f"No API key for the {label} ({keys}): set one, or set {setting}.base_url to a "
            "local OpenAI-compatible server"
        ),
        max_reply_bytes=MAX_REPLY_BYTES,
    )


def build_chat_model(settings: AnswerConfig, model: str | None = None) -> ChatModelProtocol:
    """The chat model ``rag.answer`` describes (``model`` overrides ``settings.model``): a
    registered provider, or a user's ``"package.module:Class"`` built with its
    ``from_config(settings, model)`` when it has one."""
    cls = load_class(settings.provider, CHAT_MODELS, kind="answer model")
    from_config = getattr(cls, "from_config", None)
    chat: ChatModelProtocol = from_config(settings, model) if callable(from_config) else cls()
    return chat
