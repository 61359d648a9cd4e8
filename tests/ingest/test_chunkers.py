"""Chunkers: window semantics, structure, sizes, offsets and properties on random text."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbcli.errors import InvalidOptionError
from kbcli.ingest import (
    SimpleTextChunker,
    StructureAwareChunker,
    StructurePreservingNormalizer,
    make_chunker,
    make_normalizer,
)
from kbcli.protocols import TextChunkerProtocol
from kbcli.types import Section

NESTED = """Preamble line.

# A
Text under A.

## B
Text under B.

### C
Text under C.

## D
Text under D.

# E
Text under E.
"""


def spans(chunks: list[Section]) -> list[tuple[int, int]]:
    return [(c.metadata["char_start"], c.metadata["char_end"]) for c in chunks]


# --- SimpleTextChunker -------------------------------------------------------------------------


def test_simple_windows_are_exact() -> None:
    chunks = SimpleTextChunker(chunk_size=10, overlap=3).chunk("abcdefghijklmnopqrstuvwxyz")
    assert chunks == ["abcdefghij", "hijklmnopq", "opqrstuvwx", "vwxyz"]


def test_simple_overlap_semantics() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    chunker = SimpleTextChunker(chunk_size=97, overlap=13)
    chunks = chunker.chunk_sections([Section(text)])
    starts = [c.metadata["char_start"] for c in chunks]
    assert starts == list(range(0, 1000 - 13, 97 - 13))[: len(starts)]
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert nxt.metadata["char_start"] == prev.metadata["char_end"] - 13
        assert nxt.text[:13] == prev.text[-13:]
    assert chunks[-1].metadata["char_end"] == 1000
    assert all(len(c.text) == 97 for c in chunks[:-1])


def test_simple_without_overlap_tiles_the_text() -> None:
    text = "word " * 101
    assert "".join(SimpleTextChunker(chunk_size=50).chunk(text)) == text


def test_simple_drops_whitespace_only_windows() -> None:
    text = "abc" + " " * 20 + "\n" * 10 + "xyz"
    chunks = SimpleTextChunker(chunk_size=5, overlap=0).chunk(text)
    assert chunks == ["abc  ", "\n\n\nxy", "z"]  # the five blank windows between are dropped


def test_simple_reports_the_heading_it_starts_under() -> None:
    chunks = SimpleTextChunker(chunk_size=15).chunk_sections([Section(NESTED)])
    by_text = {c.text: c.metadata.get("heading") for c in chunks}
    assert by_text["Preamble line.\n"] is None
    assert "A > B > C" in by_text.values()


@pytest.mark.parametrize(
    ("size", "overlap", "message"),
    [
        (0, 0, "chunk_size must be at least 1"),
        (-5, 0, "chunk_size must be at least 1"),
        (10, 10, "smaller than chunk_size"),
        (10, 11, "smaller than chunk_size"),
        (10, -1, "0 or more"),
        (10.5, 0, "whole number"),
        (True, 0, "whole number"),
    ],
)
def test_chunkers_validate_sizes(size: object, overlap: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimpleTextChunker(chunk_size=size, overlap=overlap)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        StructureAwareChunker(chunk_size=size, chunk_overlap=overlap)  # type: ignore[arg-type]


# --- StructureAwareChunker: headings ----------------------------------------------------------


def test_nested_markdown_heading_paths_and_resets() -> None:
    chunks = StructureAwareChunker(chunk_size=200, chunk_overlap=20).chunk_sections(
        [Section(NESTED)]
    )
    assert [(c.text, c.metadata.get("heading")) for c in chunks] == [
        ("Preamble line.", None),
        ("# A\nText under A.", "A"),
        ("## B\nText under B.", "A > B"),
        ("### C\nText under C.", "A > B > C"),
        ("## D\nText under D.", "A > D"),
        ("# E\nText under E.", "E"),
    ]


def test_a_heading_with_nothing_under_it_opens_the_next_block() -> None:
    # A lone title chunk ("# Account help") matched questions by meaning and showed no answer.
    text = "# Account help\n\n## Reset password\n\nOpen Settings.\n\n## Email\n\nConfirm it."
    chunks = StructureAwareChunker(chunk_size=200, chunk_overlap=20).chunk_sections([Section(text)])
    assert [(c.text, c.metadata.get("heading")) for c in chunks] == [
        ("# Account help\n\n## Reset password\n\nOpen Settings.", "Account help > Reset password"),
        ("## Email\n\nConfirm it.", "Account help > Email"),
    ]
    for c in chunks:  # still exact slices with their offsets
        assert text[c.metadata["char_start"] : c.metadata["char_end"]] == c.text


def test_bare_headings_in_a_row_setext_and_a_last_one_alone() -> None:
    text = "Intro line.\n\nGuide\n=====\n\n# Part\n## Step\nDo it.\n\n# Appendix\n"
    chunks = StructureAwareChunker(chunk_size=200, chunk_overlap=0).chunk_sections([Section(text)])
    assert [(c.text, c.metadata.get("heading")) for c in chunks] == [
        ("Intro line.", None),
        ("Guide\n=====\n\n# Part\n## Step\nDo it.", "Part > Step"),
        ("# Appendix", "Appendix"),  # nothing follows: the heading stays, not lost
    ]


def test_a_section_that_is_only_its_heading_opens_the_next_one_on_its_page() -> None:
    sections = [
        Section("Billing", {"heading": "Billing", "page": 1}),
        Section("Invoices\nSent monthly.", {"heading": "Billing > Invoices", "page": 1}),
        Section("Refunds", {"heading": "Billing > Refunds", "page": 1}),
        Section("Within 30 days.", {"heading": "Billing > Refunds", "page": 2}),
    ]
    chunks = StructureAwareChunker(chunk_size=200, chunk_overlap=0).chunk_sections(sections)
    assert [(c.text, c.metadata["heading"], c.metadata["page"]) for c in chunks] == [
        ("Billing\n\nInvoices\nSent monthly.", "Billing > Invoices", 1),
        ("Refunds", "Billing > Refunds", 1),  # the next page is not joined to it
        ("Within 30 days.", "Billing > Refunds", 2),
    ]
    joined = "\n\n".join(s.text for s in sections)
    for c in chunks:  # offsets still into the whole document
        assert joined[c.metadata["char_start"] : c.metadata["char_end"]] == c.text


def test_setext_headings_and_code_fences() -> None:
    text = (
        "Title\n=====\n\nIntro.\n\nPart\n----\n\n```bash\n# not a heading\n```\n\n"
        "~~~\n## nor this\n~~~\n\nEnd."
    )
    chunks = StructureAwareChunker(chunk_size=500, chunk_overlap=0).chunk_sections([Section(text)])
    assert [c.metadata.get("heading") for c in chunks] == ["Title", "Title > Part"]
    assert "# not a heading" in chunks[1].text and "## nor this" in chunks[1].text


def test_thematic_break_after_a_blank_line_is_not_a_heading() -> None:
    text = "Para one.\n\n---\n\nPara two.\n***\n"
    chunks = StructureAwareChunker(chunk_size=500, chunk_overlap=0).chunk_sections([Section(text)])
    assert [c.metadata.get("heading") for c in chunks] == [None]


def test_front_matter_is_not_a_heading() -> None:
    text = "---\ntitle: x\n---\n\nBody text."
    chunks = StructureAwareChunker(chunk_size=500, chunk_overlap=0).chunk_sections([Section(text)])
    assert [c.metadata.get("heading") for c in chunks] == [None]


def test_chunks_never_cross_a_heading() -> None:
    body = " ".join(f"Sentence number {i} is here." for i in range(30))
    text = f"# One\n{body}\n\n## Two\n{body}\n\n# Three\n{body}"
    chunks = StructureAwareChunker(chunk_size=120, chunk_overlap=40).chunk_sections([Section(text)])
    for chunk in chunks:
        assert len(re.findall(r"^#+ ", chunk.text, re.MULTILINE)) <= 1
        heads = re.findall(r"^#+ (\w+)", chunk.text, re.MULTILINE)
        if heads:
            assert chunk.text.startswith("#")
            assert chunk.metadata["heading"].endswith(heads[0])
    assert {c.metadata["heading"] for c in chunks} == {"One", "One > Two", "Three"}


@pytest.mark.parametrize("heading", ["## Heading words here", "Heading words here\n------"])
def test_overlap_never_reaches_into_the_heading_line(heading: str) -> None:
    text = f"{heading}\nShort one. Another short sentence follows here. And a third one."
    chunks = StructureAwareChunker(chunk_size=48, chunk_overlap=40).chunk(text)
    assert len(chunks) > 1
    assert chunks[0].startswith(heading)
    assert not any("Heading" in c or "---" in c for c in chunks[1:]), chunks


def test_crlf_paragraphs_split_even_without_normalising() -> None:
    text = "First paragraph here.\r\n\r\nSecond paragraph here."
    chunks = StructureAwareChunker(chunk_size=30, chunk_overlap=0).chunk(text)
    assert chunks == ["First paragraph here.", "Second paragraph here."]


def test_section_heading_from_the_loader_wins_over_detection() -> None:
    sections = [Section("# looks like markdown\nbody", {"heading": "Real > Path", "page": 4})]
    chunks = StructureAwareChunker(chunk_size=100, chunk_overlap=0).chunk_sections(sections)
    assert chunks[0].metadata == {
        "heading": "Real > Path",
        "page": 4,
        "char_start": 0,
        "char_end": len(sections[0].text),
    }


# --- StructureAwareChunker: sentences, sizes, overlap ------------------------------------------

CHINESE_SENTENCES = [
    "知识库支持中文文档的加载与切分。",
    "编码必须正确识别，否则会出现乱码！",
    "句子不应该被切断吗？",
    "分号也是一个句子边界；",
    "他说：“这是引号里的句子。”",
    "最后一句话在这里。",
]


@pytest.mark.parametrize("size", [20, 25, 33, 40, 64])
def test_no_chinese_sentence_is_cut_when_it_fits(size: int) -> None:
    text = "".join(CHINESE_SENTENCES * 3)
    assert max(len(s) for s in CHINESE_SENTENCES) <= size
    chunks = StructureAwareChunker(chunk_size=size, chunk_overlap=0).chunk(text)
    assert "".join(chunks) == text
    for chunk in chunks:
        assert len(chunk) <= size
        assert chunk.endswith(("。", "！", "？", "；", "。”")), chunk
    for sentence in CHINESE_SENTENCES:
        assert any(sentence in chunk for chunk in chunks)


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    text = 'He said "Stop." Then he left (quickly.) And that was all! Right?'
    chunks = StructureAwareChunker(chunk_size=20, chunk_overlap=0).chunk(text)
    assert chunks == [
        'He said "Stop."',
        "Then he left",
        "(quickly.)",
        "And that was all!",
        "Right?",
    ]


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    paragraphs = ["First paragraph. It has two sentences.", "Second one.", "Third paragraph here."]
    text = "\n\n".join(paragraphs)
    chunks = StructureAwareChunker(chunk_size=60, chunk_overlap=0).chunk(text)
    assert chunks == [paragraphs[0] + "\n\n" + paragraphs[1], paragraphs[2]]


def test_overlap_is_whole_trailing_sentences_within_the_budget() -> None:
    sentences = [f"Sentence {i:02d} is here." for i in range(20)]  # 21 characters each
    text = " ".join(sentences)
    chunks = StructureAwareChunker(chunk_size=70, chunk_overlap=30).chunk_sections([Section(text)])
    assert len(chunks) > 3
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        start, prev_end = nxt.metadata["char_start"], prev.metadata["char_end"]
        assert prev.metadata["char_start"] < start < prev_end
        assert prev_end - start <= 30
        assert nxt.text.startswith("Sentence ")  # a whole sentence, not a fragment
        assert text[start:prev_end] == sentences[int(nxt.text[9:11])]


def test_overlap_falls_back_to_a_word_start_when_no_sentence_fits() -> None:
    text = " ".join(f"Longer sentence number {i} ends here." for i in range(10))
    chunks = StructureAwareChunker(chunk_size=80, chunk_overlap=12).chunk_sections([Section(text)])
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        start, prev_end = nxt.metadata["char_start"], prev.metadata["char_end"]
        assert 0 < prev_end - start <= 12
        assert text[start - 1] == " "


def test_long_sentence_is_cut_at_whitespace() -> None:
    words = [f"w{i}" for i in range(300)]
    text = " ".join(words)
    chunks = StructureAwareChunker(chunk_size=50, chunk_overlap=0).chunk(text)
    assert all(len(c) <= 50 for c in chunks)
    assert " ".join(chunks).split() == words  # no word split across chunks


def test_unbreakable_text_is_cut_hard() -> None:
    chunks = StructureAwareChunker(chunk_size=100, chunk_overlap=0).chunk("x" * 1000)
    assert chunks == ["x" * 100] * 10


def test_chunks_are_exact_slices_across_sections() -> None:
    sections = [Section(NESTED, {"page": 1}), Section("Second page. More text!", {"page": 2})]
    joined = "\n\n".join(s.text for s in sections)
    for chunker in (StructureAwareChunker(30, 10), SimpleTextChunker(30, 10)):
        chunks = chunker.chunk_sections(sections)
        for chunk in chunks:
            start, end = chunk.metadata["char_start"], chunk.metadata["char_end"]
            assert joined[start:end] == chunk.text
        assert chunks[-1].metadata["page"] == 2
        assert chunks[-1].text.endswith("More text!")


def test_empty_and_blank_text_give_no_chunks() -> None:
    for chunker in (StructureAwareChunker(), SimpleTextChunker()):
        assert chunker.chunk("") == []
        assert chunker.chunk(" \n\n\t ") == []
        assert chunker.chunk_sections([]) == []


# --- factory -----------------------------------------------------------------------------------


def test_chunkers_satisfy_the_protocol() -> None:
    assert isinstance(make_chunker("structure"), TextChunkerProtocol)
    assert isinstance(make_chunker("simple"), TextChunkerProtocol)


def test_make_chunker_by_name() -> None:
    default = make_chunker()
    assert isinstance(default, StructureAwareChunker)
    assert (default.chunk_size, default.chunk_overlap) == (500, 50)
    simple = make_chunker(" Simple ", chunk_size=100, chunk_overlap=10)
    assert isinstance(simple, SimpleTextChunker)
    assert (simple.chunk_size, simple.overlap) == (100, 10)
    assert isinstance(make_normalizer("simple"), StructurePreservingNormalizer)


def test_unknown_chunker_lists_the_choices() -> None:
    with pytest.raises(InvalidOptionError, match="choose one of structure, simple"):
        make_chunker("semantic")
    with pytest.raises(ValueError, match="choose one of structure, simple"):
        make_normalizer("nope")


# --- properties --------------------------------------------------------------------------------

TOKENS = list("ab c.!?。；”)#\n\t-=中文") + [
    "word",
    "\n\n",
    "\n# H\n",
    "\n## I\n",
    "\n```\n",
    "\n---\n",
]
text_strategy = st.lists(st.sampled_from(TOKENS), max_size=150).map("".join)


def check_chunks(text: str, chunks: list[Section], size: int) -> None:
    covered = bytearray(len(text))
    for chunk in chunks:
        start, end = chunk.metadata["char_start"], chunk.metadata["char_end"]
        assert chunk.text and not chunk.text.isspace()
        assert text[start:end] == chunk.text
        assert len(chunk.text) <= size
        covered[start:end] = b"\x01" * (end - start)
    lost = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not lost, f"characters not in any chunk at {lost[:5]}"


@settings(max_examples=300, deadline=2000)
@given(text=text_strategy, size=st.integers(1, 60), data=st.data())
def test_structure_chunker_properties(text: str, size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunker = StructureAwareChunker(chunk_size=size, chunk_overlap=overlap)
    check_chunks(text, chunker.chunk_sections([Section(text)]), size)


@settings(max_examples=300, deadline=2000)
@given(text=text_strategy, size=st.integers(1, 60), data=st.data())
def test_simple_chunker_properties(text: str, size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunker = SimpleTextChunker(chunk_size=size, overlap=overlap)
    check_chunks(text, chunker.chunk_sections([Section(text)]), size)


@settings(max_examples=200, deadline=2000)
@given(text=text_strategy, size=st.integers(2, 60))
def test_structure_chunks_without_overlap_partition_the_text(text: str, size: int) -> None:
    chunks = StructureAwareChunker(chunk_size=size, chunk_overlap=0).chunk(text)
    assert "".join("".join(chunks).split()) == "".join(text.split())


@pytest.mark.slow
def test_chunking_time_is_linear() -> None:
    unit = "A sentence of text. " * 20 + "\n\n"
    chunker = StructureAwareChunker(chunk_size=500, chunk_overlap=50)

    def seconds(text: str) -> float:
        started = time.perf_counter()
        chunker.chunk(text)
        return time.perf_counter() - started

    small = min(seconds(unit * 2_000) for _ in range(3))
    large = min(seconds(unit * 16_000) for _ in range(3))
    assert large < small * 8 * 2.5, f"8x the text took {large / small:.1f}x the time"


@settings(max_examples=150, deadline=2000)
@given(
    texts=st.lists(text_strategy, max_size=4),
    size=st.integers(1, 40),
    simple=st.booleans(),
)
def test_offsets_index_the_joined_sections(texts: list[str], size: int, simple: bool) -> None:
    sections = [Section(t, {"n": i}) for i, t in enumerate(texts)]
    chunker = (
        SimpleTextChunker(size, size // 3) if simple else StructureAwareChunker(size, size // 3)
    )
    chunks = chunker.chunk_sections(sections)
    joined = "\n\n".join(texts)
    check_chunks(joined, chunks, size)
    bounds, pos = [], 0
    for text in texts:
        bounds.append((pos, pos + len(text)))
        pos += len(text) + 2
    for chunk in chunks:
        lo, hi = bounds[chunk.metadata["n"]]
        assert lo <= chunk.metadata["char_start"] < chunk.metadata["char_end"] <= hi
