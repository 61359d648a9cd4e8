"""JSON over HTTP for the rerank API, and the one-line messages of every provider request.

The API reranker talks to a plain REST endpoint (``POST …/rerank``: no SDK exists for it), so
it uses the standard library (``urllib``: nothing to import, nothing to install) through
:class:`JSONEndpoint`. Chat models (``kb ask``, the LLM reranker, query rewriting) go through
the one chat client, :class:`kbcli.providers.chat_client.ChatModel`, over the providers'
SDKs. What is shared with the embedders is imported, not copied: the retry policy, backoff and
``Retry-After`` handling of :mod:`kbcli.providers.retry`, and the redaction and host helpers
of :mod:`kbcli.embedders.provider_settings`. Keys are sent only in the ``Authorization``
header and never appear in messages (server messages are redacted before they are quoted);
:func:`describe_failure` writes the message of any request that failed for good.

Every reply is read within bounds, whatever the server sends: at most ``max_bytes`` of a body
(:data:`MAX_REPLY_BYTES`, 16 MB; :func:`~kbcli.providers.replies.read_capped`), the first
:data:`~kbcli.providers.replies.MAX_ERROR_BYTES` of an error's body, and one call (every
request, retry and wait of a rerank) within its ``deadline``. The chat client bounds its
replies the same way with :func:`~kbcli.providers.replies.reply_cap_hook`.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from kbcli.embedders.provider_settings import host_of, redact, short, transport_errors
from kbcli.errors import RerankerError
from kbcli.providers.replies import (
    MAX_ERROR_BYTES,
    ReplyTooLarge,
    UnreadableReply,
    megabytes,
    read_capped,
)
from kbcli.providers.retry import (
    EmbedderRequestError,
    Failure,
    RetryPolicy,
    call_with_retries,
    connection_refused,
    is_retryable_status,
    nothing_listening,
    parse_retry_after,
)

MAX_REPLY_BYTES = 16 << 20  # a rerank or search chat reply (a rerank of 1000 documents < 2 MB)
TOO_LARGE = "reply too large"  # a Failure's reason: the reply passed its bound


class _BadResponse(Exception):
    """The server answered 2xx with something that is not the JSON we expect."""


def endpoint(base_url: str, path: str) -> str:
    """``base_url`` joined with ``path`` unless it already ends with it (``…/v1`` or
    ``…/v1/rerank`` both work)."""
    base = base_url.rstrip("/")
    return base if base.endswith(path) else f"{base}/{path.lstrip('/')}"


def _server_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("detail") or data.get("detail") or "")
        return str(error)
    return text


class JSONEndpoint:
    """POSTs JSON to one URL and returns the decoded answer, retrying as the embedders do.

    ``label`` names the service in messages ("rerank API"), ``setting`` the configuration
    section a user would change ("rag.rerank"), ``key_env`` the variables a key may come from.
    A reply is read up to ``max_bytes``; ``deadline`` seconds bound one :meth:`post`, every
    attempt and wait included, unless the caller gives the end of a longer call (``until``).
    Failures raise :class:`~kbcli.errors.RerankerError` with a one-line message.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        key_source: str = "",
        key_env: tuple[str, ...] = (),
        label: str,
        setting: str,
        timeout: float = 30.0,
        max_retries: int = 3,
        deadline: float | None = None,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.url = url
        self.label = label
        self.setting = setting
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.timeout = float(timeout)
        # timeout is a total deadline per attempt (urllib's own applies to each read, so a
        # server trickling bytes would never trip it); see kbcli.providers.retry
        self.retry_policy = RetryPolicy(max_retries=max(0, int(max_retries)), timeout=self.timeout)
        self._responses: list[Any] = []
        self.key_source = key_source
        self.key_env = key_env
        self._api_key = api_key

    @property
    def host(self) -> str:
        """Host (and port) of the server, for messages."""
        return host_of(self.url)

    def __repr__(self) -> str:
        return f"JSONEndpoint({self.label!r}, host={self.host!r})"

    def post(self, payload: dict[str, Any], *, until: float | None = None) -> Any:
        """Send ``payload`` and return the decoded JSON answer. ``until`` (a
        :func:`time.monotonic` time) ends every attempt and wait, for a call made of several
        posts (a rerank); else ``deadline`` from now."""
        policy = self.retry_policy
        if until is None and self.deadline is not None:
            until = time.monotonic() + self.deadline
        if until is not None:
            policy = replace(policy, budget=until - time.monotonic())
        try:
            return call_with_retries(
                lambda: self._request(payload),
                policy=policy,
                classify=self._classify,
                describe=self._describe,
                on_abandon=self._abandon,
            )
        except EmbedderRequestError as exc:
            raise RerankerError(str(exc)) from None

    def _abandon(self) -> None:
        """Close the answer an abandoned attempt is still reading (its thread then ends)."""
        while self._responses:
            self._responses.pop().close()

    def _request(self, payload: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        data = json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            self._responses.append(response)
            try:
                body = read_capped(response, self.max_bytes)
            finally:
                if response in self._responses:
                    self._responses.remove(response)
        try:
            return json.loads(body)
        except ValueError:
            raise _BadResponse(f"not JSON: {short(body[:200])}") from None

    def _classify(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, urllib.error.HTTPError):
            status = exc.code
            try:
                body = exc.read(MAX_ERROR_BYTES)
            except OSError:
                body = b""
            detail = short(redact(_server_message(body), self._api_key))
            retry_after = parse_retry_after(exc.headers)
            return Failure(
                is_retryable_status(status), status, f"status {status}", retry_after, detail
            )
        refused = connection_refused(exc)
        if isinstance(exc, urllib.error.URLError):
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                return Failure(True, None, f"timed out after {self.timeout:g} s")
            if refused:
                return Failure(True, None, "connection error", refused=True)
            return Failure(True, None, f"connection error ({short(reason, 80)})")
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return Failure(True, None, f"timed out after {self.timeout:g} s")
        if isinstance(exc, (ConnectionError, http.client.HTTPException)):
            return Failure(True, None, f"connection error ({type(exc).__name__})", refused=refused)
        if isinstance(exc, transport_errors()):
            return Failure(True, None, "connection error", refused=refused)
        if isinstance(exc, ReplyTooLarge):
            return Failure(False, None, TOO_LARGE, None, megabytes(exc.limit))
        if isinstance(exc, (_BadResponse, UnreadableReply)):
            return Failure(
                False, None, "invalid response", None, short(redact(str(exc), self._api_key))
            )
        return None

    def _describe(self, failure: Failure, attempts: int) -> str:
        return describe_failure(
            failure,
            attempts,
            where=f"{self.label} at {self.host}",
            setting=self.setting,
            key_env=self.key_env,
            has_key=bool(self._api_key),
            key_source=self.key_source,
            deadline=self.deadline,
            host=self.host,
        )


def describe_failure(
    failure: Failure,
    attempts: int,
    *,
    where: str,
    setting: str,
    key_env: tuple[str, ...] = (),
    has_key: bool = True,
    key_source: str = "",
    deadline: float | None = None,
    host: str = "",
) -> str:
    """The one-line message of a request that failed for good: ``where`` names the service
    ("answer model gpt-4o-mini at localhost:8080"), ``setting`` the configuration section to
    change, ``key_env`` the variables a key may come from, ``deadline`` the seconds
    ``{setting}.deadline`` allows (a failure that exhausted the budget ran into it), ``host``
    the address connected to. Holds no secret (the server's message in ``failure.detail`` is
    already redacted)."""
    detail = f": {failure.detail}" if failure.detail else ""
    status = failure.status
    if failure.reason == TOO_LARGE:
        return (
            f"{where} sent a reply of more than {failure.detail}, more than kb reads: stopped "
            f"reading it; check that {setting}.base_url is the right server"
        )
    if failure.exhausted == "budget" and deadline is not None:
        return past_deadline(where, setting, deadline, last_attempt(failure, attempts))
    if failure.retryable:
        what = f"status {status}" if status is not None else failure.reason
        if failure.refused:
            listening = nothing_listening(host or "that address", setting)
            return f"{where} failed after {attempts} attempts ({what}): {listening}"
        return (
            f"{where} failed after {attempts} attempts ({what}){detail}; try again later "
            f"or raise {setting}.max_retries"
        )
    keys = "/".join(key_env) or "the api_key argument"
    if status == 401:
        if not has_key:
            return f"{where} needs an API key (status 401): set {keys}"
        return f"{where} rejected the API key (status 401): check {key_source or keys}"
    if status == 403:
        return f"{where} refused access (status 403){detail}: check the key and the model"
    if status == 404:
        return (
            f"{where} answered 404 (not found){detail}: check {setting}.base_url and "
            f"{setting}.model"
        )
    shown = f"status {status}" if status is not None else failure.reason
    return f"{where} failed ({shown}){detail}"


def past_deadline(where: str, setting: str, deadline: float, what: str = "") -> str:
    """The message of a call cut at ``{setting}.deadline`` (``deadline`` seconds); ``what``
    says more inside its parentheses (:func:`last_attempt`, a stream cut mid-answer)."""
    return (
        f"{where} gave no complete answer within {setting}.deadline ({deadline:g} s{what}): "
        f"stopped; try again later, or raise {setting}.deadline"
    )


def last_attempt(failure: Failure, attempts: int) -> str:
    """``"; 3 attempts, the last: status 503"`` for a deadline's message (empty when the
    deadline itself cut the only attempt)."""
    what = f"status {failure.status}" if failure.status is not None else failure.reason
    if "budget ran out" in what:  # the deadline cut that attempt: said already
        what = ""
    if attempts == 1:
        return f"; {what}" if what else ""
    return f"; {attempts} attempts" + (f", the last: {what}" if what else "")
