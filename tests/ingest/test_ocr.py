"""OCR of scanned PDFs and images (issue 31), through ``kb ingest``, ``kb search`` and ``kb get``
as real subprocesses, on scans this file renders with real fonts (tests/scans.py).

One ingest of a folder serves most tests (OCR costs 1-3 s a page here): a mixed PDF (a text
page, a scanned page with the serial KX-4471, a scanned two-column page; a header and footer on
both scans), a clean PNG, a crooked and blurred JPEG, a Chinese PNG, a TIFF whose second frame
is damaged and a PNG bomb. "Not installed" is simulated in the subprocesses by a
``sitecustomize`` on PYTHONPATH that puts None in ``sys.modules`` for rapidocr_onnxruntime and
pypdfium2 (so importing them fails, as when the extra is missing; nothing is mocked inside kb).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from extras import need
from hostile import make_pdf
from kbcli.config.lookup import load_config
from kbcli.errors import ConfigError
from kbcli.ingest.loaders.layout import compose
from kbcli.ingest.loaders.ocr import PageScan, TextBox

need("rapidocr_onnxruntime")
need("pypdfium2")

from scans import (  # noqa: E402  (Pillow comes with the ocr extra)
    REQUIRE_CJK_ENV,
    cer,
    cjk_font,
    image_pdf,
    merge_pdfs,
    pdf_image_bomb,
    png_bomb,
    render_page,
    scanned,
    tiff_with_broken_frame,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
EXT = ".pdf,.png,.jpg,.tif"
CLEAN_EN = "Blower nameplate photo: the serial QZ-9083 is stamped on the housing."
CROOKED_EN = [
    "The night shift checks the boiler pressure twice,",
    "writes the readings into the grey logbook and",
    "calls the lighthouse office when a valve sticks.",
]
CHINESE = ["保修申请请寄往齐柏林办公室。", "水泵每年春天更换一次垫片。"]
BLOCKER = (
    "import sys\n"
    "for name in ('rapidocr_onnxruntime', 'pypdfium2'):\n"
    "    sys.modules[name] = None  # as if the ocr extra were not installed\n"
)


def kb_env(home: Path, *extra_path: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *extra_path])}
    env["KB_DB"] = str(home / "kb.db")
    config = home / "jianmu.yaml"
    if config.exists():
        env["KB_CONFIG"] = str(config)
    else:
        env.pop("KB_CONFIG", None)
    env.pop("KB_TEST_CRASH_AT", None)
    return env


def kb(home: Path, *args: str, extra_path: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        capture_output=True,
        text=True,
        env=kb_env(home, *extra_path),
        cwd=home,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def ingest(home: Path, folder: Path, *args: str, **kw) -> tuple[dict, subprocess.CompletedProcess]:
    done = kb(home, "ingest", str(folder), "--ext", EXT, "--json", *args, **kw)
    return json.loads(done.stdout), done


def search(home: Path, query: str) -> list[dict]:
    done = kb(home, "search", query, "--mode", "keyword", "--json", "-k", "3")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def indexed_text(home: Path, path: Path) -> str:
    done = kb(home, "get", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return "\n".join(line["text"] for line in json.loads(done.stdout)["lines"])


def chunks_by_page(home: Path, path: Path) -> dict[int, str]:
    done = kb(home, "list", "--source", str(path), "--limit", "0", "--json")
    assert done.returncode == 0, done.stderr
    pages: dict[int, str] = {}
    for chunk in json.loads(done.stdout):
        page = chunk["metadata"]["page"]
        pages[page] = (pages.get(page, "") + "\n" + chunk["text"]).strip()
    return pages


def require_cjk_font() -> str:
    font = cjk_font()
    if font is None:
        if os.environ.get(REQUIRE_CJK_ENV) == "1":
            pytest.fail(f"no CJK font found, and {REQUIRE_CJK_ENV}=1 (CI installs one in .ci/run)")
        pytest.skip("no CJK font here: apt-get install fonts-wqy-zenhei")
    return font


# --- one folder of scans, ingested once --------------------------------------------------------


def make_folder(folder: Path) -> dict[str, Path]:
    folder.mkdir()
    header, dpi = "ACME Service Manual", 150
    page2 = render_page(
        [
            "Gasket replacement happens every spring before the",
            "pumps are started again after the winter.",
            "",
            "The serial number KX-4471 identifies the model",
            "sold in northern markets.",
        ],
        dpi=dpi,
        header=header,
        footer="Page 2 of 3",
    )
    page3 = render_page(
        ["Two columns follow"],
        columns=[
            ["Apples grow in the left column", "beside bananas and ripe", "cherries near its end."],
            ["Dolphins swim in the right", "column with whales and", "turtles at the bottom."],
        ],
        dpi=dpi,
        header=header,
        footer="Page 3 of 3",
    )
    files = {"manual": folder / "manual.pdf"}
    text_page = make_pdf(["Introduction to the zeppelin pump family and its warranty."])
    files["manual"].write_bytes(merge_pdfs([text_page, image_pdf([page2, page3], dpi)]))
    files["photo"] = folder / "photo.png"
    render_page([CLEAN_EN], dpi=dpi, width_in=8, height_in=1.2).save(files["photo"])
    files["crooked"] = folder / "crooked.jpg"
    crooked = render_page(CROOKED_EN, dpi=dpi, width_in=6.5, height_in=2.4)
    scanned(crooked, angle=1.5, blur=1.0).convert("RGB").save(files["crooked"], quality=85)
    font = cjk_font()
    if font is not None:
        files["chinese"] = folder / "chinese.png"
        render_page(CHINESE, font=font, dpi=dpi, width_in=5, height_in=2).save(files["chinese"])
    files["frames"] = folder / "frames.tif"
    tiff_with_broken_frame(
        files["frames"],
        render_page(["Frame one mentions the harbour crane."], dpi=dpi, height_in=1.2),
        render_page(["Frame two is damaged."], dpi=dpi, height_in=1.2),
    )
    files["bomb"] = folder / "bomb.png"
    png_bomb(files["bomb"])
    files["pdf_bomb"] = folder / "image-bomb.pdf"
    files["pdf_bomb"].write_bytes(pdf_image_bomb())
    return files


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    home = tmp_path_factory.mktemp("ocr")
    # small chunks without overlap: a page's paragraphs become its chunks
    (home / "jianmu.yaml").write_text("limits:\n  chunk_size: 120\n  chunk_overlap: 0\n")
    files = make_folder(home / "docs")
    report, done = ingest(home, home / "docs")
    return home, files, report, done


@pytest.mark.slow
def test_each_scanned_page_is_found_on_its_page(scans):
    home, files, report, done = scans
    assert done.returncode == 1  # the bomb fails; everything else is indexed
    manual = str(files["manual"])
    assert not [f for f in report["failed"] if f["path"] != str(files["bomb"])], report["failed"]
    top = search(home, "KX-4471")[0]
    assert top["metadata"]["source"] == manual and top["metadata"]["page"] == 2
    assert top["metadata"]["ocr"] is True
    top = search(home, "gasket replacement spring")[0]
    assert (top["metadata"]["source"], top["metadata"]["page"]) == (manual, 2)
    top = search(home, "dolphins whales")[0]
    assert (top["metadata"]["source"], top["metadata"]["page"]) == (manual, 3)
    top = search(home, "zeppelin pump family")[0]  # the text layer, read as before
    assert (top["metadata"]["source"], top["metadata"]["page"]) == (manual, 1)
    assert "ocr" not in top["metadata"]


def test_columns_are_read_in_order_and_headers_and_footers_dropped(scans):
    home, files, _, _ = scans
    pages = chunks_by_page(home, files["manual"])
    assert sorted(pages) == [1, 2, 3]
    words = ["apples", "bananas", "cherries", "dolphins", "whales", "turtles"]
    third = pages[3].lower()
    places = [third.find(w) for w in words]
    assert -1 not in places and places == sorted(places), third
    # the two paragraphs of page 2 are two chunks; the repeated header and footer are gone
    assert "winter.\nThe serial" in pages[2], pages[2]
    everything = "\n".join(pages.values())
    assert "ACME Service Manual" not in everything and "of 3" not in everything, everything


def test_kb_get_shows_the_recognised_text(scans):
    home, files, _, _ = scans
    text = indexed_text(home, files["manual"])
    assert "KX-4471" in text and "Dolphins swim in the right" in text


def test_an_ocr_hit_is_located_by_its_page_and_kb_get_shows_it(scans):
    """``manual.pdf:5`` named a line of recognised text, which no editor can open: the
    location says the page, in the table and JSON, and ``kb get`` reads that page."""
    home, files, _, _ = scans
    manual = str(files["manual"])
    top = search(home, "KX-4471")[0]
    assert top["location"] == f"{manual}#page=2" and top["metadata"]["ocr"] is True
    table = kb(home, "search", "KX-4471", "--mode", "keyword", "-k", "1").stdout.splitlines()
    assert "docs/manual.pdf#page=2" in table and "docs/manual.pdf:" not in "".join(table)
    frame = search(home, "harbour crane")[0]  # an image's frame is its page
    assert frame["location"] == f"{files['frames']}#page=1"
    got = kb(home, "get", top["location"])
    assert got.returncode == 0 and "KX-4471" in got.stdout, got.stderr
    assert "Dolphins" not in got.stdout  # page 3 is not shown
    assert "showing the text OCR recognised" in got.stderr


def test_a_png_is_found_and_clean_english_is_within_two_percent_cer(scans):
    home, files, _, _ = scans
    hit = search(home, "QZ-9083")[0]
    assert hit["metadata"]["source"] == str(files["photo"]) and hit["metadata"]["page"] == 1
    got = indexed_text(home, files["photo"])
    assert cer(CLEAN_EN, got) <= 0.02, got


def test_a_crooked_blurred_scan_is_within_five_percent_cer(scans):
    home, files, _, _ = scans
    got = indexed_text(home, files["crooked"])
    assert cer(" ".join(CROOKED_EN), got) <= 0.05, got
    assert search(home, "lighthouse logbook")[0]["metadata"]["source"] == str(files["crooked"])


def test_chinese_text_is_found_and_within_five_percent_cer(scans):
    require_cjk_font()
    home, files, _, _ = scans
    got = indexed_text(home, files["chinese"])
    assert cer("".join(CHINESE), got) <= 0.05, got
    hit = search(home, "更换垫片")[0]
    assert hit["metadata"]["source"] == str(files["chinese"])


def test_a_damaged_frame_is_a_warning_and_the_others_are_indexed(scans):
    home, files, report, _ = scans
    frames = str(files["frames"])
    assert frames not in [f["path"] for f in report["failed"]]
    warned = [w for w in report["warnings"] if w.startswith(f"{frames}: page 2 ")]
    assert len(warned) == 1 and "could not be recognised" in warned[0], report["warnings"]
    hit = search(home, "harbour crane")[0]
    assert (hit["metadata"]["source"], hit["metadata"]["page"]) == (frames, 1)


def test_an_image_bomb_is_refused_with_one_line(scans):
    _, files, report, done = scans
    (failure,) = [f for f in report["failed"] if f["path"] == str(files["bomb"])]
    assert "100000 x 100000 pixels" in failure["error"]
    assert "ocr.max_megapixels" in failure["error"] and "\n" not in failure["error"]


def test_a_pdf_page_drawing_a_bomb_image_is_a_warning(scans):
    _, files, report, _ = scans
    bomb = str(files["pdf_bomb"])
    assert bomb not in [f["path"] for f in report["failed"]]
    assert any(w.startswith(f"{bomb}: ") for w in report["warnings"]), report["warnings"]


def test_slowest_carries_the_ocr_time_per_page(scans):
    _, files, report, _ = scans
    entry = {s["path"]: s for s in report["slowest"]}.get(str(files["manual"]))
    assert entry is not None, report["slowest"]
    assert entry["ocr_pages"] == 2 and 0 < entry["ocr_seconds_per_page"] <= entry["seconds"]
    assert all("ocr_pages" not in s for s in report["slowest"] if s["path"] == str(files["bomb"]))


def test_unchanged_scans_are_not_recognised_again(scans):
    home, _, _, _ = scans
    report, _ = ingest(home, home / "docs")
    assert report["unchanged"] >= 5 and report["added"] == report["updated"] == 0
    assert all("ocr_pages" not in s for s in report["slowest"])


# --- without the extra, and when a page cannot be recognised -----------------------------------


@pytest.mark.slow
def test_without_the_extra_scans_warn_and_images_fail_then_installing_reads_them(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    docs = tmp_path / "docs"
    docs.mkdir()
    scan = docs / "scan.pdf"
    scan.write_bytes(image_pdf([render_page([CLEAN_EN], width_in=8, height_in=1.2)]))
    png = docs / "note.png"
    render_page(["Image text."], width_in=3, height_in=1).save(png)

    report, done = ingest(tmp_path, docs, extra_path=(str(blocker),))
    assert done.returncode == 1
    (failure,) = report["failed"]
    assert failure == {
        "path": str(png),
        "error": f"{png}: images are read by OCR: OCR needs the 'rapidocr_onnxruntime' "
        "package: pip install 'kbcli[ocr]'",
    }
    (warning,) = [w for w in report["warnings"] if w.startswith(str(scan))]
    assert "no extractable text" in warning and "pip install 'kbcli[ocr]'" in warning
    assert report["added"] == 1 and report["chunks_added"] == 0

    # with the extra (no blocker) the scan is read again, though its bytes did not change
    report, done = ingest(tmp_path, docs, "--ext", ".pdf")
    assert done.returncode == 0, done.stderr
    assert report["updated"] == 1 and report["chunks_added"] >= 1
    assert search(tmp_path, "QZ-9083")[0]["metadata"]["source"] == str(scan)


def test_a_page_past_its_time_limit_is_a_warning_not_a_failure(tmp_path):
    (tmp_path / "jianmu.yaml").write_text("ocr:\n  page_timeout: 0.01\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    mixed = docs / "mixed.pdf"
    scan = image_pdf([render_page(["Never read."], width_in=4, height_in=1)])
    mixed.write_bytes(merge_pdfs([make_pdf(["The quartermaster keeps the keys."]), scan]))
    report, done = ingest(tmp_path, docs)
    assert done.returncode == 0, done.stderr
    assert report["failed"] == [] and report["added"] == 1
    (warning,) = report["warnings"]
    assert warning.startswith(f"{mixed}: page 2 could not be recognised: ")
    assert "0.01 s" in warning and "ocr.page_timeout" in warning
    assert search(tmp_path, "quartermaster")[0]["metadata"]["page"] == 1


# --- a file's whole OCR within limits.file_timeout, at most ocr.max_pages pages (issue 37) -----


def frame(text: str):
    """A small page (5 x 2.2 in at 100 dpi) showing one line of ``text``."""
    return render_page([text], dpi=100, width_in=5, height_in=2.2)


@pytest.mark.slow
def test_a_file_whose_ocr_runs_past_file_timeout_fails_named_and_the_rest_is_indexed(tmp_path):
    # 300 frames cannot be recognised in 1 s (loading the models alone takes about that); each
    # page alone is well within ocr.page_timeout, so only the file's limit can stop them
    (tmp_path / "jianmu.yaml").write_text("limits:\n  file_timeout: 1\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    tiff = docs / "log.tif"
    pages = [frame(f"Pump log line {n}, valve RV-{5000 + n}.") for n in range(300)]
    pages[0].save(tiff, save_all=True, append_images=pages[1:], compression="tiff_deflate")
    scan = docs / "scan.pdf"
    scan.write_bytes(image_pdf(pages[:150], 100))
    (docs / "notes.md").write_text("# Notes\n\nThe quartermaster keeps the keys.\n")
    report, done = ingest(tmp_path, docs, "--ext", ".pdf,.tif,.md")
    assert done.returncode == 1, done.stderr
    failed = {f["path"]: f["error"] for f in report["failed"]}
    assert sorted(failed) == sorted([str(scan), str(tiff)])
    for path, error in failed.items():
        # stopped while its frames were counted, or (as here, mostly) while they were read
        prefix = f"{path}: reading took longer than limits.file_timeout (1 s) and was stopped"
        assert error.startswith(prefix) and "\n" not in error, error
    assert report["added"] == 1  # the rest of the folder is indexed
    assert search(tmp_path, "quartermaster")[0]["metadata"]["source"] == str(docs / "notes.md")
    for path in (tiff, scan):  # nothing of a failed file is in the index
        assert kb(tmp_path, "list", "--source", str(path), "--json").stdout.strip() == "[]"
    assert f"Failed: {tiff}: reading took longer than limits.file_timeout" in done.stderr


@pytest.mark.slow
def test_pages_past_max_pages_are_skipped_with_a_warning_and_the_rest_indexed(tmp_path):
    (tmp_path / "jianmu.yaml").write_text("ocr:\n  max_pages: 2\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    tiff = docs / "crane.tif"
    pages = [frame(f"Crane inspection {word}.") for word in ("ALPHA", "BRAVO", "CHARLIE")]
    pages[0].save(tiff, save_all=True, append_images=pages[1:], compression="tiff_deflate")
    scan = docs / "boiler.pdf"
    text_page = make_pdf(["The boiler manual starts with a page of real text on it."])
    scan.write_bytes(merge_pdfs([text_page, image_pdf(pages, 100)]))
    report, done = ingest(tmp_path, docs)
    assert done.returncode == 0, done.stderr
    assert report["failed"] == [] and report["added"] == 2
    assert report["warnings"] == [
        f"{scan}: only the first 2 of its 3 scanned pages were read by OCR (ocr.max_pages): "
        "raise ocr.max_pages to read them all",
        f"{tiff}: only the first 2 of its 3 frames (pages) were read by OCR (ocr.max_pages): "
        "raise ocr.max_pages to read them all",
    ]
    for warning in report["warnings"]:
        assert f"Warning: {warning}" in done.stderr
    assert sorted(chunks_by_page(tmp_path, tiff)) == [1, 2]
    assert sorted(chunks_by_page(tmp_path, scan)) == [1, 2, 3]  # the text page and 2 scans
    assert "BRAVO" in indexed_text(tmp_path, tiff).upper()
    assert "CHARLIE" not in indexed_text(tmp_path, tiff).upper()

    # raising the cap reads those files again, whole
    (tmp_path / "jianmu.yaml").write_text("ocr:\n  max_pages: 5\n")
    report, done = ingest(tmp_path, docs)
    assert done.returncode == 0 and report["updated"] == 2 and report["warnings"] == []
    assert sorted(chunks_by_page(tmp_path, tiff)) == [1, 2, 3]
    assert "CHARLIE" in indexed_text(tmp_path, tiff).upper()


@pytest.mark.slow
def test_while_a_file_is_recognised_searches_run_and_sqlites_write_lock_is_free(tmp_path):
    """OCR runs while the file is prepared, before its rows are written: under the ingest's
    one-writer lock file (another kb ingest waits), never inside SQLite's write transaction, so
    searches, and any SQLite writer, go on meanwhile."""
    import sqlite3
    import time

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\nThe quartermaster keeps the keys.\n")
    assert ingest(tmp_path, docs, "--ext", ".md")[1].returncode == 0
    tiff = docs / "log.tif"
    pages = [frame(f"Pump log line {n}.") for n in range(60)]
    pages[0].save(tiff, save_all=True, append_images=pages[1:], compression="tiff_deflate")
    ingesting = subprocess.Popen(
        [sys.executable, "-m", "kbcli", "ingest", str(docs), "--ext", ".md,.tif"],
        env=kb_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        parser = None
        for _ in range(600):  # the parser process that recognises the frames
            children = Path(f"/proc/{ingesting.pid}/task/{ingesting.pid}/children")
            pids = children.read_text().split() if children.exists() else []
            if pids:
                parser = pids[0]
                break
            assert ingesting.poll() is None, ingesting.stderr.read()
            time.sleep(0.1)
        assert parser is not None
        time.sleep(1.0)  # into the frames
        assert ingesting.poll() is None  # still recognising
        db = sqlite3.connect(tmp_path / "kb.db", timeout=0, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")  # SQLite's write lock is free: no SQLITE_BUSY
        db.execute("ROLLBACK")
        db.close()
        assert search(tmp_path, "quartermaster")[0]["metadata"]["source"] == str(docs / "notes.md")
        assert ingesting.poll() is None
    finally:
        ingesting.kill()
        ingesting.wait()


def test_ocr_stops_at_the_files_deadline_and_says_how_far_it_got(tmp_path):
    import time

    from kbcli.config.lookup import OcrConfig
    from kbcli.errors import LoaderError
    from kbcli.ingest.loaders.ocr import run_pages, scan_image_frame

    png = tmp_path / "one.png"
    frame("Deadline check.").save(png)
    for deadline in (time.monotonic() - 1, time.monotonic() + 0.001):
        with pytest.raises(LoaderError) as caught:
            run_pages(
                scan_image_frame, str(png), None, [1, 2, 3], OcrConfig(), bounded=True,
                deadline=deadline, file_timeout=4, kind="frames (pages)",
            )  # fmt: skip
        assert str(caught.value) == (
            f"{png}: reading took longer than limits.file_timeout (4 s) and was stopped after "
            "recognising 0 of 3 frames (pages): not indexed; raise limits.file_timeout, or "
            "lower ocr.max_pages to index its first pages"
        )


def test_the_default_page_cap_leaves_the_ocr_signature_of_older_records_alone():
    from kbcli.config.lookup import OcrConfig
    from kbcli.ingest.loaders.ocr import signature

    older = "rapidocr1;dpi=200;mpx=40;min=20;conf=0.5;lang=zh,en"  # before ocr.max_pages
    assert signature(OcrConfig()) == older
    assert signature(OcrConfig(max_pages=500)) == older + ";pages=500"


def test_a_text_only_ingest_imports_no_ocr_package(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Notes\n\nPlain text.\n")
    (docs / "b.pdf").write_bytes(make_pdf(["A PDF page with a text layer and enough words."]))
    env = {**kb_env(tmp_path), "PYTHONPROFILEIMPORTTIME": "1"}  # the parser child too
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "ingest", str(docs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "pypdf" in imported  # the measurement saw the parser child
    assert not imported & {"rapidocr_onnxruntime", "pypdfium2", "onnxruntime", "cv2"}


def test_a_huge_page_is_rendered_within_max_megapixels(tmp_path):
    from kbcli.config.lookup import OcrConfig
    from kbcli.ingest.loaders.ocr import render_scale, scan_pdf_page

    options = OcrConfig()
    assert render_scale(612, 792, options) == 200 / 72  # a letter page: ocr.dpi
    huge = tmp_path / "poster.pdf"  # 200 x 200 inches, the most a PDF page may be
    huge.write_bytes(image_pdf([render_page(["Poster."], dpi=20, width_in=200, height_in=200)], 1))
    scan = scan_pdf_page(str(huge), None, 1, options)
    assert scan.width * scan.height <= options.max_megapixels * 1e6
    assert 31 <= scan.width / 200 <= 32  # about 32 dpi instead of 200


# --- layout (plain functions over boxes) -------------------------------------------------------


def line(x: float, y: float, text: str, *, height: float = 20, width: float | None = None):
    return TextBox(x, y, x + (width or 11 * len(text)), y + height, text, 0.99)


def test_two_columns_under_a_title_are_read_column_by_column():
    boxes = [line(100, 100, "A title across both columns of the page", width=900)]
    for n in range(4):  # lines of the two columns at the same heights
        boxes.append(line(100, 150 + 30 * n, f"left column line number {n} text"))
        boxes.append(line(600, 150 + 30 * n, f"right column line number {n} text"))
    boxes.append(line(100, 1540, "Page 1"))  # under the left column only: still read last
    text = compose([PageScan(1, 1200, 1600, boxes)])[1]
    left = text.index("left column line number 0")
    right = text.index("right column line number 0")
    assert text.index("left column line number 3") < right and left < right
    assert text.startswith("A title across") and text.endswith("\n\nPage 1")


def test_label_value_rows_stay_rows():
    boxes = []
    rows = [("Name:", "Ada"), ("Serial:", "KX-4471"), ("Year:", "1907")]
    for n, (label, value) in enumerate(rows):
        boxes += [line(100, 100 + 30 * n, label), line(500, 100 + 30 * n, value)]
    assert compose([PageScan(1, 1200, 1600, boxes)])[1] == ("Name: Ada Serial: KX-4471 Year: 1907")


def test_a_footer_on_every_page_is_dropped_and_paragraphs_split_at_gaps():
    pages = []
    for number in (1, 2, 3):
        boxes = [
            line(100, 200, "First paragraph starts here and it goes on to the"),
            line(100, 230, "next line where it ends."),
            line(100, 300, f"Page {number} body with a hyphen-"),
            line(100, 330, "ated word."),
            line(100, 1540, f"Confidential report, page {number} of 3"),
        ]
        pages.append(PageScan(number, 1200, 1600, boxes))
    text = compose(pages)
    assert text[2] == (
        "First paragraph starts here and it goes on to the next line where it ends.\n\n"
        "Page 2 body with a hyphenated word."
    )
    single = compose(pages[:1])[1]  # one page: nothing repeats, the footer stays
    assert single.endswith("Confidential report, page 1 of 3")


def test_chinese_lines_join_without_spaces():
    boxes = [line(100, 100, "水泵每年春天"), line(100, 130, "更换一次垫片。")]
    assert compose([PageScan(1, 800, 800, boxes)])[1] == "水泵每年春天更换一次垫片。"


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("ocr:\n  languages: [ja]\n", "read zh, en, not 'ja'"),
        ("ocr:\n  languages: []\n", "must be a list"),
        ("ocr:\n  dpi: 1200\n", "at most 600"),
        ("ocr:\n  dpi: 20\n", "at least 50"),
        ("ocr:\n  max_megapixels: 0.5\n", "between 1.0 and 1000.0"),
        ("ocr:\n  min_confidence: 2\n", "between 0.0 and 1.0"),
        ("ocr:\n  enabled: maybe\n", "true or false"),
        ("ocr:\n  page_timout: 5\n", "did you mean page_timeout?"),
        ("ocr:\n  max_pages: 0\n", "at least 1"),
        ("ocr:\n  max_pages: 2.5\n", "whole number"),
    ],
)
def test_bad_ocr_settings_are_one_line_errors(tmp_path, yaml, message):
    path = tmp_path / "jianmu.yaml"
    path.write_text(yaml)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in str(caught.value) and "ocr." in str(caught.value)


def test_ocr_settings_are_read(tmp_path):
    path = tmp_path / "jianmu.yaml"
    path.write_text("ocr:\n  languages: [EN]\n  dpi: 300\n  min_text_per_page: 0\n")
    ocr = load_config(path).ocr
    assert (ocr.languages, ocr.dpi, ocr.min_text_per_page, ocr.enabled) == (("en",), 300, 0, True)
    assert ocr.max_pages == 100
    path.write_text("ocr:\n  max_pages: 7\n")
    assert load_config(path).ocr.max_pages == 7


def test_english_only_drops_misread_han_and_full_width_forms():
    from kbcli.ingest.loaders.ocr import _clean

    assert _clean("Serial：KX－4471 号", ("en",)) == "Serial:KX-4471"
    assert _clean("Serial：KX－4471 号", ("zh", "en")) == "Serial：KX－4471 号"
    assert re.fullmatch(r"[\x20-\x7e]*", _clean("ＡＢＣ１２３", ("en",)))
