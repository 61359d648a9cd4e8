"""Scans made on the spot for the OCR tests and benchmarks/bench_ocr.py: text rendered with a
real font (DejaVu for Latin, a CJK font from the distribution for Chinese) into page images,
saved as images or image-only PDFs, and the character error rate of what OCR gives back."""

from __future__ import annotations

import glob
import io
import os
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

LATIN_FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",)
CJK_FONT_PATTERNS = (
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/**/*CJK*.tt[cf]",
)
# CI installs a CJK font (.ci/run) and sets this, so a missing font fails there, not skips.
REQUIRE_CJK_ENV = "KB_REQUIRE_CJK_FONT"


def latin_font() -> str:
    for path in LATIN_FONTS:
        if os.path.exists(path):
            return path
    found = glob.glob("/usr/share/fonts/**/DejaVuSans.ttf", recursive=True)
    if not found:
        raise FileNotFoundError("DejaVuSans.ttf not found: apt-get install fonts-dejavu-core")
    return found[0]


def cjk_font() -> str | None:
    for pattern in CJK_FONT_PATTERNS:
        found = sorted(glob.glob(pattern, recursive=True))
        if found:
            return found[0]
    return None


def render_page(
    blocks: list[tuple[str, list[str]]] | list[str],
    *,
    font: str | None = None,
    dpi: int = 150,
    size_pt: float = 12,
    header: str | None = None,
    footer: str | None = None,
    columns: list[list[str]] | None = None,
    width_in: float = 8.5,
    height_in: float = 11,
) -> Image.Image:
    """A white page (``width_in`` x ``height_in`` inches at ``dpi``) with ``blocks`` of lines
    from the top (an empty string is a blank line: a paragraph break), then ``columns`` side by
    side below them, and a header and footer in the margins."""
    w, h = int(width_in * dpi), int(height_in * dpi)
    page = Image.new("L", (w, h), 255)
    draw = ImageDraw.Draw(page)
    face = ImageFont.truetype(font or latin_font(), round(size_pt * dpi / 72))
    step = round(face.size * 1.45)
    margin = dpi
    y = margin
    for line in blocks:
        if line:
            draw.text((margin, y), line, font=face, fill=0)
        y += step
    if columns:
        gap = dpi // 2
        width = (w - 2 * margin - gap * (len(columns) - 1)) // len(columns)
        top = y + step
        for n, column in enumerate(columns):
            x, y_col = margin + n * (width + gap), top
            for line in column:
                if line:
                    draw.text((x, y_col), line, font=face, fill=0)
                y_col += step
    small = ImageFont.truetype(font or latin_font(), round(size_pt * 0.85 * dpi / 72))
    if header:
        draw.text((margin, dpi * 0.4), header, font=small, fill=0)
    if footer:
        draw.text((margin, h - dpi * 0.6), footer, font=small, fill=0)
    return page


def scanned(page: Image.Image, *, angle: float = 1.5, blur: float = 1.0) -> Image.Image:
    """``page`` as a slightly crooked, blurred scan."""
    turned = page.rotate(angle, resample=Image.BICUBIC, expand=False, fillcolor=255)
    return turned.filter(ImageFilter.GaussianBlur(blur))


def image_pdf(pages: list[Image.Image], dpi: int = 150) -> bytes:
    """An image-only PDF (no text layer), one page per image, as a scanner writes."""
    out = io.BytesIO()
    pages[0].save(out, "PDF", save_all=True, append_images=pages[1:], resolution=dpi)
    return out.getvalue()


def merge_pdfs(parts: list[bytes]) -> bytes:
    """The pages of ``parts`` in order, as one PDF (a text page next to scanned ones)."""
    import pypdf

    writer = pypdf.PdfWriter()
    for part in parts:
        for page in pypdf.PdfReader(io.BytesIO(part)).pages:
            writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def png_bomb(path: Path, width: int = 100_000, height: int = 100_000) -> None:
    """A tiny PNG whose header declares ``width`` x ``height`` pixels (an image bomb)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    data = zlib.compress(b"\x00" + b"\xff" * 64)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data)
    path.write_bytes(png + chunk(b"IEND", b""))


def pdf_image_bomb(unpacked_mb: int = 2000) -> bytes:
    """A one-page PDF drawing a 100000 x 100000 grey image whose ~2 MB stream inflates to
    ``unpacked_mb`` MB."""
    import zlib

    from hostile import pdf_from_objects

    packer = zlib.compressobj(9)
    block = b"\x00" * (1 << 20)
    packed = b"".join(packer.compress(block) for _ in range(unpacked_mb)) + packer.flush()
    image = (
        b"<< /Type /XObject /Subtype /Image /Width 100000 /Height 100000 /BitsPerComponent 8 "
        b"/ColorSpace /DeviceGray /Filter /FlateDecode /Length %d >>\nstream\n" % len(packed)
    )
    draw = b"q 612 0 0 792 0 0 cm /Im0 Do Q"
    return pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /XObject << /Im0 5 0 R >> >> /Contents 4 0 R >>",
            b"<< /Length %d >>\nstream\n" % len(draw) + draw + b"\nendstream",
            image + packed + b"\nendstream",
        ]
    )


def tiff_with_broken_frame(path: Path, good: Image.Image, second: Image.Image) -> None:
    """A two-frame TIFF whose second frame's compressed data is garbage."""
    good.save(path, save_all=True, append_images=[second], compression="tiff_deflate")
    with Image.open(path) as image:
        image.seek(1)
        offset = image.tag_v2[273][0]  # StripOffsets
        length = image.tag_v2[279][0]  # StripByteCounts
    data = bytearray(path.read_bytes())
    data[offset : offset + length] = bytes((i * 37 + 11) % 256 for i in range(length))
    path.write_bytes(bytes(data))


def normalised(text: str) -> str:
    """Whitespace collapsed; none at all next to CJK characters (Chinese has no spaces)."""
    import re

    text = " ".join(text.split())
    return re.sub(r"(?<=[\u3000-\u9fff\uff00-\uffef]) | (?=[\u3000-\u9fff\uff00-\uffef])", "", text)


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: edit distance / reference length, on :func:`normalised` text."""
    ref, hyp = normalised(reference), normalised(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, a in enumerate(ref, start=1):
        current = [i]
        for j, b in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1] / max(1, len(ref))
