"""Loaders: formats, encodings, limits, errors and the extension registry."""

from __future__ import annotations

import codecs
import os
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from extras import need
from hostile import (
    docx_bad_crc,
    docx_flipped_byte,
    docx_truncated_directory,
    guide_docx,
    make_pdf,
)
from kbcli.config.lookup import OcrConfig
from kbcli.errors import LoaderError, MissingDependencyError, UnsupportedFormatError
from kbcli.ingest import (
    DefaultDocumentLoader,
    StructureAwareChunker,
    TextLoader,
    loader_for,
    register_loader,
    supported_extensions,
)
from kbcli.ingest.loaders import registry as loaders_module
from kbcli.ingest.loaders.bounded import run_bounded
from kbcli.ingest.loaders.text_encoding import SAMPLE_SIZE, read_text, utf16_without_bom
from kbcli.protocols import DocumentLoaderProtocol
from kbcli.types import Section

# --- helpers -----------------------------------------------------------------------------------


PAGES = ["Page one text.\nSecond line of page one.", "Page two (with parens).", "Page three."]


def assert_one_line_error(exc: pytest.ExceptionInfo, path: Path, *words: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for word in words:
        assert word.lower() in message.lower(), message


@pytest.fixture
def pdf_path(tmp_path: Path) -> Path:
    path = tmp_path / "three.pdf"
    path.write_bytes(make_pdf(PAGES))
    return path


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Let a test register loaders without leaking them into other tests."""
    copy = dict(loaders_module._LOADERS)
    monkeypatch.setattr(loaders_module, "_LOADERS", copy)
    return copy


# --- PDF ---------------------------------------------------------------------------------------


def test_pdf_helper_writes_a_file_pypdf_reads(pdf_path: Path) -> None:
    import pypdf

    reader = pypdf.PdfReader(pdf_path)
    assert len(reader.pages) == 3
    assert "Page two (with parens)." in reader.pages[1].extract_text()


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["in-process", "worker-process"])
def test_pdf_sections_carry_one_based_page_numbers(pdf_path: Path, timeout: float | None) -> None:
    sections = DefaultDocumentLoader(timeout=timeout).load_sections(pdf_path)
    assert [s.metadata["page"] for s in sections] == [1, 2, 3]
    assert sections[0].text == "Page one text.\nSecond line of page one."
    assert sections[1].text == "Page two (with parens)."
    assert sections[2].text == "Page three."


def test_pdf_load_joins_pages_with_a_blank_line(pdf_path: Path) -> None:
    loader = DefaultDocumentLoader()
    assert loader.load(pdf_path) == "\n\n".join(s.text for s in loader.load_sections(pdf_path))
    assert loader.load(pdf_path).count("\n\n") == 2


def test_pdf_chunks_keep_their_page(pdf_path: Path) -> None:
    loader = DefaultDocumentLoader()
    text = loader.load(pdf_path)
    chunks = StructureAwareChunker(chunk_size=20, chunk_overlap=5).chunk_sections(
        loader.load_sections(pdf_path)
    )
    assert {c.metadata["page"] for c in chunks} == {1, 2, 3}
    for chunk in chunks:
        start, end = chunk.metadata["char_start"], chunk.metadata["char_end"]
        assert text[start:end] == chunk.text
        assert chunk.text in PAGES[chunk.metadata["page"] - 1]


def test_encrypted_pdf_without_password_is_a_clear_error(tmp_path: Path, pdf_path: Path) -> None:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pdf_path)
    writer.encrypt("secret")
    path = tmp_path / "locked.pdf"
    writer.write(path)
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "encrypted", "password")


def test_pdf_encrypted_with_an_empty_password_still_loads(tmp_path: Path, pdf_path: Path) -> None:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pdf_path)
    writer.encrypt("")
    path = tmp_path / "open.pdf"
    writer.write(path)
    assert [s.metadata["page"] for s in DefaultDocumentLoader().load_sections(path)] == [1, 2, 3]


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["in-process", "worker-process"])
def test_truncated_pdf_is_a_loader_error(tmp_path: Path, timeout: float | None) -> None:
    data = make_pdf(PAGES)
    path = tmp_path / "cut.pdf"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=timeout).load(path)
    assert_one_line_error(exc, path, "not a readable PDF", "truncated or corrupt")


def test_random_bytes_named_pdf_is_a_loader_error(tmp_path: Path) -> None:
    path = tmp_path / "noise.pdf"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "not a readable PDF")


def test_scanned_pdf_gives_no_sections_and_a_warning(tmp_path: Path, pdf_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf(["", ""]))
    loader = DefaultDocumentLoader(timeout=30)
    assert loader.load_sections(path) == []
    assert loader.last_warnings == [
        f"{path}: no extractable text on any of its 2 pages, and no image to recognise (blank "
        "pages, or text drawn as shapes: run OCR first, e.g. ocrmypdf in.pdf out.pdf)"
    ]
    assert loader.last_ocr is None  # nothing worth rendering
    loader.load(pdf_path)
    assert loader.last_warnings == []  # reset by every call


def test_a_blank_scan_gives_no_sections_and_one_warning(tmp_path: Path) -> None:
    need("rapidocr_onnxruntime")
    need("pypdfium2")
    from PIL import Image

    path = tmp_path / "blank-scan.pdf"
    Image.new("L", (850, 1100), 255).save(path, "PDF", resolution=100)
    loader = DefaultDocumentLoader(timeout=30)
    assert loader.load_sections(path) == []
    assert loader.last_warnings == [
        f"{path}: no text on its only page: it has no text layer and OCR recognised none "
        "(blank or picture-only pages?)"
    ]
    assert loader.last_ocr is not None and loader.last_ocr["pages"] == 1
    disabled = DefaultDocumentLoader(timeout=30, ocr=OcrConfig(enabled=False))
    assert disabled.load_sections(path) == []
    assert disabled.last_warnings == [
        f"{path}: page 1 (of 1) has no extractable text; it looks scanned: OCR is off "
        "(ocr.enabled: false in jianmu.yaml) (or run OCR first, e.g. ocrmypdf in.pdf out.pdf)"
    ]


def test_pdf_parse_past_the_timeout_is_stopped(pdf_path: Path) -> None:
    from kbcli.ingest.loaders.bounded import shutdown

    # a fresh child: a warm one can parse this small file and answer before the parent even
    # waits for it (seen after an OCR test, on a loaded machine)
    shutdown()
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=1e-9).load(pdf_path)
    assert_one_line_error(exc, pdf_path, "limits.file_timeout")


def test_bounded_run_kills_a_hung_worker() -> None:
    started = time.monotonic()
    with pytest.raises(LoaderError, match="longer than 0.3 s"):
        run_bounded(time.sleep, (30,), timeout=0.3, label="slow.pdf")
    assert time.monotonic() - started < 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS via /proc is Linux")
def test_bounded_run_caps_worker_memory() -> None:
    with pytest.raises(LoaderError, match="memory"):
        run_bounded(bytearray, (64 << 30,), timeout=60, label="bomb.pdf")


def test_bounded_run_reports_bugs_as_bugs_not_bad_files() -> None:
    with pytest.raises(RuntimeError, match="invalid literal"):
        run_bounded(int, ("not a number",), timeout=60, label="x")


def test_bounded_run_returns_the_result() -> None:
    assert run_bounded(sorted, ([3, 1, 2],), timeout=60, label="x") == [1, 2, 3]


def test_one_parser_process_serves_file_after_file_and_a_stopped_one_is_replaced() -> None:
    first = run_bounded(os.getpid, (), timeout=60, label="a")
    assert run_bounded(os.getpid, (), timeout=60, label="b") == first != os.getpid()
    with pytest.raises(LoaderError, match="longer than"):
        run_bounded(time.sleep, (30,), timeout=0.3, label="slow.pdf")
    assert not os.path.exists(f"/proc/{first}") or _zombie(first)
    after = run_bounded(os.getpid, (), timeout=60, label="c")
    assert after not in (first, os.getpid())
    with pytest.raises(LoaderError, match="memory"):
        run_bounded(bytearray, (64 << 30,), timeout=60, label="bomb.pdf")
    assert run_bounded(os.getpid, (), timeout=60, label="d") != after  # not reused after that


def test_a_parser_died_of_a_signal_is_one_line_and_the_next_file_gets_a_new_one() -> None:
    with pytest.raises(LoaderError, match=r"crash.pdf: the parser process died \(exit code -6\)"):
        run_bounded(os.abort, (), timeout=60, label="crash.pdf")
    assert run_bounded(sorted, ([2, 1],), timeout=60, label="x") == [1, 2]


def test_a_function_the_child_cannot_import_runs_in_this_process() -> None:
    def local() -> int:
        return os.getpid()

    assert run_bounded(local, (), timeout=60, label="x") == os.getpid()


def test_the_parser_process_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    import signal
    import subprocess

    script = (
        "import os, time\n"
        "from kbcli.ingest.loaders.bounded import run_bounded\n"
        "print(run_bounded(os.getpid, (), timeout=60, label='a'), flush=True)\n"
        "run_bounded(time.sleep, (120,), timeout=300, label='slow')\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the child is now inside its 120 s sleep
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{child}") and not _zombie(child):
            assert time.monotonic() < deadline, "the parser outlived its parent"
            time.sleep(0.1)
    finally:
        parent.kill()
        parent.wait()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" in fh.read()
    except OSError:
        return True


# --- DOCX --------------------------------------------------------------------------------------


def test_docx_paragraphs_headings_and_tables_in_order(tmp_path: Path) -> None:
    path = guide_docx(tmp_path / "guide.docx")
    sections = DefaultDocumentLoader(timeout=30).load_sections(path)
    assert [s.metadata.get("heading") for s in sections] == [
        None,
        "Install",
        "Install > Linux",
        "Install > Windows",
        "Usage",
    ]
    assert sections[0].text == "Preamble before any heading."
    assert sections[2].text == (
        "Linux\n\nUse the package manager.\n\nOS | Command\nDebian | apt install kb"
    )
    assert sections[4].text == "Usage\n\nRun kb search."


def test_docx_in_process_matches_worker(tmp_path: Path) -> None:
    path = guide_docx(tmp_path / "guide.docx")
    assert DefaultDocumentLoader().load(path) == DefaultDocumentLoader(timeout=30).load(path)


def test_docx_that_is_not_a_zip_is_a_loader_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.docx"
    path.write_bytes(b"this is not a zip archive at all" * 10)
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "not a zip", ".docx")


def test_zip_without_word_parts_is_a_loader_error(tmp_path: Path) -> None:
    path = tmp_path / "other.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "not a readable .docx")


DAMAGED = "open it in Word or LibreOffice (they can often repair it) and save it again as .docx"


@pytest.mark.parametrize("timeout", [30, None], ids=["worker", "in-process"])
@pytest.mark.parametrize(
    "paragraphs",
    [1, 400],
    ids=["small-part: the prolog check reads it all", "large-part: python-docx reads it"],
)
def test_docx_whose_part_fails_its_crc_is_called_damaged(tmp_path, paragraphs, timeout):
    path = docx_flipped_byte(tmp_path / "crc.docx", paragraphs, damage="crc")
    with zipfile.ZipFile(path) as archive:  # the damage is what the test means it to be
        with pytest.raises(zipfile.BadZipFile, match="Bad CRC-32"):
            archive.read("word/document.xml")
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=timeout).load(path)
    assert_one_line_error(exc, path, "the file is damaged", "word/document.xml", "CRC-32", DAMAGED)
    assert "not a zip" not in str(exc.value)


def test_docx_with_a_wrong_recorded_crc_is_called_damaged(tmp_path):
    path = docx_bad_crc(tmp_path / "bad-crc.docx")
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "damaged", "word/document.xml fails its CRC-32", DAMAGED)


@pytest.mark.parametrize("paragraphs", [1, 400])
def test_docx_with_corrupt_deflate_data_names_the_part(tmp_path, paragraphs):
    path = docx_flipped_byte(tmp_path / "deflate.docx", paragraphs, damage="deflate")
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(
        exc, path, "damaged", "word/document.xml has corrupt compressed data", DAMAGED
    )


@pytest.mark.parametrize("cut", ["half", "directory"])
def test_truncated_docx_is_called_truncated_not_a_non_zip(tmp_path, cut):
    path = tmp_path / "cut.docx"
    if cut == "half":
        data = guide_docx(path).read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        docx_truncated_directory(path)
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "truncated or damaged", "zip directory", DAMAGED)
    assert "not a zip" not in str(exc.value)


def test_password_protected_docx_says_so(tmp_path):
    path = tmp_path / "locked.docx"  # Word writes an encrypted .docx as an OLE container
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "password-protected", "remove the password")


def test_zip_bomb_docx_is_refused_before_unpacking(tmp_path: Path) -> None:
    path = guide_docx(tmp_path / "bomb.docx")
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/media/zeros.bin", "w") as member:
            block = bytes(1 << 20)
            for _ in range(64):
                member.write(block)
    assert path.stat().st_size < 1 << 20  # small on disk, 64 MB unpacked
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(timeout=30).load(path)
    assert_one_line_error(exc, path, "zip bomb")


def test_doc_files_advise_converting_to_docx(tmp_path: Path) -> None:
    path = tmp_path / "old.doc"
    path.write_bytes(b"\xd0\xcf\x11\xe0legacy")
    with pytest.raises(UnsupportedFormatError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "convert", ".docx")


# --- text and encodings ------------------------------------------------------------------------

CHINESE = "知识库支持中文文档。编码必须正确识别，否则会出现乱码！这是第三句话？"


def test_gbk_chinese_text_decodes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "gbk.txt"
    path.write_bytes((CHINESE + "\n第二段：简体中文的旧编码文件。\n").encode("gbk"))
    text = DefaultDocumentLoader().load(path)
    assert text == CHINESE + "\n第二段：简体中文的旧编码文件。"


def test_short_gbk_text_decodes(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_bytes("简体中文：你好世界".encode("gbk"))
    assert DefaultDocumentLoader().load(path) == "简体中文：你好世界"


@pytest.mark.parametrize(
    ("bom", "codec"),
    [
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
        (codecs.BOM_UTF8, "utf-8"),
    ],
    ids=["utf-16-le", "utf-16-be", "utf-8-bom"],
)
def test_files_with_a_bom_decode_and_lose_the_bom(tmp_path: Path, bom: bytes, codec: str) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes(bom + ("Héllo wörld\n" + CHINESE).encode(codec))
    assert DefaultDocumentLoader().load(path) == "Héllo wörld\n" + CHINESE


def test_first_guess_encoding_is_used(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes("naïve café, déjà vu".encode("latin-1"))
    assert DefaultDocumentLoader(encoding="latin-1").load(path) == "naïve café, déjà vu"


def test_legacy_western_text_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "cp1252.txt"
    sentence = "Le café crème était très bon, à la française, déjà servi. " * 5
    path.write_bytes(sentence.strip().encode("cp1252"))
    assert DefaultDocumentLoader().load(path) == sentence.strip()


def test_undecodable_bytes_are_an_error_not_mangled_text(tmp_path: Path) -> None:
    path = tmp_path / "noise.txt"
    path.write_bytes(bytes(range(128, 256)) * 40 + os.urandom(2000).replace(b"\x00", b"\x81"))
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "cannot decode", "UTF-8")


def test_binary_file_with_nul_bytes_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(100))
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "binary")


# --- UTF-16 without a byte-order mark ------------------------------------------------------------

UTF16_TEXTS = {
    "english": "A note saved by a Windows tool.\r\nSecond line, with digits 2024.\r\n" * 8,
    "german": "Grüße aus Köln: Straße, Größe, Maß.\n" * 10,
    "russian": "Привет, мир! Поиск по документам работает.\n" * 10,
    "chinese-with-ascii": "笔记 kb 知识库：搜索 search 中文。\n" * 10,
    "chinese-no-ascii": CHINESE * 6,  # no ASCII at all: no NUL byte but the U+4E00 of 一
    "japanese-no-nul": "日本語のテキストです。検索エンジンのテストをしています。" * 4,
    "emoji": "ok 😀 fine, 𝄞 music\n" * 20,  # surrogate pairs
    "short-ascii": "hi",
}


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("name", list(UTF16_TEXTS))
def test_utf16_without_a_bom_decodes_exactly(tmp_path, name, codec):
    text = UTF16_TEXTS[name]
    path = tmp_path / "wide.txt"
    path.write_bytes(text.encode(codec))
    assert not path.read_bytes().startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    assert read_text(path) == text
    assert utf16_without_bom(path.read_bytes()) == codec


def test_a_large_utf16_file_decodes_past_the_sniffed_sample(tmp_path):
    line = "Line about sixteenword, 中文 and 😀.\n"
    text = line * ((3 * SAMPLE_SIZE) // len(line))  # past the 1 MB sample, pairs cut anywhere
    path = tmp_path / "big.md"
    path.write_bytes(text.encode("utf-16-le"))
    assert DefaultDocumentLoader().load(path) == text.strip()


def test_utf16_that_breaks_after_its_start_is_refused_naming_the_encoding(tmp_path):
    path = tmp_path / "broken.txt"
    good = "Plain text in UTF-16.\n" * 4000  # past the sniffed 64 KB
    path.write_bytes(good.encode("utf-16-le") + b"\x00\xd8" + "tail".encode("utf-16-le"))
    with pytest.raises(LoaderError) as exc:
        read_text(path)
    assert_one_line_error(exc, path, "starts as UTF-16-LE text without a byte-order mark", "UTF-8")


def _elf() -> bytes:
    with open(sys.executable, "rb") as fh:  # a real executable (or the real ELF it runs)
        data = fh.read(256 << 10)
    if not data.startswith(b"\x7fELF"):
        pytest.skip("the interpreter is not an ELF binary here")
    return data


def _sqlite(tmp_path: Path) -> bytes:
    import sqlite3

    db = tmp_path / "real.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (name TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [(f"row {i}",) for i in range(500)])
    return db.read_bytes()


def _png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes((x * 7 + y) % 256 for x in range(96)) for y in range(32))
    header = struct.pack(">IIBBBBB", 32, 32, 8, 0, 0, 0, 0)  # 32x32, 8-bit grey (96 = 3 x 32)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))


def _zip(tmp_path: Path) -> bytes:
    return guide_docx(tmp_path / "any.docx").read_bytes()


def _nul_separated() -> bytes:  # find -print0, /proc/*/environ: ASCII strings split by NULs
    return b"\x00".join(f"./docs/section-{i}/notes-{i * 7}.md".encode() for i in range(300))


BINARIES = {
    "png": lambda tmp: _png(),
    "elf": lambda tmp: _elf(),
    "gzip": lambda tmp: __import__("gzip").compress(b"text inside a gzip " * 500, mtime=0),
    "sqlite": _sqlite,
    "zip": _zip,
    "random": lambda tmp: __import__("random").Random(7).randbytes(8192),
    "nul-separated": lambda tmp: _nul_separated(),
    "utf-32-no-bom": lambda tmp: ("UTF-32 text without a BOM.\n" * 50).encode("utf-32-le"),
    "png-like": lambda tmp: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8,
}


@pytest.mark.parametrize("kind", list(BINARIES))
def test_binary_files_are_still_refused_as_binary(tmp_path, kind):
    data = BINARIES[kind](tmp_path)
    assert b"\x00" in data[:8192]
    path = tmp_path / f"{kind}.txt"
    path.write_bytes(data)
    assert utf16_without_bom(data) is None
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "binary")


def test_random_short_binaries_with_nuls_are_not_taken_for_utf16():
    rng = __import__("random").Random(11)
    taken = 0
    for size in (8, 16, 32, 64, 128, 512):
        for _ in range(300):
            data = rng.randbytes(size - 1) + b"\x00"
            taken += utf16_without_bom(data) is not None
    assert taken <= 2, taken  # measured: 0 of 1800 with this seed


def test_short_utf16_without_ascii_is_not_detected(tmp_path):
    """Under 64 characters, UTF-16 without a BOM is recognised only when mostly ASCII: a
    12-character Chinese note has too little to tell it from a few random bytes, and stays
    refused (as binary when it has a NUL byte, as undecodable when it has none)."""
    path = tmp_path / "short.txt"
    path.write_bytes("你好世界，这是一个测试。".encode("utf-16-le"))  # 一 is U+4E00: a NUL byte
    with pytest.raises(LoaderError, match="binary"):
        read_text(path)
    path.write_bytes("日本語のテキストです。".encode("utf-16-le"))
    with pytest.raises(LoaderError, match="cannot decode"):
        read_text(path)


def test_text_is_normalised_by_the_loader(tmp_path: Path) -> None:
    path = tmp_path / "crlf.md"
    path.write_bytes(b"# Title  \r\n\r\n\r\n\r\nBody\x07 text.\r\n")
    assert DefaultDocumentLoader().load(path) == "# Title\n\nBody text."


def test_empty_text_file_gives_no_sections(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    assert DefaultDocumentLoader().load_sections(path) == []


@pytest.mark.slow
def test_50_mb_text_file_loads_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    paragraph = ("The knowledge base indexes every paragraph of this file. " * 8).strip()
    block = f"## Part\n\n{paragraph}\n\n{paragraph}\n\n"
    with path.open("w", encoding="utf-8") as fh:
        for _ in range((50 << 20) // len(block) + 1):
            fh.write(block)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        text = DefaultDocumentLoader().load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(text) >= 50 << 20
    assert text.startswith("## Part\n\nThe knowledge base")
    assert peak < 6 * size, f"peak {peak / size:.1f}x the file size"


def test_files_over_max_file_mb_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "large.txt"
    path.write_bytes(b"a" * (2 << 20))
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader(max_file_mb=1).load(path)
    assert_one_line_error(exc, path, "2.0 MB", "1 MB limit", "limits.max_file_mb")
    assert len(DefaultDocumentLoader(max_file_mb=3).load(path)) == 2 << 20


def test_missing_file_is_a_loader_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.txt"
    with pytest.raises(LoaderError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "no such file")


def test_unknown_extension_names_it_and_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "data.xyz"
    path.write_text("x")
    with pytest.raises(UnsupportedFormatError) as exc:
        DefaultDocumentLoader().load(path)
    assert_one_line_error(exc, path, "'.xyz'", ".pdf", ".docx", ".md", ".html")


def test_markdown_chunk_offsets_point_into_the_loaded_text(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text(
        "# Install\r\n\r\nRun the installer.  \r\n\r\n\r\n## Linux\r\nUse apt. Or use pip.\r\n"
        "### Debian\r\nSame as Linux.\r\n# Usage\r\nRun kb.\r\n",
        encoding="utf-8",
    )
    loader = DefaultDocumentLoader()
    text = loader.load(path)
    chunks = StructureAwareChunker(chunk_size=40, chunk_overlap=10).chunk_sections(
        loader.load_sections(path)
    )
    for chunk in chunks:
        assert text[chunk.metadata["char_start"] : chunk.metadata["char_end"]] == chunk.text
    assert [c.metadata["heading"] for c in chunks] == [
        "Install",
        "Install > Linux",
        "Install > Linux > Debian",
        "Usage",
    ]


# --- HTML --------------------------------------------------------------------------------------

HTML = """<!DOCTYPE html>
<html><head><title>Hidden title</title><style>body { color: red; }</style>
<script>var secret = "do not index";</script></head>
<body>
  <p>Intro   text
     across lines &amp; entities.</p>
  <!-- a comment -->
  <h1>Guide</h1>
  <p>First <b>bold</b> paragraph.</p>
  <h2>Setup</h2>
  <table><tr><th>Name</th><th>Value</th></tr><tr><td>size</td><td>500</td></tr></table>
  <script>alert("nope")</script>
  <h1>Other</h1>
  <ul><li>one</li><li>two</li></ul>
</body></html>
"""


def test_html_visible_text_and_heading_sections(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(HTML, encoding="utf-8")
    loader = DefaultDocumentLoader()
    sections = loader.load_sections(path)
    text = loader.load(path)
    for hidden in ("color: red", "do not index", "nope", "Hidden title", "a comment"):
        assert hidden not in text
    assert [s.metadata.get("heading") for s in sections] == [
        None,
        "Guide",
        "Guide > Setup",
        "Other",
    ]
    assert sections[0].text == "Intro text across lines & entities."
    assert sections[1].text == "Guide\n\nFirst bold paragraph."
    assert sections[2].text == "Setup\n\nName | Value\nsize | 500"
    assert sections[3].text == "Other\n\none\n\ntwo"


def test_htm_extension_uses_the_html_loader(tmp_path: Path) -> None:
    path = tmp_path / "page.htm"
    path.write_text("<p>Hi <script>x()</script>there</p>", encoding="utf-8")
    assert DefaultDocumentLoader().load(path) == "Hi there"


def test_html_without_beautifulsoup_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "page.html"
    path.write_text("<p>hi</p>", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "bs4", None)
    with pytest.raises(MissingDependencyError, match=r"kbcli\[html\]"):
        DefaultDocumentLoader().load(path)


# --- registry ----------------------------------------------------------------------------------


class CsvLoader:
    def load(self, path: str | Path) -> str:
        return Path(path).read_text(encoding="utf-8").replace(",", " | ")


class StructuredLoader:
    def __init__(self) -> None:
        self.last_warnings: list[str] = []

    def load(self, path: str | Path) -> str:
        return "unused"

    def load_sections(self, path: str | Path) -> list[Section]:
        self.last_warnings = [f"{path}: row 3 was empty"]
        return [Section("first  ", {"row": 1}), Section("   "), Section("second", {"row": 2})]


def test_registered_plain_loader_becomes_one_section(registry: dict, tmp_path: Path) -> None:
    register_loader("CSV", CsvLoader())
    path = tmp_path / "table.csv"
    path.write_text("a,b\r\nc,d\r\n", encoding="utf-8")
    loader = DefaultDocumentLoader()
    assert loader.load_sections(path) == [Section("a | b\nc | d", {})]
    assert ".csv" in supported_extensions()
    assert isinstance(loader_for(path), CsvLoader)


def test_registered_sections_loader_keeps_metadata_and_warnings(
    registry: dict, tmp_path: Path
) -> None:
    register_loader([".rows", "tsv"], StructuredLoader())
    path = tmp_path / "data.tsv"
    path.write_text("ignored")
    loader = DefaultDocumentLoader()
    assert loader.load_sections(path) == [
        Section("first", {"row": 1}),
        Section("second", {"row": 2}),
    ]
    assert loader.last_warnings == [f"{path}: row 3 was empty"]
    assert loader.load(path) == "first\n\nsecond"


def test_registering_replaces_a_builtin_loader(registry: dict, tmp_path: Path) -> None:
    register_loader(".txt", CsvLoader())
    path = tmp_path / "a.txt"
    path.write_text("x,y", encoding="utf-8")
    assert DefaultDocumentLoader().load(path) == "x | y"


def test_register_loader_rejects_non_loaders(registry: dict) -> None:
    with pytest.raises(TypeError, match="CsvLoader()"):
        register_loader(".csv", CsvLoader)
    with pytest.raises(TypeError, match="no load"):
        register_loader(".csv", object())
    with pytest.raises(ValueError, match="empty"):
        register_loader("", CsvLoader())


def test_builtin_extensions_are_supported() -> None:
    expected = {
        ".txt",
        ".text",
        ".md",
        ".markdown",
        ".rst",
        ".pdf",
        ".docx",
        ".doc",
        ".html",
        ".htm",
    }
    assert expected <= set(supported_extensions())
    assert supported_extensions() == sorted(supported_extensions())


def test_loaders_satisfy_the_protocol() -> None:
    assert isinstance(DefaultDocumentLoader(), DocumentLoaderProtocol)
    for ext in supported_extensions():
        assert isinstance(loader_for(f"x{ext}"), DocumentLoaderProtocol)


def test_text_loader_standalone_reads_raw_text(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"line  \r\n")
    assert TextLoader().load(path) == "line  \r\n"


@pytest.mark.parametrize(("option", "value"), [("max_file_mb", 0), ("timeout", -1)])
def test_default_loader_validates_limits(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{option} must be positive"):
        DefaultDocumentLoader(**{option: value})
