"""PDF and DOCX text extraction.

The ``extract_*`` functions run inside :func:`kbcli.ingest.bounded.run_bounded`'s child
process, so they take a path string and return plain picklable data:
``(list of (text, metadata), list of warnings)``. They raise LoaderError for bad files.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
import zlib
from typing import Any

from ..errors import LoaderError
from .markdown import HEADING_SEPARATOR
from .reading import open_regular, read_bounded

Extracted = tuple[list[tuple[str, dict[str, Any]]], list[str]]

# DOCX (zip) safety limits, checked from the zip directory before anything is unpacked.
# python-docx reads every part into memory and lxml needs several times an XML part's size, so
# the XML total is held well below what the parse worker may allocate.
DOCX_MAX_UNCOMPRESSED_MB = 512  # all members
DOCX_MAX_XML_MB = 100  # the XML parts (.xml, .rels): what lxml parses
DOCX_MAX_MEMBERS = 10_000
DOCX_MAX_RATIO = 100
DOCX_RATIO_FLOOR_MB = 20  # small files may compress very well; only judge the ratio above this
DOCX_PROLOG_BYTES = 4096  # an XML part must reach its root element within this many bytes
_XML_PARTS = (".xml", ".rels")

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _pdf_errors() -> tuple[type[BaseException], ...]:
    from pypdf.errors import PyPdfError

    # pypdf reports malformed input through its own errors but also through built-in ones
    # (KeyError for a missing dictionary entry, TypeError for an object of the wrong kind...).
    # These are caught only around calls into pypdf, never around our own code.
    return (
        PyPdfError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        zlib.error,
        RecursionError,
        OSError,
    )


def extract_pdf(path: str, max_bytes: int | None = None) -> Extracted:
    """Text of each page with ``{"page": n}`` (1-based); pages without text are left out.

    At most ``max_bytes`` of the file are read."""

    # pypdf logs its repairs ("EOF marker not found"...) as warnings; our errors say it better.
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _extract_pdf(path, max_bytes)
    finally:
        logger.setLevel(level)


def _extract_pdf(path: str, max_bytes: int | None) -> Extracted:
    import pypdf
    from pypdf.errors import DependencyError, FileNotDecryptedError

    errors = _pdf_errors()
    data = io.BytesIO(read_bounded(path, max_bytes))
    try:
        reader = pypdf.PdfReader(data)
        if reader.is_encrypted and not reader.decrypt(""):
            raise FileNotDecryptedError("password required")
        count = len(reader.pages)
    except FileNotDecryptedError:
        raise LoaderError(
            f"{path}: the PDF is encrypted and needs a password: save an unprotected copy "
            "(e.g. qpdf --decrypt --password=... in.pdf out.pdf) and load that"
        ) from None
    except DependencyError as exc:
        raise LoaderError(
            f"{path}: cannot decrypt the PDF ({exc}): pip install cryptography"
        ) from None
    except errors as exc:
        raise LoaderError(
            f"{path}: not a readable PDF, it may be truncated or corrupt ({_reason(exc)}): "
            "check the file opens in a PDF viewer and re-save or re-download it"
        ) from None

    sections: list[tuple[str, dict[str, Any]]] = []
    warnings: list[str] = []
    failed: list[str] = []
    for number in range(1, count + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except errors as exc:
            failed.append(f"page {number}: {_reason(exc)}")
            continue
        if text.strip():
            sections.append((text, {"page": number}))
    if count and len(failed) == count:
        raise LoaderError(
            f"{path}: no page of the PDF could be read ({failed[0]}): the file is corrupt; "
            "re-save or re-download it"
        )
    for problem in failed:
        warnings.append(f"{path}: {problem}: its text was skipped")
    if count == 0:
        warnings.append(f"{path}: the PDF has no pages")
    elif not sections and not failed:
        warnings.append(
            f"{path}: no extractable text on any of its {count} pages; it looks scanned: "
            "run OCR first (e.g. ocrmypdf in.pdf out.pdf)"
        )
    return sections, warnings


def check_docx_zip(path: str) -> None:
    """Reject a .docx that is not a zip, would unpack too big or too many (zip bomb), or has
    an XML part with a DOCTYPE (entity expansion, external entities): before parsing it."""
    try:
        fh, _ = open_regular(path)
        with fh, zipfile.ZipFile(fh) as archive:
            infos = archive.infolist()
            _check_zip_sizes(path, infos)
            for info in infos:
                if info.filename.lower().endswith(_XML_PARTS):
                    _check_xml_prolog(path, info.filename, archive)
    except zipfile.BadZipFile:
        raise LoaderError(
            f"{path}: not a valid .docx file (not a zip archive): open it in Word and save it "
            "again as .docx"
        ) from None
    except (zipfile.LargeZipFile, NotImplementedError, RuntimeError, zlib.error, EOFError) as exc:
        raise LoaderError(
            f"{path}: not a readable .docx file ({_reason(exc)}): open it in Word and save it "
            "again as .docx"
        ) from None
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None


def _check_zip_sizes(path: str, infos: list[zipfile.ZipInfo]) -> None:
    mb = 1 << 20
    if len(infos) > DOCX_MAX_MEMBERS:
        raise LoaderError(
            f"{path}: the archive has {len(infos)} members, over the {DOCX_MAX_MEMBERS} safety "
            "limit for .docx files; not loaded"
        )
    total = sum(info.file_size for info in infos)
    packed = sum(info.compress_size for info in infos) or 1
    xml = sum(info.file_size for info in infos if info.filename.lower().endswith(_XML_PARTS))
    if total > DOCX_MAX_UNCOMPRESSED_MB * mb:
        raise LoaderError(
            f"{path}: unpacks to {total / mb:.0f} MB, over the {DOCX_MAX_UNCOMPRESSED_MB} MB "
            "safety limit for .docx files; not loaded"
        )
    if xml > DOCX_MAX_XML_MB * mb:
        raise LoaderError(
            f"{path}: its XML parts unpack to {xml / mb:.0f} MB, over the {DOCX_MAX_XML_MB} MB "
            "safety limit for .docx files; not loaded"
        )
    if total > DOCX_RATIO_FLOOR_MB * mb and total / packed > DOCX_MAX_RATIO:
        raise LoaderError(
            f"{path}: compressed {total / packed:.0f}:1 ({total / mb:.0f} MB unpacked), which "
            "looks like a zip bomb; not loaded"
        )


def _check_xml_prolog(path: str, name: str, archive: zipfile.ZipFile) -> None:
    """Refuse an XML part with a DOCTYPE: Office files never have one, entity attacks do."""
    with archive.open(name) as member:
        head = member.read(DOCX_PROLOG_BYTES)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = head.decode("utf-16", errors="replace")
    else:
        text = head.decode("utf-8", errors="replace")
    i = 0
    while True:
        while i < len(text) and text[i] in " \t\r\n\ufeff":
            i += 1
        if text.startswith("<?", i):
            end = text.find("?>", i)
        elif text.startswith("<!--", i):
            end = text.find("-->", i)
        else:
            break
        if end < 0:
            i = len(text)
            break
        i = end + 2
    rest = text[i:]
    if rest.upper().startswith("<!DOCTYPE") or "<!ENTITY" in rest.upper():
        raise LoaderError(
            f"{path}: {name} declares a DOCTYPE or entities, which Word never writes (an XML "
            "entity attack?); not loaded"
        )
    if len(head) == DOCX_PROLOG_BYTES and not rest.startswith("<"):
        raise LoaderError(f"{path}: {name} does not start like an XML part Word writes; not loaded")


def _heading_level(paragraph: Any) -> int | None:
    name = getattr(paragraph.style, "name", None) or ""
    if name.strip().lower() == "title":
        return 0
    match = _HEADING_STYLE.match(name.strip())
    return int(match.group(1)) if match else None


def _table_text(table: Any) -> str:
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # a merged cell is repeated once per grid column
                continue
            seen.add(id(cell._tc))
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def extract_docx(path: str, max_bytes: int | None = None) -> Extracted:
    """Paragraphs and tables in order, one section per heading with its heading path.

    At most ``max_bytes`` of the file are read."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import LxmlError

    data = io.BytesIO(read_bounded(path, max_bytes))
    try:
        document = docx.Document(data)
        body = list(document.iter_inner_content())
    except (
        PackageNotFoundError,
        zipfile.BadZipFile,
        KeyError,
        ValueError,
        LxmlError,
        zlib.error,
    ) as exc:
        raise LoaderError(
            f"{path}: not a readable .docx file ({_reason(exc)}): open it in Word and save it "
            "again as .docx"
        ) from None

    sections: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[int, str]] = []
    blocks: list[str] = []
    meta: dict[str, Any] = {}

    def flush() -> None:
        if any(b.strip() for b in blocks):
            sections.append(("\n\n".join(blocks), meta))

    for item in body:
        if isinstance(item, Table):
            text = _table_text(item)
            if text:
                blocks.append(text)
            continue
        text = item.text.strip()
        level = _heading_level(item)
        if level is None or not text:
            if text:
                blocks.append(text)
            continue
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        blocks = [text]
        meta = {"heading": HEADING_SEPARATOR.join(t for _, t in stack)}
    flush()
    return sections, []
