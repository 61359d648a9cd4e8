"""Loaders within their limits: linear-time HTML in the bounded worker, bounded text reads
with a deadline, DOCX archives checked before parsing, special files refused, torn reads.

Set KB_STRESS=1 for the long variants (an 8 MB HTML page, a 150 MB text file).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import docx_external_entity, docx_with, flat_page
from kbcli.errors import LoaderError
from kbcli.ingest import DefaultDocumentLoader, register_loader
from kbcli.ingest.files import read_blocks, read_bounded
from kbcli.ingest.loaders.html import html_to_sections
from kbcli.ingest.loaders.registry import TextLoader

STRESS = os.environ.get("KB_STRESS") == "1"


# --- HTML -----------------------------------------------------------------------------------


def test_one_mb_html_page_loads_in_linear_time(tmp_path):
    path = tmp_path / "big.html"
    path.write_text(flat_page(1 << 20), encoding="utf-8")
    started = time.monotonic()
    sections = DefaultDocumentLoader(timeout=60).load_sections(path)
    took = time.monotonic() - started
    assert len(sections) > 1000 and sections[1].metadata["heading"] == "Heading"
    assert took < 15, f"{took:.1f} s (the tree-editing loader took 60-300 s)"


@pytest.mark.skipif(not STRESS, reason="long variant: KB_STRESS=1")
def test_eight_mb_html_page_loads(tmp_path):
    path = tmp_path / "big.html"
    path.write_text(flat_page(8 << 20), encoding="utf-8")
    started = time.monotonic()
    sections = DefaultDocumentLoader(timeout=120).load_sections(path)
    print(f"8 MB HTML: {time.monotonic() - started:.1f} s, {len(sections)} sections")
    assert len(sections) > 10_000


def test_html_runs_under_the_parse_timeout(tmp_path):
    path = tmp_path / "page.html"
    path.write_text(flat_page(200_000), encoding="utf-8")
    with pytest.raises(LoaderError, match="limits.file_timeout"):
        DefaultDocumentLoader(timeout=1e-9).load(path)


def test_html_over_the_size_limit_is_refused(tmp_path):
    path = tmp_path / "page.html"
    path.write_text(flat_page(2 << 20), encoding="utf-8")
    with pytest.raises(LoaderError, match="limit"):
        DefaultDocumentLoader(max_file_mb=1, timeout=30).load(path)


@pytest.mark.parametrize(
    "markup, expected",
    [
        ("<div>one<br>two<br/>three</div>", [("one\ntwo\nthree", {})]),
        ("<pre>  keep\n  lines</pre>", [("keep\nlines", {})]),
        ("<table><tr><td>a</td><td></td><td></td></tr></table>", [("a", {})]),
        ("<p>unclosed <b>bold <i>it</p> after </b> tail", [("unclosed bold it\n\nafter tail", {})]),
        ("<h1>T <i>it</i></h1>body<h3>deep</h3>x<h2>mid</h2>y", None),
        ("<svg><text>no</text></svg><noscript>no</noscript><iframe>no</iframe>yes", [("yes", {})]),
        ("<h1></h1><p>&lt;tag&gt; caf\u00e9</p><!-- c --><![CDATA[x]]>", [("<tag> café", {})]),
        ("<html><head><title>t</title><body><p>no end head</p>", [("no end head", {})]),
    ],
)
def test_html_text_rules(tmp_path, markup, expected):
    path = tmp_path / "page.html"
    path.write_text(markup, encoding="utf-8")
    sections = [(s.text, s.metadata) for s in DefaultDocumentLoader().load_sections(path)]
    if expected is None:
        assert [m.get("heading") for _, m in sections] == ["T it", "T it > deep", "T it > mid"]
    else:
        assert sections == expected


def test_deep_nesting_and_unmatched_end_tags_stay_linear():
    markup = "<div>" * 50_000 + "text" + "</span>" * 50_000 + "</div>" * 50_000
    started = time.monotonic()
    assert [t.strip() for t, _ in html_to_sections(markup)] == ["text"]
    assert time.monotonic() - started < 10


# --- plain text -----------------------------------------------------------------------------


def test_text_reading_stops_at_the_deadline(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"line of text\n" * 300_000)  # 3.9 MB: more than one block
    with pytest.raises(LoaderError, match="limits.file_timeout"):
        TextLoader(timeout=1e-9).load(path)
    assert TextLoader(timeout=30).load(path).startswith("line of text")


def test_bytes_are_bounded_whatever_stat_says(tmp_path):
    with pytest.raises(LoaderError, match="1 MB limit"):
        list(read_blocks(io.BytesIO(bytes(3 << 20)), "grown.txt", 1 << 20))
    assert len(b"".join(read_blocks(io.BytesIO(bytes(1 << 20)), "ok.txt", 1 << 20))) == 1 << 20


def test_devices_and_fifos_are_refused_before_reading(tmp_path):
    with pytest.raises(LoaderError, match="character device"):
        read_bounded("/dev/zero", 1 << 20)
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(LoaderError, match="FIFO"):
        DefaultDocumentLoader().load(fifo)  # would block forever if opened for reading
    link = tmp_path / "zero.txt"
    link.symlink_to("/dev/zero")
    with pytest.raises(LoaderError, match="not a regular file"):
        DefaultDocumentLoader().load(link)


def test_long_space_runs_normalise_in_linear_time(tmp_path):
    path = tmp_path / "spaces.txt"
    path.write_text("a" + " " * 2_000_000 + "b \nnext  \n", encoding="utf-8")
    started = time.monotonic()
    text = DefaultDocumentLoader().load(path)
    assert text.endswith("b\nnext") and time.monotonic() - started < 5


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_150_mb_text_file_peak_memory(tmp_path):
    """The loader alone holds about twice the file (bytes decoded, then the text); measured
    in a child process so the figure is the real peak RSS."""
    size_mb = 150 if STRESS else 20
    path = tmp_path / "big.txt"
    line = b"The knowledge base indexes every paragraph of this file, line by line.\n"
    with path.open("wb") as fh:
        block = line * ((1 << 20) // len(line))
        for _ in range(size_mb):
            fh.write(block)
    # VmHWM (this process's peak RSS); ru_maxrss would carry over the parent's peak
    code = (
        "import re,sys; from kbcli.ingest import DefaultDocumentLoader as D\n"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
        "before = hwm(); t = D(max_file_mb=200, timeout=120).load(sys.argv[1])\n"
        "assert len(t) > 1000; print((hwm() - before) // 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    peak = int(out.stdout)
    print(f"{size_mb} MB text: loader peak {peak} MB above the interpreter")
    assert size_mb <= peak < 3 * size_mb + 50, peak


# --- torn reads -----------------------------------------------------------------------------


class RewritingLoader:
    """Rewrites the file on the first ``times`` loads, as an editor saving meanwhile would."""

    def __init__(self, times: int):
        self.times = times
        self.calls = 0

    def load(self, path):
        self.calls += 1
        text = Path(path).read_text(encoding="utf-8")
        if self.calls <= self.times:
            time.sleep(0.01)
            Path(path).write_text(text + f" edit {self.calls}", encoding="utf-8")
        return text


def test_loader_rereads_a_file_that_changed_while_read(tmp_path, monkeypatch):
    from kbcli.ingest.loaders import registry as loaders

    monkeypatch.setattr(loaders, "_LOADERS", dict(loaders._LOADERS))
    path = tmp_path / "note.csvx"
    path.write_text("first", encoding="utf-8")
    once = RewritingLoader(1)
    register_loader(".csvx", once)
    assert DefaultDocumentLoader().load(path) == "first edit 1"
    assert once.calls == 2
    always = RewritingLoader(10)
    register_loader(".csvx", always)
    with pytest.raises(LoaderError, match="changed while it was being read"):
        DefaultDocumentLoader().load(path)


# --- DOCX archives --------------------------------------------------------------------------


def test_docx_with_a_doctype_is_refused(tmp_path):
    path = docx_external_entity(tmp_path / "xxe.docx")
    with pytest.raises(LoaderError, match="DOCTYPE"):
        DefaultDocumentLoader(timeout=30).load(path)


def test_docx_with_too_many_members_is_refused(tmp_path, monkeypatch):
    from kbcli.ingest.loaders import office

    monkeypatch.setattr(office, "DOCX_MAX_MEMBERS", 50)
    path = docx_with(tmp_path, "many.docx", {f"word/media/{i}.bin": b"x" for i in range(60)})
    with pytest.raises(LoaderError, match="members"):
        DefaultDocumentLoader(timeout=30).load(path)


def test_docx_whose_xml_unpacks_too_big_is_refused(tmp_path, monkeypatch):
    from kbcli.ingest.loaders import office

    monkeypatch.setattr(office, "DOCX_MAX_XML_MB", 1)
    # just under the ratio rule (it starts at 20 MB): only the XML limit can catch it
    path = docx_with(tmp_path, "wide.docx", {"word/extra.xml": b"<a>" + b" " * (3 << 20) + b"</a>"})
    with pytest.raises(LoaderError, match="XML parts unpack"):
        DefaultDocumentLoader(timeout=30).load(path)


def test_ordinary_docx_still_loads(tmp_path):
    path = docx_with(tmp_path, "ok.docx", {"customXml/item1.xml": b'<?xml version="1.0"?><a/>'})
    assert DefaultDocumentLoader(timeout=30).load(path) == "Hello from Word."
