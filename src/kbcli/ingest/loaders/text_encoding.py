"""Reading text files: BOM sniffing, UTF-16 without a BOM, a first-guess encoding, then
charset detection.

The file is decoded strictly in blocks (never ``errors="replace"``), so a file is either read
exactly or rejected with a :class:`~kbcli.errors.LoaderError` naming it.
"""

from __future__ import annotations

import codecs
import time
import unicodedata
from pathlib import Path

from kbcli.errors import LoaderError
from kbcli.ingest.files import open_regular, read_blocks, timed_out

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
UTF16_SNIFF_BYTES = 64 << 10
# Below this many bytes, UTF-16 without a BOM is recognised only when half of its characters
# are ASCII (a NUL high byte), and never without a NUL byte.
UTF16_MIN_BYTES = 128
# Decoded as UTF-16, text has almost no control codes, unassigned or private-use code points
# (binary data, and text read with the wrong byte order, has them everywhere), and few
# characters whose two bytes are ASCII letters (what bytes of ASCII text pair into).
_UTF16_MAX_ODD_SHARE = 0.01
_TEXT_CONTROLS = frozenset("\t\n\r\f\v")
_UTF16_CLAIM = "the file starts as {} text without a byte-order mark"
_UTF16_MAX_LETTER_PAIRS = 0.3
_ASCII_LETTERS = frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B))


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

    Regular files only, read once; at most ``max_bytes`` are read and reading and decoding
    stop after ``timeout`` seconds (LoaderError).
    """
    path = Path(path)
    limits = _Limits(max_bytes, timeout)
    try:
        fh, _ = open_regular(path)
        with fh:
            data = bytearray()
            for block in read_blocks(
                fh, path, limits.max_bytes, deadline=limits.deadline, timeout=limits.timeout
            ):
                data += block
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return _decode_text(data, path, encoding, limits)


def decode_text(
    data: bytes | bytearray,
    path: str | Path,
    encoding: str = "utf-8",
    *,
    timeout: float | None = None,
) -> str:
    """The text of a file's bytes ``data`` (read already), as :func:`read_text` decodes it;
    ``path`` names the file in errors."""
    return _decode_text(data, Path(path), encoding, _Limits(None, timeout))


def _decode_text(data: bytes | bytearray, path: Path, encoding: str, limits: _Limits) -> str:
    sample = bytes(data[:SAMPLE_SIZE])
    if not sample:
        return ""
    declared = bom_encoding(sample[:4])
    if declared is not None:
        return _decode_as_claimed(
            data, path, declared, limits, f"the file starts with a {declared} byte-order mark"
        )
    if b"\x00" in sample[:8192]:
        wide = utf16_without_bom(sample)
        if wide is not None:
            return _decode_as_claimed(data, path, wide, limits, _UTF16_CLAIM.format(wide.upper()))
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
        text = _decode(data, path, name, limits)
        if text is not None:
            return text
    # Last, UTF-16 with no NUL byte at all (CJK without a space or line break in ASCII): only
    # on a sample long enough that legacy or binary bytes could not pass for it by chance.
    wide = utf16_without_bom(sample) if len(sample) >= UTF16_MIN_BYTES else None
    if wide is not None:
        return _decode_as_claimed(data, path, wide, limits, _UTF16_CLAIM.format(wide.upper()))
    raise LoaderError(
        f"{path}: cannot decode the text (tried {', '.join(tried)}; no other encoding fits): {_FIX}"
    )


def utf16_without_bom(sample: bytes) -> str | None:
    """``"utf-16-le"`` or ``"utf-16-be"`` when ``sample`` (a file's first bytes, no BOM) is
    UTF-16 text; None otherwise (binary data, or text in another encoding).

    Text in the Latin, Greek or Cyrillic ranges, and any text with ASCII spaces, digits or line
    breaks, has a NUL in the high byte of those characters, but NULs alone do not tell it from
    binary. Decoded strictly with the right byte order, UTF-16 text has no NUL character, at
    most 1% control codes (other than tab, line and page breaks), unassigned or private-use
    code points, and few characters made of two ASCII letters (under 30%; CJK text has about
    10%). Binary data fails one of these: unpaired surrogates (an error), NUL characters from
    zero padding, or, for strings separated by NULs (an ELF's symbol table, ``find -print0``),
    mostly pairs of ASCII letters. The byte order with fewer odd characters wins; on a tie, the
    one whose high bytes hold more of the NULs. A sample under :data:`UTF16_MIN_BYTES` (64
    characters) must also have a NUL in half of its high bytes: a few random bytes would too
    often pass for text otherwise."""
    head = sample[:UTF16_SNIFF_BYTES]
    head = head[: len(head) - len(head) % 2]
    high_nuls = {"utf-16-le": head[1::2].count(0), "utf-16-be": head[0::2].count(0)}
    best: tuple[int, int, str] | None = None
    for name, nuls in high_nuls.items():
        if len(head) < UTF16_MIN_BYTES and 2 * nuls < len(head) // 2:
            continue  # a few random bytes pass the tests below by chance: ask for ASCII text
        odd = _odd_characters(head, name)
        if odd is not None and (best is None or (odd, -nuls) < best[:2]):
            best = (odd, -nuls, name)
    return best[2] if best is not None else None


def _odd_characters(head: bytes, encoding: str) -> int | None:
    """How many characters of ``head`` decoded strictly as ``encoding`` no text has; None when
    it does not decode or is not text. The end may cut a surrogate pair: it stays undecoded."""
    try:
        text = codecs.getincrementaldecoder(encoding)("strict").decode(head, final=False)
    except UnicodeDecodeError:
        return None
    if not text or "\x00" in text:
        return None
    odd = letter_pairs = 0
    for char in text:
        category = unicodedata.category(char)
        if category in ("Cn", "Co", "Cs") or (category == "Cc" and char not in _TEXT_CONTROLS):
            odd += 1
        code = ord(char)
        if code >> 8 in _ASCII_LETTERS and code & 0xFF in _ASCII_LETTERS:
            letter_pairs += 1
    if odd > _UTF16_MAX_ODD_SHARE * len(text) or letter_pairs > _UTF16_MAX_LETTER_PAIRS * len(text):
        return None
    return odd


def _decode_as_claimed(
    data: bytes | bytearray, path: Path, encoding: str, limits: _Limits, claim: str
) -> str:
    """``data`` decoded as ``encoding``, which ``claim`` says it is; else LoaderError."""
    text = _decode(data, path, encoding, limits)
    if text is None:
        raise LoaderError(f"{path}: {claim} but is not valid {encoding}: {_FIX}")
    return text


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

    def check(self, path: Path) -> None:
        """LoaderError once the deadline has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise timed_out(path, self.timeout)


def _decode(data: bytes | bytearray, path: Path, encoding: str, limits: _Limits) -> str | None:
    """``data`` decoded strictly (one call: the text and the bytes are the only copies held);
    None when it is not valid ``encoding``."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise LoaderError(
            f"{path}: unknown text encoding {encoding!r}: use a name such as utf-8 or gb18030"
        ) from None
    limits.check(path)
    try:
        text = codecs.decode(data, encoding, "strict")
    except UnicodeDecodeError:
        return None
    limits.check(path)
    return text
