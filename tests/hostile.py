"""Builders of real documents for the loader, crash and hostile-file tests: valid PDFs, DOCX
and HTML pages, and the hostile variants of issue 17 (truncated and looping PDFs, bombs,
encrypted files, corrupt and entity-declaring DOCX, bad encodings, special files).

Every builder writes the bytes a real tool would meet; nothing here is a mock.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

WORD_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"

# --- PDF -------------------------------------------------------------------------------------


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _pdf_body(objects: list[bytes]) -> tuple[bytes, str]:
    """The header and numbered objects (1, 2, ...) of a PDF, and their exact xref table."""
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    table = f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n"
    return out, table + "".join(f"{offset:010d} 00000 n \n" for offset in offsets)


def pdf_from_objects(objects: list[bytes], *, root: int = 1, xref: bool = True) -> bytes:
    """A PDF of these numbered objects (1, 2, ...), with an exact xref table when ``xref``."""
    out, table = _pdf_body(objects)
    start = len(out)
    if xref:
        out += table.encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root {root} 0 R >>\n".encode()
    return out + f"startxref\n{start}\n%%EOF\n".encode()


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF: one Helvetica content stream per page, an exact xref table."""
    kids = [4 + 2 * i for i in range(len(pages))]
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] "
        f"/Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for kid, text in zip(kids, pages, strict=True):
        ops = " ".join(f"({_pdf_escape(line)}) Tj T*" for line in text.split("\n")) if text else ""
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {ops} ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {kid + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    return pdf_from_objects(objects)


def encrypted_pdf(pages: list[str], password: str, algorithm: str | None = None) -> bytes:
    """``make_pdf(pages)`` encrypted by pypdf with the user password ``password`` (RC4 unless
    ``algorithm``, e.g. ``"AES-256"``)."""
    import pypdf

    writer = pypdf.PdfWriter(clone_from=io.BytesIO(make_pdf(pages)))
    writer.encrypt(password, algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def truncated_pdf(pages: list[str], keep: float = 0.5) -> bytes:
    """A valid PDF cut after ``keep`` of its bytes (a download that stopped)."""
    data = make_pdf(pages)
    return data[: int(len(data) * keep)]


def circular_xref_pdf() -> bytes:
    """A PDF whose cross-reference sections point at each other (``/Prev`` loops) and whose
    page tree is its own kid."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
    ]
    body, table = _pdf_body(objects)
    first = len(body)
    # Two xref sections, each naming the other as /Prev.
    second = first + len(table) + len(f"trailer\n<< /Size 3 /Root 1 0 R /Prev {0:010d} >>\n")
    body += (table + f"trailer\n<< /Size 3 /Root 1 0 R /Prev {second:010d} >>\n").encode()
    body += (table + f"trailer\n<< /Size 3 /Root 1 0 R /Prev {first:010d} >>\n").encode()
    return body + f"startxref\n{second}\n%%EOF\n".encode()


def pdf_bomb(unpacked_mb: int = 1024) -> bytes:
    """A one-page PDF whose content stream inflates from ~1 MB to ``unpacked_mb`` MB."""
    compressor = zlib.compressobj(9)
    chunk = b" " * (1 << 20)
    packed = b"".join(compressor.compress(chunk) for _ in range(unpacked_mb)) + compressor.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream",
    ]
    return pdf_from_objects(objects)


# --- DOCX ------------------------------------------------------------------------------------


def make_docx(path: Path, blocks: list[tuple[str, str]] | None = None) -> Path:
    """A real .docx written by python-docx: ``blocks`` are ``(kind, text)`` with kind
    ``"h1"``..``"h9"`` for headings and ``"p"`` for paragraphs (default: one paragraph)."""
    import docx

    document = docx.Document()
    for kind, text in blocks or [("p", "Hello from Word.")]:
        if kind.startswith("h"):
            document.add_heading(text, level=int(kind[1:]))
        else:
            document.add_paragraph(text)
    document.save(str(path))
    return path


def guide_docx(path: Path) -> Path:
    """A .docx with nested headings and a table (the structure tests' sample)."""
    import docx

    document = docx.Document()
    document.add_paragraph("Preamble before any heading.")
    document.add_heading("Install", level=1)
    document.add_paragraph("Pick your system.")
    document.add_heading("Linux", level=2)
    document.add_paragraph("Use the package manager.")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([["OS", "Command"], ["Debian", "apt install kb"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Windows", level=2)
    document.add_paragraph("Use the installer.")
    document.add_heading("Usage", level=1)
    document.add_paragraph("Run kb search.")
    document.save(path)
    return path


def docx_with(folder: Path, name: str, extra: dict[str, bytes]) -> Path:
    """A one-paragraph .docx with ``extra`` members appended (deflated)."""
    path = make_docx(folder / name)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, data in extra.items():
            archive.writestr(member, data)
    return path


def replace_member(path: Path, member: str, data: bytes) -> None:
    """Rewrite the archive at ``path`` with ``member``'s content replaced by ``data``."""
    with zipfile.ZipFile(path) as src:
        items = [(i, src.read(i.filename)) for i in src.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for info, content in items:
            out.writestr(info, data if info.filename == member else content)


def docx_zip_bomb(path: Path, unpacked_mb: int = 1024) -> Path:
    """A .docx with a media member of ``unpacked_mb`` MB of zeros (about 1000:1 deflated)."""
    make_docx(path)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/media/zeros.bin", "w", force_zip64=True) as member:
            block = bytes(1 << 20)
            for _ in range(unpacked_mb):
                member.write(block)
    return path


def docx_bad_crc(path: Path, text: str = "Checksummed paragraph.") -> Path:
    """A .docx whose ``word/document.xml`` is stored with a wrong CRC-32."""
    make_docx(path, [("p", text)])
    with zipfile.ZipFile(path) as src:
        items = [(i, src.read(i.filename)) for i in src.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as out:
        for info, content in items:
            out.writestr(info.filename, content)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("word/document.xml")
    wrong = struct.pack("<I", info.CRC ^ 0x5A5A5A5A)
    data[info.header_offset + 14 : info.header_offset + 18] = wrong  # the local header's CRC
    name = info.filename.encode()
    entry = data.find(b"PK\x01\x02")
    while data[entry + 46 : entry + 46 + len(name)] != name:  # its central-directory entry
        entry = data.find(b"PK\x01\x02", entry + 4)
    data[entry + 16 : entry + 20] = wrong
    path.write_bytes(bytes(data))
    return path


def docx_flipped_byte(path: Path, paragraphs: int = 1, damage: str = "crc") -> Path:
    """A .docx with one byte of ``word/document.xml``'s deflated data flipped so that
    unpacking it fails: ``damage="crc"`` where it still inflates but its CRC-32 no longer
    matches (zipfile: "Bad CRC-32"), ``"deflate"`` where the deflate stream itself breaks
    (zlib.error). The byte is searched from the member's end, so with enough ``paragraphs`` the
    first 4 KB of the part (kbcli's prolog check) still unpack intact."""
    make_docx(path, [("p", f"Paragraph {i} of a checksummed document.") for i in range(paragraphs)])
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("word/document.xml")
    name_len, extra_len = struct.unpack(
        "<HH", data[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_len + extra_len
    for offset in range(info.compress_size - 8, 0, -1):
        flipped = bytearray(data)
        flipped[start + offset] ^= 0x10
        try:
            zipfile.ZipFile(io.BytesIO(bytes(flipped))).read(info.filename)
            continue
        except zipfile.BadZipFile as exc:
            if damage != "crc" or "Bad CRC-32" not in str(exc):
                continue
        except zlib.error:
            if damage != "deflate":
                continue
        path.write_bytes(bytes(flipped))
        return path
    raise AssertionError(f"no single flipped byte gives {damage} damage")


def docx_truncated_directory(path: Path) -> Path:
    """A .docx cut in the middle of its central directory."""
    make_docx(path)
    data = path.read_bytes()
    directory = data.find(b"PK\x01\x02")
    path.write_bytes(data[: directory + (len(data) - directory) // 2])
    return path


def docx_external_entity(path: Path) -> Path:
    """A .docx whose document part declares an external entity (XXE)."""
    make_docx(path)
    evil = (
        b'<?xml version="1.0"?>\n<!DOCTYPE w:document [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b'<w:document xmlns:w="' + WORD_NS.encode() + b'">'
        b"<w:body><w:p><w:r><w:t>&x;</w:t></w:r></w:p></w:body></w:document>"
    )
    replace_member(path, "word/document.xml", evil)
    return path


def docx_near_ratio_limit(path: Path, xml_mb: int = 95, ratio: float = 99.0) -> Path:
    """A .docx just under the zip-ratio rule: ``xml_mb`` MB of paragraphs in the document part
    (inside the XML limit) and a stored random media member sized so the whole archive
    unpacks about ``ratio``:1 (refused above ``office.DOCX_MAX_RATIO``)."""
    make_docx(path)
    words = " ".join(f"word{i % 97} text{i % 13}" for i in range(60))
    unit = "".join(f"<w:p><w:r><w:t>{words} paragraph {i}</w:t></w:r></w:p>" for i in range(100))
    unit_bytes = unit.encode()
    head = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<w:document xmlns:w="{WORD_NS}"><w:body>'
    )
    repeats = (xml_mb << 20) // len(unit_bytes)
    xml = head.encode() + unit_bytes * repeats + b"</w:body></w:document>"
    replace_member(path, "word/document.xml", xml)
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    total = sum(i.file_size for i in infos)
    packed = sum(i.compress_size for i in infos)
    filler = max(0, int((total - ratio * packed) / (ratio - 1)))
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("word/media/noise.bin", os.urandom(filler))
    return path


# --- HTML and text ---------------------------------------------------------------------------


def flat_page(size: int) -> str:
    """A page whose body has thousands of sibling elements (quadratic for tree editing)."""
    row = "<tr><td>cell one</td><td>cell <b>two</b></td></tr>\n"
    para = "<p>Some <i>text</i> in a paragraph &amp; more.</p>\n"
    unit = para * 5 + "<table>" + row * 5 + "</table>\n<h2>Heading</h2>\n<br>"
    return "<html><body>" + (unit * (size // len(unit) + 1))[:size] + "</body></html>"


def invalid_utf8() -> bytes:
    """Bytes that decode as no text encoding kb accepts (high bytes, no NUL)."""
    return bytes(range(128, 256)) * 40 + os.urandom(2000).replace(b"\x00", b"\x81")


def binary_blob() -> bytes:
    """A PNG-like binary (NUL bytes) to rename as a text file."""
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(4096)


def write_big_text(path: Path, size_mb: int, *, single_line: bool = False) -> Path:
    """``size_mb`` MB of English-like text (one line without a newline when ``single_line``)."""
    line = b"The knowledge base indexes every paragraph of this file, line by line."
    line += b" " if single_line else b"\n"
    block = line * ((1 << 20) // len(line) + 1)
    block = block[: 1 << 20]
    with path.open("wb") as fh:
        for _ in range(size_mb):
            fh.write(block)
    return path


# --- measuring a whole run ---------------------------------------------------------------------

_PEAK_RSS = """
import ctypes, os, resource, signal, subprocess, sys
signal.alarm(int(sys.argv[2]))  # a hang ends this wrapper (and fails the test), never the suite
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
code = subprocess.call(sys.argv[3:])
while True:  # reap the orphans (the parse workers' forkserver), so their peak counts too
    try:
        os.wait()
    except ChildProcessError:
        break
with open(sys.argv[1], "w") as fh:
    fh.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def run_with_peak_rss(
    command: list[str], *, timeout: int, env: dict[str, str], cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``command``; return it and the peak resident memory in MB of the process and every
    descendant (parse workers included: ``ru_maxrss`` of reaped children, Linux only).

    The figure is an upper bound: a child starts with its parent's peak (here a small wrapper
    interpreter's) as ``ru_maxrss`` carries over ``exec``.
    """
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as out:
        done = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, out.name, str(timeout), *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=timeout + 30,
        )
        figure = out.read().strip()
    assert figure, f"the run did not finish (timeout {timeout} s?): {done.stderr[-2000:]}"
    return done, int(figure) / 1024
