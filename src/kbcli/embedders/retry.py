"""The retry policy shared by the HTTP embedders (OpenAI, Gemini).

One policy, written once, so both providers behave alike and tests can check it:

* retry on 408, 429 and 5xx answers, on timeouts and on connection errors;
* never retry other 4xx answers (400, 401, 403, 404 ...): they fail at once;
* wait ``base_delay * 2**(n-1)`` seconds before retry ``n``, capped at ``max_delay``, with
  "equal jitter" (a random value between half and all of it);
* a ``Retry-After`` (or ``retry-after-ms``) header is honoured, capped at ``max_retry_after``;
* at most ``max_retries`` retries, so ``max_retries + 1`` attempts in all.

The SDKs' own retries are switched off by the embedders so this is the only policy in force.
Tests replace :data:`sleep` (``monkeypatch.setattr(retry, "sleep", ...)``) to avoid waiting.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..errors import EmbedderError

logger = logging.getLogger("kbcli.embedders")

T = TypeVar("T")

#: The function used to wait between attempts; patch it in tests.
sleep: Callable[[float], None] = time.sleep

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def is_retryable_status(status: int | None) -> bool:
    """True for answers worth another attempt: 408, 429 and every 5xx."""
    return status is not None and (status in RETRYABLE_STATUS or 500 <= status <= 599)


@dataclass(frozen=True)
class RetryPolicy:
    """How many times and how long to retry; see the module docstring."""

    max_retries: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0

    def delay(
        self,
        retry: int,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        backoff = min(self.max_delay, self.base_delay * (2 ** max(0, retry - 1)))
        wait = backoff * (0.5 + 0.5 * rand())
        if retry_after is not None and retry_after > 0:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


@dataclass(frozen=True)
class Failure:
    """What went wrong with one attempt, as the policy needs to know it."""

    retryable: bool
    status: int | None = None
    reason: str = ""
    retry_after: float | None = None
    detail: str = ""  # the server's own message, already redacted and shortened


class EmbedderRequestError(EmbedderError):
    """A provider request failed for good; ``status`` and ``attempts`` say how."""

    def __init__(self, message: str, *, status: int | None, attempts: int, retryable: bool):
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.retryable = retryable


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds asked for by ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    classify: Callable[[BaseException], Failure | None],
    describe: Callable[[Failure, int], str],
) -> T:
    """Call ``fn`` until it succeeds, the failure is not retryable, or retries run out.

    ``classify`` turns an exception into a :class:`Failure` (None: not ours, re-raise as is);
    ``describe(failure, attempts)`` writes the final message, which must not hold secrets.
    Raises :class:`EmbedderRequestError`.
    """
    attempts = 0
    while True:
        attempts += 1
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classify decides what is ours
            failure = classify(exc)
            if failure is None:
                raise
            if not failure.retryable or attempts > policy.max_retries:
                # ``from None``: the SDK's exception may quote the server's body verbatim.
                raise EmbedderRequestError(
                    describe(failure, attempts),
                    status=failure.status,
                    attempts=attempts,
                    retryable=failure.retryable,
                ) from None
            wait = policy.delay(attempts, failure.retry_after)
            logger.info(
                "embedding request failed (%s); retry %d of %d in %.1f s",
                failure.reason or failure.status,
                attempts,
                policy.max_retries,
                wait,
            )
            sleep(wait)
