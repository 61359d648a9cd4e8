"""The retry policy of every provider request: the embedders (OpenAI, Gemini), the one chat
client (:mod:`kbcli.providers.chat_client`) and the rerank API (:mod:`kbcli.providers.http`).

One policy, written once, so every provider behaves alike and tests can check it:

* retry on 408, 429 and 5xx answers, on timeouts and on connection errors;
* never retry other 4xx answers (400, 401, 403, 404 ...): they fail at once;
* wait ``base_delay * 2**(n-1)`` seconds before retry ``n``, capped at ``max_delay``, with
  "equal jitter" (a random value between half and all of it);
* a ``Retry-After`` (or ``retry-after-ms``) header is honoured, capped at ``max_retry_after``;
* at most ``max_retries`` retries, so ``max_retries + 1`` attempts in all;
* each attempt has a total deadline, ``timeout`` seconds (``rag.embedding.timeout``) from the
  request's start to its last byte: a server that sends one byte every few seconds is cut off
  like one that never answers (an SDK's own timeout applies to each read, so it never fires);
* the whole request, attempts and waits included, stops after ``budget`` seconds
  (``rag.embedding.retry_budget``): no retry is started, and no wait begun, that would end
  past it. A command stops at the first request that fails for good, so a dead or stalling
  server holds any ``kb`` command for about ``retry_budget`` seconds at most.

The deadline runs the SDK call in a daemon worker thread and stops waiting for it at the
deadline; ``on_abandon`` then closes the SDK client (its sockets) and makes a new one, so the
abandoned thread ends at its next read and never holds the process open.

The SDKs' own retries are switched off by the embedders so this is the only policy in force.
Tests replace :data:`sleep` (``monkeypatch.setattr(retry, "sleep", ...)``) to avoid waiting.
"""

from __future__ import annotations

import contextvars
import email.utils
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from kbcli.errors import EmbedderError

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
    timeout: float | None = None  # seconds per attempt, start to last byte
    budget: float | None = None  # seconds per request, every attempt and wait included

    def delay(
        self,
        retry: int,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        backoff = min(self.max_delay, self.base_delay * (2.0 ** max(0, retry - 1)))
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
    exhausted: str = ""  # why retrying stopped: "retries" or "budget" (empty: not retryable)
    elapsed: float = 0.0  # seconds spent on the request when it was given up
    refused: bool = False  # the connection was refused: nothing listens at the address


def connection_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` comes of a refused connection (nothing listens at that address),
    however deep an SDK wrapped it: its causes and contexts, and a ``URLError``'s reason."""
    for _ in range(20):  # an exception chain is short; a cycle must not hold us
        if exc is None:
            return False
        if isinstance(exc, ConnectionRefusedError) or isinstance(
            getattr(exc, "reason", None), ConnectionRefusedError
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def nothing_listening(host: str, setting: str) -> str:
    """The end of the message of a request whose connections were refused."""
    return (
        f"nothing is listening at {host} (connection refused): start the server, or check "
        f"{setting}.base_url"
    )


class EmbedderRequestError(EmbedderError):
    """A provider request failed for good; ``status`` and ``attempts`` say how."""

    def __init__(self, message: str, *, status: int | None, attempts: int, retryable: bool):
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.retryable = retryable


class Headers(Protocol):
    """Response headers looked up by name (a mapping, or the ``email.message.Message`` that
    urllib gives)."""

    def get(self, name: str, default: None = None, /) -> str | None: ...


def parse_retry_after(headers: Headers | None) -> float | None:
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


class AttemptTimeout(Exception):
    """An attempt did not finish within its deadline (raised by :func:`run_with_deadline`)."""


def run_with_deadline(
    fn: Callable[[], T], seconds: float | None, on_abandon: Callable[[], None] | None = None
) -> T:
    """``fn()``, or :class:`AttemptTimeout` when it has not returned after ``seconds``.

    ``fn`` runs in a daemon thread (with the caller's context variables); at the deadline it
    is abandoned and ``on_abandon`` is called to release what it holds (close its client).
    """
    if seconds is None:
        return fn()
    if seconds <= 0:
        raise AttemptTimeout(seconds)
    box: dict[str, object] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="kbcli-provider-request", daemon=True).start()
    if not done.wait(seconds):
        if on_abandon is not None:
            try:
                on_abandon()
            except Exception:  # noqa: BLE001 - best effort: the answer is already "timed out"
                logger.debug("closing an abandoned provider client failed", exc_info=True)
        raise AttemptTimeout(seconds)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def relay(
    items: Iterator[T],
    seconds: float,
    on_abandon: Callable[[], None] | None = None,
    *,
    capacity: int = 64,
) -> Iterator[T]:
    """The items of ``items``, read in a daemon thread, for at most ``seconds``: then
    :class:`AttemptTimeout`, even while the thread waits in a read, and ``on_abandon`` is
    called to release what it holds (close its client; the thread then ends). An exception
    the thread meets is raised here. At most ``capacity`` items wait for the reader, so the
    thread never runs far ahead of a slow one (a terminal).
    """
    ends = time.monotonic() + seconds
    waiting: queue.Queue[tuple[str, Any]] = queue.Queue(capacity)
    stop = threading.Event()
    context = contextvars.copy_context()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                waiting.put(entry, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader
            put(("error", exc))

    thread = threading.Thread(
        target=context.run, args=(pump,), name="kbcli-provider-stream", daemon=True
    )
    thread.start()
    finished = False
    try:
        while True:
            left = ends - time.monotonic()
            if left <= 0:  # checked first: a stream that never pauses still ends on time
                raise AttemptTimeout(seconds)
            try:
                kind, value = waiting.get(timeout=left)
            except queue.Empty:
                raise AttemptTimeout(seconds) from None
            if kind == "item":
                yield value
                continue
            finished = True
            if kind == "error":
                raise value
            return
    finally:
        stop.set()
        if not finished and on_abandon is not None:
            try:
                on_abandon()
            except Exception:  # noqa: BLE001 - best effort, as in run_with_deadline
                logger.debug("closing an abandoned provider stream failed", exc_info=True)


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    classify: Callable[[BaseException], Failure | None],
    describe: Callable[[Failure, int], str],
    on_abandon: Callable[[], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds, the failure is not retryable, or retries run out.

    Each attempt runs under ``policy.timeout`` (clipped to what is left of ``policy.budget``);
    ``on_abandon`` is called when an attempt is given up at its deadline. ``classify`` turns an
    exception into a :class:`Failure` (None: not ours, re-raise as is);
    ``describe(failure, attempts)`` writes the final message, which must not hold secrets.
    Raises :class:`EmbedderRequestError`.
    """
    started = time.monotonic()
    attempts = 0
    seen: int | None = None  # the last HTTP status an attempt got (a 429 storm, say)
    while True:
        attempts += 1
        limit = policy.timeout
        if policy.budget is not None:
            left = policy.budget - (time.monotonic() - started)
            limit = left if limit is None else min(limit, left)
        try:
            return run_with_deadline(fn, limit, on_abandon)
        except AttemptTimeout:
            if policy.timeout is not None and limit == policy.timeout:
                reason = f"no complete answer within {limit:g} s"
            else:
                reason = f"no complete answer before the {policy.budget:g} s budget ran out"
            if seen is not None:  # what the server said before it went quiet
                reason += f"; the attempt before got status {seen}"
            failure = Failure(True, None, reason)
        except Exception as exc:  # noqa: BLE001 - classify decides what is ours
            classified = classify(exc)
            if classified is None:
                raise
            failure = classified
            seen = failure.status if failure.status is not None else seen
        elapsed = time.monotonic() - started
        wait = policy.delay(attempts, failure.retry_after) if failure.retryable else 0.0
        exhausted = ""
        if failure.retryable and attempts > policy.max_retries:
            exhausted = "retries"
        elif failure.retryable and policy.budget is not None and elapsed + wait >= policy.budget:
            exhausted = "budget"
        if not failure.retryable or exhausted:
            failure = replace(failure, exhausted=exhausted, elapsed=elapsed)
            # ``from None``: the SDK's exception may quote the server's body verbatim.
            raise EmbedderRequestError(
                describe(failure, attempts),
                status=failure.status,
                attempts=attempts,
                retryable=failure.retryable,
            ) from None
        logger.info(
            "embedding request failed (%s); retry %d of %d in %.1f s",
            failure.reason or failure.status,
            attempts,
            policy.max_retries,
            wait,
        )
        sleep(wait)


def give_up_hint(failure: Failure, host: str = "that address") -> str:
    """The end of a "failed after N attempts" message: nothing listening at ``host``, or which
    limit stopped the retries."""
    if failure.refused:
        return nothing_listening(host, "rag.embedding")
    if failure.exhausted == "budget" and failure.retry_after:
        return (
            f"the server asked to wait {failure.retry_after:.0f} s, past what is left of "
            "rag.embedding.retry_budget: try again later or raise retry_budget"
        )
    if failure.exhausted == "budget":
        return (
            f"gave up after {failure.elapsed:.1f} s (rag.embedding.retry_budget); the server "
            "is not answering in time: try again later, or raise rag.embedding.timeout / "
            "retry_budget for a slow server"
        )
    return "try again later or raise rag.embedding.max_retries"
