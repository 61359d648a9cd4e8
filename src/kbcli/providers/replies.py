"""Replies read within bounds, whatever a server sends: a body up to a number of bytes
(:func:`read_capped` for urllib, :func:`reply_cap_hook` for the httpx clients inside the SDKs),
an event stream line by line, a compressed body inflated within the same bounds, an error's
body up to :data:`MAX_ERROR_BYTES` (only its message is shown). Past a bound the reading stops
with :class:`ReplyTooLarge` (an error's body is cut there instead), so the rest is never held
in memory."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

READ_BLOCK = 64 << 10
MAX_ERROR_BYTES = 64 << 10  # of an error's body: only its message is shown


class UnreadableReply(Exception):
    """A reply kb cannot read within its bounds (an encoding it did not ask for)."""


class ReplyTooLarge(Exception):
    """A server's reply passed the bytes kb reads of it (raised while it is read, so the rest
    is never held in memory). ``limit`` is that bound in bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the reply passed {megabytes(limit)}")
        self.limit = limit


def megabytes(size: int) -> str:
    """``16 MB``, ``1.5 MB``, ``0.06 MB``: a byte count as messages show it."""
    return f"{size / (1 << 20):.3g} MB"


class _Readable(Protocol):
    """What :func:`read_capped` calls on a urllib response."""

    def read(self, amt: int, /) -> bytes: ...


class _Inner(Protocol):
    """An httpx (or httpx2) ``SyncByteStream``: the reply's body, in blocks."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class _Capped(Protocol):
    """The fields :func:`reply_cap_hook` sets on a ``CappedStream`` (a class made at run time,
    see :func:`_capped_class`)."""

    inner: _Inner
    limit: int
    inflate: Callable[[bytes], Iterator[bytes]] | None
    per_line: bool
    cut: bool


def read_capped(response: _Readable, limit: int) -> bytes:
    """The body of the urllib ``response``, read in blocks; :class:`ReplyTooLarge` as soon as
    it passes ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        block = response.read(min(READ_BLOCK, limit + 1 - size))
        if not block:
            return b"".join(parts)
        size += len(block)
        if size > limit:
            raise ReplyTooLarge(limit)
        parts.append(block)


def too_large_in(exc: BaseException | None) -> ReplyTooLarge | None:
    """The :class:`ReplyTooLarge` that caused ``exc`` (an SDK may wrap it), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ReplyTooLarge):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def reply_cap_hook(limit: int) -> Callable[[Any], None]:
    """An httpx (or httpx2) ``response`` event hook bounding what is read of each reply,
    decoded: a body at ``limit`` bytes, an event stream (``text/event-stream``) at ``limit``
    bytes per line, its total left to the caller (which counts the text it gets). A gzip or
    deflate body is inflated here, within the same bounds (a small compressed reply can
    inflate to gigabytes); any other encoding is refused. An error's body (status 400 and
    up) is cut at :data:`MAX_ERROR_BYTES` (or ``limit`` when lower) without raising, so the
    SDK still reports the status and the start of the server's message. Give the client
    ``Accept-Encoding: identity`` too, so a server has no reason to compress.

    Raises :class:`ReplyTooLarge` from the reading of the body (the SDK's call, or its
    stream's iteration)."""

    def hook(response: Any) -> None:  # an httpx or an httpx2 Response: either library
        module = sys.modules[type(response).__module__.split(".")[0]]
        kind = response.headers.get("content-type", "").lower()
        encoding = response.headers.get("content-encoding", "").strip().lower()
        inflate: Callable[[bytes], Iterator[bytes]] | None = None
        if encoding not in ("", "identity"):
            inflate = _inflater(encoding)
            del response.headers["content-encoding"]  # inflated here, not again by httpx
        stream = _capped_class(module.SyncByteStream)()
        stream.inner, stream.limit, stream.inflate = response.stream, limit, inflate
        stream.per_line = kind.startswith("text/event-stream")
        stream.cut = response.status_code >= 400
        if stream.cut:
            stream.per_line, stream.limit = False, min(limit, MAX_ERROR_BYTES)
        response.stream = stream

    return hook


_CAPPED: dict[type, type] = {}


def _capped_class(base: type) -> type:
    """A subclass of the client's own ``SyncByteStream`` (httpx checks the type) that reads
    its inner stream within bounds."""
    if base not in _CAPPED:
        body = {"__iter__": _capped_iter, "close": _close}
        _CAPPED[base] = type("CappedStream", (base,), body)
    return _CAPPED[base]


def _capped_iter(self: _Capped) -> Iterator[bytes]:
    seen = 0  # bytes of the body, or of the line being read (an event stream)
    for raw in self.inner:
        for chunk in self.inflate(raw) if self.inflate is not None else (raw,):
            if self.per_line:
                cut = chunk.rfind(b"\n")
                seen = len(chunk) - cut - 1 if cut >= 0 else seen + len(chunk)
            else:
                seen += len(chunk)
            if seen > self.limit:
                if not self.cut:
                    raise ReplyTooLarge(self.limit)
                yield chunk[: len(chunk) - (seen - self.limit)]
                return
            yield chunk


def _close(self: _Capped) -> None:
    self.inner.close()


def _inflater(encoding: str) -> Callable[[bytes], Iterator[bytes]]:
    if encoding in ("gzip", "x-gzip"):
        return _Inflater(16 + zlib.MAX_WBITS).feed
    if encoding == "deflate":  # a zlib stream, or (some servers) a raw deflate one
        return _Inflater(zlib.MAX_WBITS, raw_fallback=True).feed
    raise UnreadableReply(f"a reply compressed as {encoding!r}, which kb did not ask for")


class _Inflater:
    """Inflates a compressed body piece by piece, never more than :data:`READ_BLOCK` at once."""

    def __init__(self, wbits: int, *, raw_fallback: bool = False) -> None:
        self.inflater = zlib.decompressobj(wbits)
        self.raw_fallback = raw_fallback

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            try:
                out = self.inflater.decompress(data, READ_BLOCK)
            except zlib.error as exc:
                if not self.raw_fallback:
                    reason = f"a compressed reply that cannot be inflated ({exc})"
                    raise UnreadableReply(reason) from None
                self.inflater, self.raw_fallback = zlib.decompressobj(-zlib.MAX_WBITS), False
                continue
            self.raw_fallback = False
            if out:
                yield out
            data = self.inflater.unconsumed_tail
