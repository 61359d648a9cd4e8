"""Document loaders and the extension registry.

:class:`DefaultDocumentLoader` picks a loader by file extension from a registry that users can
extend with :func:`register_loader`. Every error is a one-line :class:`LoaderError`:
``"<path>: <problem>[: <fix>]"``. Non-fatal problems (a scanned PDF, a page that could not be
read) are reported in ``last_warnings`` (see :class:`DefaultDocumentLoader`).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kbcli.ingest.loaders.ocr as ocr_pages
from kbcli.config.lookup import OcrConfig
from kbcli.errors import InvalidOptionError, LoaderError, UnsupportedFormatError, require
from kbcli.ingest.files import FileContent, limit_bytes, not_regular, timed_out
from kbcli.ingest.loaders import layout
from kbcli.ingest.loaders.bounded import ParseTimeout, run_bounded
from kbcli.ingest.loaders.html import Extracted, extract_html
from kbcli.ingest.loaders.office import check_docx_zip, extract_docx, extract_pdf
from kbcli.ingest.loaders.text_encoding import decode_text, read_text
from kbcli.ingest.normalizers import StructurePreservingNormalizer
from kbcli.protocols import DocumentLoaderProtocol, SectionLoaderProtocol
from kbcli.types import Section

T = TypeVar("T")
#: What :func:`register_loader` takes: an object with ``load(path)``, ``load_sections(path)``
#: or both (and optionally ``last_warnings``).
RegisteredLoader = DocumentLoaderProtocol | SectionLoaderProtocol

SECTION_SEPARATOR = "\n\n"


class BuiltinLoader:
    """Base of the built-in loaders: ``load`` joins what ``load_sections`` returns.

    ``last_warnings`` holds the warnings of the latest call (empty when all went well).
    :class:`DefaultDocumentLoader` passes its ``encoding`` and ``timeout`` through
    :meth:`configured`, so a subclass must accept both as keyword arguments; it then sets
    ``max_bytes`` and ``ocr`` (the ``ocr`` settings), and ``sha256`` when the bytes it reads
    must be those a caller hashed (a parser in the worker hashes what it reads: ``FileChanged``
    when they differ; ``checked`` is then True after a call whose every read was compared).
    ``last_ocr`` is ``{"pages", "seconds"}`` when the latest call recognised pages, else None.
    ``timeout`` bounds one file's whole reading: its parsing and every page OCR recognises.
    """

    def __init__(self, encoding: str = "utf-8", timeout: float | None = None):
        self.encoding = encoding
        self.timeout = timeout
        self.max_bytes: int | None = (
            None  # read at most this many bytes (set by the default loader)
        )
        self.ocr = OcrConfig()
        self.sha256: str | None = None
        self.checked = False
        self.last_warnings: list[str] = []
        self.last_ocr: dict[str, Any] | None = None
        self._deadline: float | None = None  # when this file's ``timeout`` runs out

    def configured(self, encoding: str, timeout: float | None) -> BuiltinLoader:
        """A fresh copy of this loader using ``encoding`` and ``timeout``."""
        return type(self)(encoding=encoding, timeout=timeout)

    def load(self, path: str | Path) -> str:
        """The whole text: the sections' texts joined by a blank line."""
        return SECTION_SEPARATOR.join(s.text for s in self.load_sections(path))

    def load_sections(self, path: str | Path) -> list[Section]:
        """The file as sections of text with structural metadata."""
        raise NotImplementedError

    def _extract_bounded(
        self, extract: Callable[..., Extracted], path: str | Path
    ) -> list[Section]:
        """Run ``extract(path)`` in the bounded worker (``bounded.py``); keep its warnings."""
        self.last_warnings = []
        self._start_clock()
        sections, self.last_warnings = self._bounded(extract, path, self.sha256)
        self.checked = self.sha256 is not None
        return [Section(text, meta) for text, meta in sections]

    def _start_clock(self) -> None:
        """The file's ``timeout`` starts now (every bounded call of it counts against it)."""
        self._deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def _left(self) -> float | None:
        """Seconds left of the file's ``timeout`` (None: no limit)."""
        if self.timeout is None:
            return None
        if self._deadline is None:
            self._start_clock()
        assert self._deadline is not None
        return self._deadline - time.monotonic()

    def _bounded(self, func: Callable[..., T], path: str | Path, *args: object) -> T:
        """``func(path, max_bytes, *args)`` in the bounded worker, within what is left of the
        file's ``timeout``."""
        self.last_ocr = None
        self.checked = False
        left = self._left()
        if left is not None and left <= 0:
            raise timed_out(path, self.timeout)
        try:
            return run_bounded(
                func,
                (str(path), self.max_bytes, *args),
                timeout=left,
                label=str(path),
                file_size=_size(path),
            )
        except ParseTimeout:
            raise timed_out(path, self.timeout) from None

    def _ocr_off(self) -> str | None:
        """Why pages cannot be recognised here (OCR off or not installed), or None."""
        if not self.ocr.enabled:
            return "OCR is off (ocr.enabled: false in jianmu.yaml)"
        return ocr_pages.missing()

    def _recognise(
        self,
        scan: Callable[..., ocr_pages.PageScan],
        path: str | Path,
        numbers: list[int],
        kind: str = "scanned pages",
    ) -> dict[int, str]:
        """Recognise pages ``numbers`` of ``path`` with ``scan``, one bounded call each, at
        most ``ocr.max_pages`` of them (a warning names the file and how many were read) and
        all within the file's ``timeout`` (past it: LoaderError, the file is not indexed):
        page number -> text; failures become warnings, the time goes to ``last_ocr``."""
        cap = self.ocr.max_pages
        if len(numbers) > cap:
            self.last_warnings.append(
                f"{path}: only the first {cap:,} of its {len(numbers):,} {kind} were read by "
                f"OCR (ocr.max_pages): raise ocr.max_pages to read them all"
            )
            numbers = numbers[:cap]
        left = self._left()
        run = ocr_pages.run_pages(
            scan,
            str(path),
            self.max_bytes,
            numbers,
            self.ocr,
            bounded=self.timeout is not None,
            deadline=None if left is None else time.monotonic() + left,
            file_timeout=self.timeout,
            kind=kind,
        )
        self.last_warnings.extend(run.warnings)
        self.last_ocr = run.figures()
        return layout.compose(run.scans)


class TextLoader(BuiltinLoader):
    """Plain text, markdown and reStructuredText, as one section (headings are found later,
    by the chunker). Encoding: BOM, then ``encoding``, then detection (GB18030 for Chinese).

    Read in this process (a worker per small note would cost more than the note), once, in
    linear time, at most ``max_bytes``, with ``timeout`` checked between 1 MB blocks."""

    def load_sections(self, path: str | Path) -> list[Section]:
        self.last_warnings = []
        return [
            Section(read_text(path, self.encoding, max_bytes=self.max_bytes, timeout=self.timeout))
        ]


class PdfLoader(BuiltinLoader):
    """One section per page that has text, with ``page`` (1-based) metadata, read by pypdf.

    A page with less text than ``ocr.min_text_per_page`` characters that shows an image is
    rendered and recognised (:mod:`kbcli.ingest.loaders.ocr`; its section also has ``ocr: True``)
    when
    OCR is on and installed; otherwise its text, if any, is kept and a warning says how to
    recognise it."""

    def load_sections(self, path: str | Path) -> list[Section]:
        self.last_warnings = []
        self._start_clock()
        found, self.last_warnings, scanned, total = self._bounded(
            extract_pdf, path, self.ocr.min_text_per_page, self.sha256
        )
        pages = {meta["page"]: Section(text, meta) for text, meta in found}
        if scanned:
            self._scanned(path, scanned, pages, total)
        # a recognised page is read again by the OCR worker, unchecked
        self.checked = self.sha256 is not None and self.last_ocr is None
        return [pages[n] for n in sorted(pages)]

    def _scanned(
        self,
        path: str | Path,
        scanned: list[tuple[int, str, bool]],
        pages: dict[int, Section],
        total: int,
    ) -> None:
        """Recognise the pages with (almost) no text that show an image (a scan; a page with
        neither is blank, or draws its text as shapes), or say why they cannot be."""
        to_read = [n for n, _, image in scanned if image]
        off = self._ocr_off() if to_read else None
        recognised: dict[int, str] = {}
        if to_read and off is None:
            recognised = self._recognise(ocr_pages.scan_pdf_page, path, to_read)
        elif to_read:
            self.last_warnings.append(
                f"{path}: {_pages(to_read, total)} no extractable text; "
                f"{'it looks' if len(to_read) == 1 else 'they look'} scanned: {off} "
                "(or run OCR first, e.g. ocrmypdf in.pdf out.pdf)"
            )
        for number, text, _ in scanned:
            if number in recognised:
                pages[number] = Section(recognised[number], {"page": number, "ocr": True})
            elif text.strip():
                pages[number] = Section(text, {"page": number})
        if pages:
            return
        if not to_read:
            self.last_warnings.append(
                f"{path}: no extractable text on {_all_pages(total)}, and no image to "
                "recognise (blank pages, or text drawn as shapes: run OCR first, e.g. "
                "ocrmypdf in.pdf out.pdf)"
            )
        elif off is None:
            self.last_warnings.append(
                f"{path}: no text on {_all_pages(total)}: it has no text layer and OCR "
                "recognised none (blank or picture-only pages?)"
            )


def _all_pages(total: int) -> str:
    return "its only page" if total == 1 else f"any of its {total} pages"


def _pages(numbers: list[int], total: int) -> str:
    """``"page 3 (of 5) has"`` / ``"pages 1-3, 5 (of 7) have"``."""
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    if len(numbers) == 1:
        return f"page {numbers[0]} (of {total}) has"
    if len(numbers) == total:
        return f"all {total} pages have"
    return f"pages {', '.join(spans)} (of {total}) have"


class ImageLoader(BuiltinLoader):
    """Image files (PNG, JPEG, TIFF, WebP, BMP) read by OCR: one section per frame with its
    ``page`` (1-based) and ``ocr: True``. Needs the ``ocr`` extra and ``ocr.enabled``; an image
    declaring more than ``ocr.max_megapixels`` is refused before it is decoded."""

    def load_sections(self, path: str | Path) -> list[Section]:
        self.last_warnings = []
        self._start_clock()
        off = self._ocr_off()
        if off is not None:
            raise LoaderError(f"{path}: images are read by OCR: {off}")
        frames = self._bounded(ocr_pages.image_frames, path, self.ocr)
        recognised = self._recognise(
            ocr_pages.scan_image_frame, path, list(range(1, frames + 1)), "frames (pages)"
        )
        if not recognised and not self.last_warnings:
            self.last_warnings.append(f"{path}: OCR recognised no text in the image")
        return [Section(recognised[n], {"page": n, "ocr": True}) for n in sorted(recognised)]


class DocxLoader(BuiltinLoader):
    """Word .docx: paragraphs in order, tables as rows of cells joined by " | ", one section
    per heading (Heading 1-9 and Title styles) with its ``heading`` path."""

    def load_sections(self, path: str | Path) -> list[Section]:
        check_docx_zip(str(path))
        return self._extract_bounded(extract_docx, path)


class DocLoader(BuiltinLoader):
    """Legacy Word .doc files are not read; the error says how to convert them."""

    def load_sections(self, path: str | Path) -> list[Section]:
        raise UnsupportedFormatError(
            f"{path}: .doc (Word 97-2003) files are not supported: convert it to .docx "
            "(Word: Save As .docx, or: soffice --headless --convert-to docx FILE.doc)"
        )


class HtmlLoader(BuiltinLoader):
    """Visible text of an HTML page (no script, style or head), one section per h1-h6 heading
    with its ``heading`` path, in one linear pass (:mod:`kbcli.ingest.loaders.html`) run in the
    bounded worker like PDF and DOCX. Needs beautifulsoup4 (the ``html`` extra) to decode."""

    def load_sections(self, path: str | Path) -> list[Section]:
        self.last_warnings = []
        require("bs4", extra="html", feature="Loading HTML files")
        return self._extract_bounded(extract_html, path)


_LOADERS: dict[str, RegisteredLoader] = {}


def _extension(ext: str) -> str:
    ext = str(ext).strip().lower()
    if not ext or ext == ".":
        raise ValueError("an extension must not be empty, e.g. '.csv'")
    return ext if ext.startswith(".") else "." + ext


def register_loader(extensions: list[str] | str, loader: RegisteredLoader) -> None:
    """Make ``loader`` handle files with these extensions (``".csv"`` or ``"csv"``).

    ``loader`` is an object with ``load(path) -> str`` and optionally
    ``load_sections(path) -> list[Section]`` and ``last_warnings``; a plain-``load`` loader's
    text becomes one section. Registering an extension again replaces its loader, built-in
    ones included.
    """
    if isinstance(loader, type):
        raise TypeError(
            f"register_loader needs a loader instance, got the class {loader.__name__}: "
            f"pass {loader.__name__}()"
        )
    if not callable(getattr(loader, "load", None)) and not callable(
        getattr(loader, "load_sections", None)
    ):
        raise TypeError(f"{loader!r} has no load(path) method, so it cannot be a loader")
    for ext in [extensions] if isinstance(extensions, str) else list(extensions):
        _LOADERS[_extension(ext)] = loader


def supported_extensions() -> list[str]:
    """Every registered extension, sorted (".docx", ".htm", ...)."""
    return sorted(_LOADERS)


def loader_for(path: str | Path) -> RegisteredLoader:
    """The loader registered for ``path``'s extension; UnsupportedFormatError when none is."""
    ext = Path(path).suffix.lower()
    loader = _LOADERS.get(ext)
    if loader is None:
        what = f"unsupported file type '{ext}'" if ext else "no file extension"
        raise UnsupportedFormatError(
            f"{path}: {what}: supported types are {', '.join(supported_extensions())} "
            "(add one with kbcli.ingest.register_loader)"
        )
    return loader


def _size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


register_loader([".txt", ".text", ".md", ".markdown", ".rst"], TextLoader())
register_loader(".pdf", PdfLoader())
register_loader(".docx", DocxLoader())
register_loader(".doc", DocLoader())
register_loader([".html", ".htm"], HtmlLoader())
register_loader(list(ocr_pages.IMAGE_EXTENSIONS), ImageLoader())


@dataclass
class Loaded:
    """A file loaded from one read (:meth:`DefaultDocumentLoader.load_content`): its sections,
    a text file's decoded text as it is on disk (for its line numbers; else None), and whether
    the sections are known to come from exactly the bytes that were hashed, one version of
    the file (``confirmed``; when False the caller hashes the file again to be sure)."""

    sections: list[Section]
    text: str | None = None
    confirmed: bool = False


class DefaultDocumentLoader:
    """Load any registered file type, within a size limit and a parse-time limit.

    ``encoding`` is the first guess for text files; ``max_file_mb`` rejects bigger files
    (config ``limits.max_file_mb``); ``timeout`` bounds PDF and DOCX parsing in seconds
    (``limits.file_timeout``; each recognised page has ``ocr.page_timeout``). ``None`` means no
    limit. ``ocr`` (an :class:`~kbcli.config.lookup.OcrConfig`, default the defaults) says how
    scanned
    pages and images are recognised.

    Section texts are normalised with :class:`StructurePreservingNormalizer` and empty ones
    dropped; :meth:`load` returns them joined by ``"\\n\\n"``, the text chunk offsets refer to.
    After each call, ``last_warnings`` lists non-fatal problems (e.g. a page OCR could not
    read) and ``last_ocr`` is ``{"pages", "seconds"}`` when pages were recognised, else None.
    """

    def __init__(
        self,
        encoding: str = "utf-8",
        max_file_mb: float | None = None,
        timeout: float | None = None,
        ocr: OcrConfig | None = None,
    ):
        if max_file_mb is not None and max_file_mb <= 0:
            raise InvalidOptionError(f"max_file_mb must be positive, got {max_file_mb}")
        if timeout is not None and timeout <= 0:
            raise InvalidOptionError(f"timeout must be positive, got {timeout}")
        self.encoding = encoding
        self.max_file_mb = max_file_mb
        self.timeout = timeout
        self.ocr = ocr or OcrConfig()
        self.last_warnings: list[str] = []
        self.last_ocr: dict[str, Any] | None = None
        self._normalizer = StructurePreservingNormalizer()
        self._last_loader: RegisteredLoader | None = None

    def ocr_signature(self, path: str | Path) -> str | None:
        """The OCR settings that decide ``path``'s text, when its loader may recognise it (a
        PDF, an image) and OCR can run (else None): part of a file record's settings, so
        installing the extra or changing ``ocr`` re-reads PDFs and images, and nothing else."""
        try:
            loader = loader_for(path)
        except UnsupportedFormatError:
            return None
        if not isinstance(loader, (PdfLoader, ImageLoader)) or not self.ocr.enabled:
            return None
        if ocr_pages.missing() is not None:
            return None
        return ocr_pages.signature(self.ocr)

    def load(self, path: str | Path) -> str:
        """The whole text of the file: its sections' texts joined by ``"\\n\\n"``."""
        return SECTION_SEPARATOR.join(s.text for s in self.load_sections(path))

    def load_sections(self, path: str | Path) -> list[Section]:
        """The file as normalised, non-empty sections with ``page``/``heading`` metadata.

        Only regular files are read (a FIFO or device is refused before it is opened). A
        file whose size or modification time changed while it was read is read once more,
        then refused: its text would mix two versions.
        """
        self.last_warnings = []
        self.last_ocr = None
        path = Path(path)
        for attempt in (1, 2):
            before = self._stat(path)
            sections = self._load(path, before)
            if _same_version(before, self._stat(path)):
                break
            if attempt == 2:
                raise LoaderError(
                    f"{path}: the file changed while it was being read (twice): load it again "
                    "when it is no longer being written"
                )
            time.sleep(0.1)
        return self._normalised(sections)

    def takes_bytes(self, path: str | Path) -> bool:
        """True when :meth:`load_content` loads ``path`` from the bytes read (a text file);
        other formats are parsed from the path, checked against the SHA-256 read."""
        try:
            return isinstance(loader_for(path), TextLoader)
        except UnsupportedFormatError:
            return False

    def load_content(self, path: str | Path, content: FileContent) -> Loaded:
        """``path`` loaded from ``content``, the one read of it a sync made: a text file
        decoded from its bytes (``content.data``, kept when :meth:`takes_bytes`), a PDF, DOCX
        or HTML file parsed in the worker, which checks its bytes against ``content.sha256``
        (:class:`~kbcli.ingest.files.FileChanged` when they differ). Raises LoaderError as
        :meth:`load_sections` does; the caller retries a file that changed."""
        self.last_warnings = []
        self.last_ocr = None
        path = Path(path)
        loader = loader_for(path)
        if isinstance(loader, TextLoader) and content.data is not None:
            try:
                raw = decode_text(content.data, path, self.encoding, timeout=self.timeout)
            except UnicodeError as exc:
                reason = " ".join(str(exc).split())
                raise LoaderError(f"{path}: cannot read the file ({reason})") from None
            return Loaded(self._normalised([Section(raw)]), raw, content.settled)
        sections = self._load(path, content.stat, content.sha256)
        confirmed = bool(getattr(self._last_loader, "checked", False))
        return Loaded(self._normalised(sections), None, confirmed)

    def _normalised(self, sections: list[Section]) -> list[Section]:
        out = []
        sections.reverse()
        while sections:  # pop as we go: each raw text is freed once its normalised copy exists
            section = sections.pop()
            metadata = dict(section.metadata)
            text = self._normalizer.normalize(section.text)
            del section
            if text.strip():
                out.append(Section(text, metadata))
        return out

    def _stat(self, path: Path) -> os.stat_result:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise LoaderError(f"{path}: no such file") from None
        except OSError as exc:
            raise LoaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        return st

    def _load(self, path: Path, st: os.stat_result, sha256: str | None = None) -> list[Section]:
        loader = loader_for(path)
        if self.max_file_mb is not None and st.st_size > self.max_file_mb * (1 << 20):
            raise LoaderError(
                f"{path}: the file is {st.st_size / (1 << 20):.1f} MB, over the "
                f"{self.max_file_mb:g} MB limit: raise limits.max_file_mb to load it"
            )
        if isinstance(loader, BuiltinLoader):
            loader = loader.configured(self.encoding, self.timeout)
            loader.max_bytes = limit_bytes(self.max_file_mb)
            loader.ocr = self.ocr
            loader.sha256 = sha256
        self._last_loader = loader
        try:
            if isinstance(loader, SectionLoaderProtocol):
                sections = list(loader.load_sections(path))
            else:
                sections = [Section(loader.load(path))]
        except (OSError, UnicodeError) as exc:
            reason = " ".join(str(exc).split())
            raise LoaderError(f"{path}: cannot read the file ({reason})") from None
        self.last_warnings = list(getattr(loader, "last_warnings", None) or [])
        self.last_ocr = getattr(loader, "last_ocr", None)
        return sections


def _same_version(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ino) == (b.st_size, b.st_mtime_ns, b.st_ino)
