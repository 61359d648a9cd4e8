"""A changed file is read once by a sync (hashed while read, its bytes handed to the loader),
and never indexed torn: a file that changed while it was read is read again.

Reads are counted with an audit hook (``sys.addaudithook``: every ``open``/``os.open`` of the
process raises an ``open`` event), so nothing in kbcli is replaced to count them.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

import kbcli.ingest.files as reading
import kbcli.ingest.sync as sync_module
from hostile import make_docx, make_pdf
from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest import read_text
from kbcli.ingest.sync import sync

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, os.PathLike)):
        _opened.append(os.path.realpath(os.fspath(args[0])))


sys.addaudithook(_audit)  # hooks cannot be removed: it records only inside opens_of()


class opens_of:
    """Counts the opens of ``path`` by this process inside the ``with`` block."""

    def __init__(self, path: Path):
        self.path = os.path.realpath(path)
        self.count = 0

    def __enter__(self) -> opens_of:
        global _opened
        _opened = []
        return self

    def __exit__(self, *exc: object) -> None:
        global _opened
        self.count = sum(1 for p in _opened or [] if p == self.path)
        _opened = None


def open_kb(tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())


def settle(monkeypatch) -> None:
    """Make files written before the call count as settled (their last change is older than
    the window), without waiting the real 3 s."""
    monkeypatch.setattr(reading, "SETTLED_NS", 100_000_000)
    time.sleep(0.25)


def note(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def test_a_settled_text_file_is_read_once(tmp_path, monkeypatch):
    kb = open_kb(tmp_path)
    docs = tmp_path / "docs"
    f = note(docs / "a.md", "# A\r\n\r\n\r\nfirst line\r\nsecond line about lanterns\r\n")
    settle(monkeypatch)
    with opens_of(f) as opened:
        report = sync(kb, [docs])
    assert report.added == 1
    assert opened.count == 1  # main: 6 (hash, sample, decode, hash, line map's sample + decode)
    [hit] = kb.search("lanterns", k=1, mode="keyword")
    assert hit.document.metadata["line"] == 1 and hit.document.metadata["line_end"] == 5
    record = kb.store.file_records()[str(f.resolve())]
    assert record.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()


def test_a_file_changed_just_now_is_hashed_once_more(tmp_path):
    kb = open_kb(tmp_path)
    f = note(tmp_path / "docs" / "a.md", "# A\n\njust written\n")
    with opens_of(f) as opened:
        sync(kb, [tmp_path / "docs"])
    assert opened.count == 2  # its change time is too recent to trust one read


def test_ingest_file_reads_a_settled_file_once(tmp_path, monkeypatch):
    kb = open_kb(tmp_path)
    f = note(tmp_path / "a.txt", "plain text about harbours\n")
    settle(monkeypatch)
    with opens_of(f) as opened:
        kb.ingest_file(f)
    assert opened.count == 1
    assert kb.search("harbours", k=1, mode="keyword")


def test_read_text_reads_a_file_once(tmp_path):
    f = note(tmp_path / "a.txt", "héllo wörld\n" * 1000)
    with opens_of(f) as opened:
        assert read_text(f).startswith("héllo")
    assert opened.count == 1  # main: 2 (a sample for the encoding, then the whole file)


def _pdf(path: Path, text: str) -> Path:
    path.write_bytes(make_pdf([text]))
    return path


def _docx(path: Path, text: str) -> Path:
    return make_docx(path, [("p", text)])


@pytest.mark.parametrize("kind,make", [("pdf", _pdf), ("docx", _docx)])
def test_a_parsed_file_is_hashed_once_and_checked_by_the_parser(tmp_path, kind, make):
    kb = open_kb(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    f = make(docs / f"a.{kind}", "the parser reads quinces")
    with opens_of(f) as opened:
        report = sync(kb, [docs])
    assert report.added == 1, report.failed
    # this process hashes it once (main: twice, before and after the parse); the parser
    # process reads it to parse and checks the hash (DOCX: plus the zip directory check here)
    assert opened.count == (1 if kind == "pdf" else 2)
    assert kb.search("quinces", k=1, mode="keyword")


@pytest.mark.parametrize("kind,make", [("pdf", _pdf), ("docx", _docx)])
def test_a_file_replaced_before_the_parser_reads_it_is_read_again(
    tmp_path, monkeypatch, kind, make
):
    kb = open_kb(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    f = make(docs / f"a.{kind}", "old version with apples")
    real = kb.ingestor.load_content
    calls = []

    def load(path, content):
        calls.append(content.sha256)
        if len(calls) == 1:  # an editor saves between the hash and the parse
            make(f, "new version with pears")
        return real(path, content)

    monkeypatch.setattr(kb.ingestor, "load_content", load)
    monkeypatch.setattr(sync_module, "TORN_READ_RETRY_DELAY", 0)
    report = sync(kb, [docs])
    assert report.added == 1 and len(calls) == 2 and calls[0] != calls[1]
    texts = " ".join(d.text for d in kb.store.list_all())
    assert "pears" in texts and "apples" not in texts
    record = kb.store.file_records()[str(f.resolve())]
    assert record.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()


def test_a_text_file_written_during_its_one_read_is_not_trusted(tmp_path, monkeypatch):
    """The fstat after the read differs from the one before: not settled, hashed again."""
    f = note(tmp_path / "a.md", "# A\n\nbefore\n")
    settle(monkeypatch)
    real = reading.read_blocks

    def blocks(fh, path, limit, **kw):
        yield from real(fh, path, limit, **kw)
        with open(f, "ab") as out:  # a writer appends as the read ends
            out.write(b"appended\n")

    monkeypatch.setattr(reading, "read_blocks", blocks)
    content = reading.read_content(f, None)
    assert not content.settled
    monkeypatch.setattr(reading, "read_blocks", real)
    assert reading.read_content(f, None).settled is False  # its change is recent now
