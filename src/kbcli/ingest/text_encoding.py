"""Reading text files: BOM sniffing, a first-guess encoding, then charset detection.

The file is decoded strictly in blocks (never ``errors="replace"``), so a file is either read
exactly or rejected with a :class:`~kbcli.errors.LoaderError` naming it.
"""

from __future__ import annotations

import codecs
import time
from pathlib import Path

from ..errors import LoaderError
from .reading import open_regular, read_blocks

BLOCK_SIZE = 1 << 20
SAMPLE_SIZE = 1 << 20
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# When one of these is (nearly) as plausible as the best guess, it wins: detection on short
# samples is weak, and these are by far the most common legacy encodings of Chinese and
# Western text. GB2312 and GBK are subsets of GB18030, so decoding them as GB18030 is safe.
_PREFERRED = (
    ({"gb2312", "gbk", "gb18030", "hz", "hz_gb_2312", "cp936"}, "gb18030"),
    ({"cp1252", "latin_1", "iso8859_1", "iso8859_15"}, "cp1252"),
)
_MARGIN = 0.1
_WIDE = ("utf_16", "utf_32")
_FIX = "save it as UTF-8 and load it again"


def bom_encoding(head: bytes) -> str | None:
    """The encoding announced by a byte-order mark at the start of ``head``, if any."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def read_text(
    path: str | Path,
    encoding: str = "utf-8",
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
) -> str:
    """Return the text of ``path``: BOM first, then ``encoding``, then a detected encoding.

    Regular files only; at most ``max_bytes`` are read and decoding stops after ``timeout``
    seconds (LoaderError).
    """
    path = Path(path)
    limits = _Limits(max_bytes, timeout)
    try:
        fh, _ = open_regular(path)
        with fh:
            sample = fh.read(SAMPLE_SIZE)
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if not sample:
        return ""
    declared = bom_encoding(sample[:4])
    if declared is not None:
        text = _decode_file(path, declared, limits)
        if text is None:
            raise LoaderError(
                f"{path}: the file starts with a {declared} byte-order mark but "
                f"is not valid {declared}: {_FIX}"
            )
        return text
    if b"\x00" in sample[:8192]:
        raise LoaderError(
            f"{path}: looks like a binary file (NUL bytes), not text: "
            "load the original document, or save it as UTF-8 text"
        )
    tried = []
    for candidate in (encoding, None):
        name = candidate or detect_encoding(sample, len(sample) == SAMPLE_SIZE)
        if name is None or _codec(name) in tried:
            continue
        tried.append(_codec(name))
        text = _decode_file(path, name, limits)
        if text is not None:
            return text
    raise LoaderError(
        f"{path}: cannot decode the text (tried {', '.join(tried)}; no other encoding fits): {_FIX}"
    )


def detect_encoding(sample: bytes, truncated: bool = False) -> str | None:
    """Guess the encoding of ``sample`` (charset-normalizer), preferring GB18030 and cp1252."""
    import charset_normalizer

    if truncated:
        # Cut at a newline so the sample does not end inside a multi-byte character;
        # 0x0A is never a trail byte in the legacy CJK or single-byte encodings.
        cut = sample.rfind(b"\n")
        if cut > 0:
            sample = sample[: cut + 1]
    matches = [m for m in charset_normalizer.from_bytes(sample) if not m.encoding.startswith(_WIDE)]
    if not matches:
        return None
    best = matches[0]
    for family, choice in _PREFERRED:
        if any(m.encoding in family and m.chaos <= best.chaos + _MARGIN for m in matches):
            return choice
    return best.encoding


def _codec(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return name


class _Limits:
    """The byte limit and the deadline of one read_text call."""

    def __init__(self, max_bytes: int | None, timeout: float | None):
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout is not None else None


def _decode_file(path: Path, encoding: str, limits: _Limits) -> str | None:
    """Decode the whole file strictly, block by block; None when it is not valid ``encoding``."""
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    except LookupError:
        raise LoaderError(
            f"{path}: unknown text encoding {encoding!r}: use a name such as utf-8 or gb18030"
        ) from None
    parts: list[str] = []
    try:
        fh, _ = open_regular(path)
        with fh:
            for block in read_blocks(
                fh, path, limits.max_bytes, deadline=limits.deadline, timeout=limits.timeout
            ):
                parts.append(decoder.decode(block))
            parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        return None
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    text = "".join(parts)
    del parts
    return text
