"""Offline OCR for scanned PDF pages and image files (the ``ocr`` extra).

rapidocr-onnxruntime reads text lines with the PP-OCRv4 detection and recognition models in its
wheel (Chinese and English, on onnxruntime, no network), pypdfium2 renders PDF pages and Pillow
opens images. None of them is imported until a page needs OCR, and then only in the bounded
parser process (:mod:`kbcli.ingest.loaders.bounded`): each page is one bounded call
(``ocr.page_timeout``
seconds, the parser's memory ceiling), so a page that hangs, crashes the process or runs out of
memory costs that page (a warning). The file's pages together stay within
``limits.file_timeout`` (a file past it fails, named), and at most ``ocr.max_pages`` pages of a
file are recognised (the others are skipped with a warning saying how many were read).

One page, in the child (:func:`scan_pdf_page`, :func:`scan_image_frame`):

1. rendered at ``ocr.dpi``, or lower when that would pass ``ocr.max_megapixels`` (a huge page
   cannot exhaust memory); an image that declares more pixels is refused before it is decoded;
2. made grey, with its contrast stretched and its edges sharpened (a faint or blurred scan then
   reads like a clean one; blurred words ran together without it); a page with nothing dark
   is blank;
3. text lines are detected on a copy at most :data:`DETECT_MAX_SIDE` pixels long (2-3 times
   faster than the full page), then each line is cut from the full-resolution page, scaled to
   the recogniser's 48-pixel height with a margin (on tight crops the model dropped the spaces
   between words at some text sizes) and recognised; lines scoring under
   ``ocr.min_confidence`` are dropped, and the boxes are deskewed by the median angle of the
   page's long lines.

A document's pages are then put into reading order and paragraphs by
:func:`kbcli.ingest.loaders.layout.compose`.
"""

from __future__ import annotations

import io
import math
import re
import statistics
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbcli.config.schema import OcrConfig
from kbcli.errors import LoaderError, missing_message
from kbcli.ingest.files import open_regular, too_large
from kbcli.ingest.loaders.bounded import ParseTimeout, keep_resident, run_bounded

if TYPE_CHECKING:  # Pillow and opencv are imported in the child, when a page needs OCR
    from cv2.typing import MatLike
    from PIL.Image import Image

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp")
# What Pillow may open them as (never its other plugins: EPS would run Ghostscript).
IMAGE_FORMATS = ("PNG", "JPEG", "TIFF", "WEBP", "BMP")
PACKAGES = ("rapidocr_onnxruntime", "pypdfium2")
DETECT_MAX_SIDE = 1536  # pixels: lines are found as well on this copy (8 pt at ~140 dpi), faster
ENGINE_ARENA_BYTES = 1 << 30  # kept by onnxruntime between pages: not a reason to recycle
REC_HEIGHT = 48  # the recogniser's input height
REC_MARGIN = 6  # pixels of margin around each line it is given
MIN_DPI_NOTE = 100  # below this a page's small text may be missed: said in a warning
BLANK_RANGE = 40  # grey levels: a page whose 0.1-99.9 percentile span is smaller is blank
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


# --- what a page gives -------------------------------------------------------------------------


@dataclass
class TextBox:
    """One recognised piece of a line: its bounds in page pixels (deskewed) and text."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    score: float

    @property
    def height(self) -> float:
        return max(1.0, self.y1 - self.y0)


@dataclass
class PageScan:
    """A page's (or image frame's) recognised boxes; ``notes`` are warnings about it."""

    number: int
    width: int
    height: int
    boxes: list[TextBox] = field(default_factory=list)
    blank: bool = False
    notes: list[str] = field(default_factory=list)


def missing() -> str | None:
    """Why OCR cannot run here (the install line), or None; imports nothing."""
    import importlib.util

    for module in PACKAGES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: blocked in sys.modules
            found = False
        if not found:
            return missing_message(module, extra="ocr", feature="OCR")
    return None


def signature(options: OcrConfig) -> str:
    """What decides recognised text, for a file record's settings (a change re-reads scans)."""
    pages = options.max_pages
    return (
        f"rapidocr1;dpi={options.dpi};mpx={options.max_megapixels:g};"
        f"min={options.min_text_per_page};conf={options.min_confidence:g};"
        f"lang={','.join(options.languages)}"
        # only when changed: records written before the setting existed keep their signature
        + (f";pages={pages}" if pages != OcrConfig.max_pages else "")
    )


# --- the child: rendering and recognising one page ---------------------------------------------


# RapidOCR's engine, its detections and the modules _require returns are untyped (hence Any).
_engine: Any = None


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise LoaderError(missing_message(module, extra="ocr", feature="OCR")) from None


def _recogniser() -> Any:
    """The process's one RapidOCR engine (loading its models takes about a second)."""
    global _engine
    if _engine is None:

        def load() -> Any:  # importing it maps opencv too
            return _require("rapidocr_onnxruntime").RapidOCR(print_verbose=False)

        _engine = keep_resident(load, ENGINE_ARENA_BYTES)
    return _engine


def _grey(image: Image) -> Image:
    """``image`` as 8-bit grey on white (transparency over white, 16-bit scaled)."""
    from PIL import Image

    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        import numpy as np

        values = np.asarray(image, dtype=np.float32)
        top = float(values.max()) or 1.0
        return Image.fromarray((values * (255.0 / top)).clip(0, 255).astype("uint8"), "L")
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("L")
    return image.convert("L")


def _stretch(grey: Image) -> Image | None:
    """``grey`` with its contrast stretched, or None when the page is blank."""
    import numpy as np
    from PIL import ImageFilter, ImageOps

    values = np.asarray(grey)
    sample = values[:: max(1, values.shape[0] // 512), :: max(1, values.shape[1] // 512)]
    low, high = np.percentile(sample, [0.1, 99.9])
    if high - low < BLANK_RANGE:
        return None
    # 0.05% darkest to black, the brightest 5% (paper, whatever its tint) to white, then the
    # edges sharpened: blurred words ran together (spaces lost) without it
    stretched = ImageOps.autocontrast(grey, cutoff=(0.05, 5))
    return stretched.filter(ImageFilter.UnsharpMask(radius=2, percent=150, threshold=0))


def _fit_line(crop: MatLike) -> MatLike:
    import cv2

    height, width = crop.shape[:2]
    scale = REC_HEIGHT / max(1, height)
    method = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    crop = cv2.resize(crop, (max(1, round(width * scale)), REC_HEIGHT), interpolation=method)
    m = REC_MARGIN
    return cv2.copyMakeBorder(crop, m, m, m, m, cv2.BORDER_REPLICATE)


def _detect(engine: Any, page: MatLike) -> list[Any]:
    """Text line quadrilaterals (4 x 2 float arrays) in ``page``'s pixels."""
    import cv2
    import numpy as np

    height, width = page.shape[:2]
    scale = min(1.0, DETECT_MAX_SIDE / max(height, width))
    small = page
    if scale < 1.0:
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        small = cv2.resize(page, size, interpolation=cv2.INTER_AREA)
    # a very wide, short image (one line) is padded: the detector wants some height
    h, w = small.shape[:2]
    pad = max(0, (max(32, w // 8) - h) // 2 + 1) if w / h > 8 or h < 32 else 0
    if pad:
        small = cv2.copyMakeBorder(small, pad, pad, 0, 0, cv2.BORDER_CONSTANT, value=(255,) * 3)
    boxes, _ = engine.text_det(small)
    if boxes is None or len(boxes) == 0:
        return []
    out = []
    for box in boxes:
        quad = np.array(box, dtype=np.float32)
        quad[:, 1] -= pad
        quad /= scale
        quad[:, 0] = quad[:, 0].clip(0, width - 1)
        quad[:, 1] = quad[:, 1].clip(0, height - 1)
        out.append(quad)
    return out


def _boxes(quads: list[Any], texts: list[tuple[str, float]], options: OcrConfig) -> list[TextBox]:
    """Deskewed axis-aligned boxes of the lines read with enough confidence."""
    kept = [
        (q, _clean(t, options.languages), s)
        for q, (t, s) in zip(quads, texts)
        if s >= options.min_confidence and t.strip()
    ]
    angles = []
    for quad, _, _ in kept:
        dx, dy = quad[1][0] - quad[0][0], quad[1][1] - quad[0][1]
        tall = math.hypot(quad[3][0] - quad[0][0], quad[3][1] - quad[0][1])
        if math.hypot(dx, dy) > 3 * tall:
            angles.append(math.atan2(dy, dx))
    skew = statistics.median(angles) if angles else 0.0
    cos, sin = math.cos(-skew), math.sin(-skew)
    out = []
    for quad, text, score in kept:
        if not text:
            continue
        xs = [x * cos - y * sin for x, y in quad]
        ys = [x * sin + y * cos for x, y in quad]
        out.append(TextBox(min(xs), min(ys), max(xs), max(ys), text, float(score)))
    return out


def _clean(text: str, languages: Sequence[str]) -> str:
    text = " ".join(text.split())
    if "zh" not in languages:  # full-width forms are misreadings of ASCII; Han ones are noise
        text = _HAN.sub("", unicodedata.normalize("NFKC", text))
    return text.strip()


def recognise(image: Image, number: int, options: OcrConfig) -> PageScan:
    """Recognise the PIL ``image`` as page ``number`` (see the module docstring)."""
    import numpy as np

    grey = _grey(image)
    scan = PageScan(number, grey.width, grey.height)
    stretched = _stretch(grey)
    if stretched is None:
        scan.blank = True
        return scan
    engine = _recogniser()
    page = np.asarray(stretched.convert("RGB"))
    errors = _recognition_errors()
    try:
        quads = _detect(engine, page)
        if not quads:
            return scan
        crops = [_fit_line(crop) for crop in engine.get_crop_img_list(page, quads)]
        texts, _ = engine.text_rec(crops)
    except errors as exc:
        raise LoaderError(f"the recogniser failed ({_reason(exc)})") from None
    scan.boxes = _boxes(quads, [(str(t), float(s)) for t, s in texts], options)
    return scan


def _recognition_errors() -> tuple[type[BaseException], ...]:
    import cv2

    # onnxruntime's failures are RuntimeErrors; caught only around the engine's calls
    return (cv2.error, RuntimeError, ValueError, IndexError, TypeError)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def render_scale(width_pt: float, height_pt: float, options: OcrConfig) -> float:
    """Pixels per PDF point: ``ocr.dpi``, lowered so the page stays within max_megapixels."""
    scale = options.dpi / 72.0
    area = max(1.0, width_pt * height_pt)
    limit = options.max_megapixels * 1e6
    if area * scale * scale > limit:
        scale = math.sqrt(limit / area) * 0.995  # the renderer rounds pixel sizes up
    return float(scale)


def scan_pdf_page(path: str, max_bytes: int | None, number: int, options: OcrConfig) -> PageScan:
    """Render page ``number`` (1-based) of the PDF at ``path`` and recognise it (child)."""
    pdfium = _require("pypdfium2")
    fh, st = open_regular(path)
    with fh:
        if max_bytes is not None and st.st_size > max_bytes:
            raise too_large(path, max_bytes)
        try:
            document = pdfium.PdfDocument(fh)
        except pdfium.PdfiumError as exc:
            raise LoaderError(f"PDFium cannot open the file ({exc})") from None
        try:
            page = document[number - 1]
            width_pt, height_pt = page.get_size()
            scale = render_scale(width_pt, height_pt, options)
            bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=True)
            image = bitmap.to_pil()
        except (pdfium.PdfiumError, ValueError, IndexError) as exc:
            raise LoaderError(f"the page cannot be rendered ({_reason(exc)})") from None
        finally:
            document.close()
    scan = recognise(image, number, options)
    dpi = scale * 72
    if dpi < MIN_DPI_NOTE and not scan.blank:
        scan.notes.append(
            f"page {number} is {width_pt / 72:.0f} x {height_pt / 72:.0f} in, so it was "
            f"recognised at only {dpi:.0f} dpi (ocr.max_megapixels): small text may be missed"
        )
    return scan


@contextmanager
def _our_pixel_limit() -> Iterator[None]:
    """Pillow's own bomb check off: :func:`_check_size` applies ``ocr.max_megapixels``."""
    from PIL import Image

    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = saved


@contextmanager
def _open_image(path: str, max_bytes: int | None, options: OcrConfig) -> Iterator[Image]:
    """The image at ``path``, opened (read lazily, not decoded: a multi-page TIFF is not read
    whole for each page); LoaderError for a bomb or a non-image."""
    from PIL import Image, UnidentifiedImageError

    raw, st = open_regular(path)
    with raw, io.BufferedReader(raw) as fh:  # type: ignore[type-var]  # a raw binary file
        if max_bytes is not None and st.st_size > max_bytes:
            raise too_large(path, max_bytes)
        Image.init()  # registers TIFF and WebP (only a few formats are preloaded)
        try:
            with _our_pixel_limit():
                image = Image.open(fh, formats=IMAGE_FORMATS)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
            raise LoaderError(
                f"{path}: not a readable image ({_reason(exc)}): check the file opens in an "
                "image viewer"
            ) from None
        _check_size(path, image, options)
        yield image


def _check_size(path: str, image: Image, options: OcrConfig) -> None:
    width, height = image.size
    limit = options.max_megapixels * 1e6
    if width * height > limit:
        raise LoaderError(
            f"{path}: the image declares {width} x {height} pixels "
            f"({width * height / 1e6:,.0f} megapixels), over ocr.max_megapixels "
            f"({options.max_megapixels:g}): refused as a possible image bomb; raise "
            "ocr.max_megapixels if the image is real"
        )


def image_frames(path: str, max_bytes: int | None, options: OcrConfig) -> int:
    """How many frames (pages) the image at ``path`` has; refuses an oversized one (child)."""
    with _open_image(path, max_bytes, options) as image, _our_pixel_limit():
        count = max(1, int(getattr(image, "n_frames", 1) or 1))
        for frame in range(1, min(count, options.max_pages)):  # the frames to be read
            try:
                image.seek(frame)
            except (OSError, ValueError, EOFError):
                break  # that frame is reported when it is recognised
            _check_size(path, image, options)
    return count


def scan_image_frame(path: str, max_bytes: int | None, number: int, options: OcrConfig) -> PageScan:
    """Decode frame ``number`` (1-based) of the image at ``path`` and recognise it (child)."""
    from PIL import ImageOps

    with _open_image(path, max_bytes, options) as image:
        try:
            with _our_pixel_limit():
                image.seek(number - 1)
                _check_size(path, image, options)
                image.load()
                frame = ImageOps.exif_transpose(image) if number == 1 else image.copy()
        except LoaderError:
            raise
        except (OSError, ValueError, SyntaxError, EOFError) as exc:
            raise LoaderError(f"the image data cannot be decoded ({_reason(exc)})") from None
    return recognise(frame, number, options)


# --- the parent: pages in bounded calls --------------------------------------------------------


_PAGE_WORDS = (
    ("parsing took", "recognising took"),
    ("parsing needed", "recognising needed"),
    ("raise limits.file_timeout if the file is just large", "raise ocr.page_timeout"),
    ("the file is probably malformed", "the page is probably malformed"),
)


@dataclass
class OcrRun:
    """The pages of one file recognised so far, the warnings, and the time it took."""

    scans: list[PageScan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def figures(self) -> dict[str, Any] | None:
        """``{"pages", "seconds"}`` for ``kb ingest --json``'s slowest list (None: no OCR)."""
        if not self.scans and not self.warnings:
            return None
        return {"pages": len(self.scans), "seconds": self.seconds}


def run_pages(
    scan: Callable[..., PageScan],
    path: str,
    max_bytes: int | None,
    numbers: Sequence[int],
    options: OcrConfig,
    *,
    bounded: bool,
    deadline: float | None = None,
    file_timeout: float | None = None,
    kind: str = "scanned pages",
) -> OcrRun:
    """``scan(path, max_bytes, n, options)`` for each page ``n``, each in its own bounded call
    (``ocr.page_timeout``); a page that fails becomes a warning.

    ``deadline`` (a :func:`time.monotonic` time) is when the file's ``limits.file_timeout``
    (``file_timeout`` seconds) runs out: no page call runs past it, and a file that reaches it
    raises :class:`~kbcli.errors.LoaderError` saying how many of the ``kind`` (``"scanned
    pages"``, ``"frames (pages)"``) were recognised (the file is failed, not indexed in
    part)."""
    run = OcrRun()
    size = _size(path)
    for done, number in enumerate(numbers):
        limit = options.page_timeout if bounded else None
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise out_of_time(path, file_timeout, done, len(numbers), kind)
        by_file = left is not None and (limit is None or left < limit)
        if by_file:
            limit = left
        began = time.monotonic()
        try:
            page = run_bounded(
                scan,
                (path, max_bytes, number, options),
                timeout=limit,
                label=f"{path}: page {number}",
                file_size=size,
            )
        except ParseTimeout as exc:
            if by_file:
                raise out_of_time(path, file_timeout, done, len(numbers), kind) from None
            run.warnings.append(_page_failure(path, number, str(exc)))
            continue
        except LoaderError as exc:
            run.warnings.append(_page_failure(path, number, str(exc)))
            continue
        finally:
            run.seconds += time.monotonic() - began
        run.scans.append(page)
        run.warnings.extend(f"{path}: {note}" for note in page.notes)
    return run


def _page_failure(path: str, number: int, message: str) -> str:
    reason = " ".join(message.split())
    reason = reason.replace(f"{path}: page {number}: ", "").replace(f"{path}: ", "")
    for parser_words, page_words in _PAGE_WORDS:  # the bounded call speaks of files
        reason = reason.replace(parser_words, page_words)
    return f"{path}: page {number} could not be recognised: {reason}"


def out_of_time(
    path: str, file_timeout: float | None, done: int, total: int, kind: str = "scanned pages"
) -> LoaderError:
    """The failure of a file whose OCR ran out of ``limits.file_timeout``."""
    limit = f" ({file_timeout:g} s)" if file_timeout is not None else ""
    return LoaderError(
        f"{path}: reading took longer than limits.file_timeout{limit} and was stopped after "
        f"recognising {done:,} of {total:,} {kind}: not indexed; raise "
        "limits.file_timeout, or lower ocr.max_pages to index its first pages"
    )


def _size(path: str) -> int:
    import os

    try:
        return os.stat(path).st_size
    except OSError:
        return 0
