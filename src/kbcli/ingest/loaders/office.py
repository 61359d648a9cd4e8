"""PDF and DOCX text extraction.

The ``extract_*`` functions run inside :func:`kbcli.ingest.loaders.bounded.run_bounded`'s child
process, so they take a path string and return plain picklable data:
``(list of (text, metadata), list of warnings)`` (PDF: also the pages left for OCR, see
:mod:`kbcli.ingest.loaders.ocr`). They raise LoaderError for bad files.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
import zlib
from typing import TYPE_CHECKING, Any

from kbcli.errors import LoaderError
from kbcli.ingest.files import open_regular, read_bounded
from kbcli.ingest.markdown import HEADING_SEPARATOR

if TYPE_CHECKING:  # pypdf and python-docx are imported when such a file is read
    from docx.table import Table
    from docx.text.paragraph import Paragraph
    from pypdf import PageObject

Extracted = tuple[list[tuple[str, dict[str, Any]]], list[str]]
# ... the pages to recognise, (page number, its text, whether it shows an image), and the count
ExtractedPdf = tuple[list[tuple[str, dict[str, Any]]], list[str], list[tuple[int, str, bool]], int]

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


def extract_pdf(
    path: str, max_bytes: int | None = None, min_chars: int = 0, sha256: str | None = None
) -> ExtractedPdf:
    """Text of each page with ``{"page": n}`` (1-based), warnings, the pages with fewer than
    ``min_chars`` characters of text (none at all with 0) as ``(page, text, shows an image)``:
    the candidates for OCR, left out of the sections, and the number of pages.

    At most ``max_bytes`` of the file are read; with ``sha256``, they must have that hash
    (:class:`~kbcli.ingest.files.FileChanged`)."""

    # pypdf logs its repairs ("EOF marker not found"...) as warnings; our errors say it better.
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _extract_pdf(path, max_bytes, min_chars, sha256)
    finally:
        logger.setLevel(level)


def _extract_pdf(
    path: str, max_bytes: int | None, min_chars: int, sha256: str | None
) -> ExtractedPdf:
    import pypdf
    from pypdf.errors import DependencyError, FileNotDecryptedError

    errors = _pdf_errors()
    data = io.BytesIO(read_bounded(path, max_bytes, sha256=sha256))
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
    scanned: list[tuple[int, str, bool]] = []
    for number in range(1, count + 1):
        page = reader.pages[number - 1]
        try:
            text = page.extract_text() or ""
        except errors as exc:
            failed.append(f"page {number}: {_reason(exc)}")
            continue
        chars = len("".join(text.split()))
        if chars and chars >= min_chars:
            sections.append((text, {"page": number}))
        else:
            scanned.append((number, text, _shows_image(page, errors)))
    if count and len(failed) == count:
        raise LoaderError(
            f"{path}: no page of the PDF could be read ({failed[0]}): the file is corrupt; "
            "re-save or re-download it"
        )
    for problem in failed:
        warnings.append(f"{path}: {problem}: its text was skipped")
    if count == 0:
        warnings.append(f"{path}: the PDF has no pages")
    return sections, warnings, scanned, count


def _shows_image(page: PageObject, errors: tuple[type[BaseException], ...]) -> bool:
    """Whether a page draws an image XObject (a scan does; a blank page does not). Read from
    its resources only: parsing the content stream for inline images would inflate it whole,
    and a bomb's inflates to gigabytes."""
    try:
        return _has_image(page.get("/Resources"), 0)
    except errors:
        return True  # unreadable resources: let OCR (or the warning) look at it


def _has_image(resources: Any, depth: int) -> bool:
    # ``resources``: a pypdf object of whatever kind the file holds (read with get_object)
    if resources is None or depth > 4:  # forms inside forms: deeper is not a scan
        return False
    xobjects = resources.get_object().get("/XObject")
    if xobjects is None:
        return False
    for ref in xobjects.get_object().values():
        xobject = ref.get_object()
        kind = xobject.get("/Subtype")
        if kind == "/Image":
            return True
        if kind == "/Form" and _has_image(xobject.get("/Resources"), depth + 1):
            return True
    return False


def check_docx_zip(path: str) -> None:
    """Reject a .docx that is not a zip, is truncated or damaged, would unpack too big or too
    many (zip bomb), or has an XML part with a DOCTYPE (entity expansion, external entities):
    before parsing it."""
    try:
        fh, _ = open_regular(path)
        with fh, zipfile.ZipFile(fh) as archive:
            infos = archive.infolist()
            _check_zip_sizes(path, infos)
            for info in infos:
                if info.filename.lower().endswith(_XML_PARTS):
                    _check_xml_prolog(path, info.filename, archive)
    except LoaderError:
        raise
    except _ZIP_DAMAGE as exc:
        raise _zip_error(path, exc) from None
    except (zipfile.LargeZipFile, NotImplementedError, RuntimeError) as exc:
        raise LoaderError(
            f"{path}: not a readable .docx file ({_reason(exc)}): open it in Word and save it "
            "again as .docx"
        ) from None
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None


# How a damaged zip shows: a bad directory or header (BadZipFile, also "Bad CRC-32" when a
# member's data does not match its checksum), corrupt deflate data (zlib.error), a member cut
# short (EOFError).
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError)
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_REPAIR = (
    "open it in Word or LibreOffice (they can often repair it) and save it again as .docx, or "
    "restore an undamaged copy"
)
_CRC_MEMBER = re.compile(r"Bad CRC-32 for file '(.*)'$", re.DOTALL)


def _zip_error(path: str, exc: BaseException, raw: bytes | None = None) -> LoaderError:
    """The one-line error for a .docx whose zip is not one, is cut short or is damaged.

    With the file's bytes ``raw``, the first member that fails to unpack is named when ``exc``
    does not say which one it was."""
    if isinstance(exc, zipfile.BadZipFile) and str(exc) == "File is not a zip file":
        head = raw[:8] if raw is not None else _head(path)
        if head.startswith(_OLE_MAGIC):
            return LoaderError(
                f"{path}: not a .docx zip archive but an OLE file (a password-protected document, "
                "or a Word 97-2003 .doc renamed .docx): remove the password or save it as .docx "
                "in Word"
            )
        if not head.startswith(b"PK"):
            return LoaderError(
                f"{path}: not a valid .docx file (not a zip archive): open it in Word and save "
                "it again as .docx"
            )
        return LoaderError(
            f"{path}: the file is truncated or damaged (its zip directory is missing or cut "
            f"short): {_REPAIR}"
        )
    name = None
    if raw is not None:
        found = _damaged_member(raw)
        if found:
            name, exc = found
    return _damaged(path, exc, name)


def _damaged(path: str, exc: BaseException, name: str | None) -> LoaderError:
    """The error for a .docx whose member ``name`` (None: unknown) failed with ``exc``."""
    crc = _CRC_MEMBER.match(str(exc)) if isinstance(exc, zipfile.BadZipFile) else None
    part = f"its part {name}" if name else "a part"
    if crc:
        problem = f"its part {crc.group(1)} fails its CRC-32 checksum"
    elif isinstance(exc, zlib.error):
        problem = f"{part} has corrupt compressed data ({exc})"
    elif isinstance(exc, EOFError):
        problem = f"{part} is cut short"
    else:
        problem = f"{part} cannot be unpacked ({_reason(exc)})"
    return LoaderError(f"{path}: the file is damaged: {problem}: {_REPAIR}")


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(8)
    except OSError:
        return b""


def _unpack_error(archive: zipfile.ZipFile, name: str) -> BaseException | None:
    """The error unpacking member ``name`` to its end (where its CRC-32 is checked), if any."""
    try:
        with archive.open(name) as member:
            while member.read(1 << 20):
                pass
    except _ZIP_DAMAGE as exc:
        return exc
    return None


def _damaged_member(raw: bytes) -> tuple[str, BaseException] | None:
    """The first member of the zip ``raw`` that fails to unpack, with its error; None when
    every member unpacks (or the directory itself cannot be read)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except _ZIP_DAMAGE:
        return None
    with archive:
        for name in archive.namelist():
            exc = _unpack_error(archive, name)
            if exc is not None:
                return name, exc
    return None


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
    try:
        with archive.open(name) as member:
            head = member.read(DOCX_PROLOG_BYTES)
    except _ZIP_DAMAGE as exc:
        raise _damaged(path, exc, name) from None
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
        damage = _unpack_error(archive, name)  # garbage at the start: a bad checksum?
        if damage is not None:
            raise _damaged(path, damage, name)
        raise LoaderError(f"{path}: {name} does not start like an XML part Word writes; not loaded")


def _heading_level(paragraph: Paragraph) -> int | None:
    name = getattr(paragraph.style, "name", None) or ""
    if name.strip().lower() == "title":
        return 0
    match = _HEADING_STYLE.match(name.strip())
    return int(match.group(1)) if match else None


def _table_text(table: Table) -> str:
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


def extract_docx(path: str, max_bytes: int | None = None, sha256: str | None = None) -> Extracted:
    """Paragraphs and tables in order, one section per heading with its heading path.

    At most ``max_bytes`` of the file are read; with ``sha256``, they must have that hash."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import LxmlError

    raw = read_bounded(path, max_bytes, sha256=sha256)
    try:
        document = docx.Document(io.BytesIO(raw))
        body = list(document.iter_inner_content())
    except _ZIP_DAMAGE as exc:
        raise _zip_error(path, exc, raw) from None
    except (PackageNotFoundError, KeyError, ValueError, LxmlError) as exc:
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
