"""Normalizers: whitespace flattening (per chunk) and structure-preserving cleaning."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kbcli.ingest import StructurePreservingNormalizer, WhitespaceNormalizer
from kbcli.protocols import TextNormalizerProtocol


def test_whitespace_normalizer_collapses_every_run() -> None:
    text = "  Hello \n\n  world\t\tand\r\nmore\u3000text\u00a0end  "
    assert WhitespaceNormalizer().normalize(text) == "Hello world and more text end"


def test_whitespace_normalizer_on_blank_text() -> None:
    assert WhitespaceNormalizer().normalize("") == ""
    assert WhitespaceNormalizer().normalize(" \n\t ") == ""


def test_structure_normalizer_keeps_lines_and_headings() -> None:
    text = "# Title  \r\n\r\n\r\n\r\nFirst line\r\nsecond line\t\n\n\n## Sub\rBody"
    assert StructurePreservingNormalizer().normalize(text) == (
        "# Title\n\nFirst line\nsecond line\n\n## Sub\nBody"
    )


def test_structure_normalizer_cleans_characters() -> None:
    text = "Cafe\u0301\x00 bell\x07 zero\u200bwidth\ufeff page\x0cbreak\u2028next"
    assert StructurePreservingNormalizer().normalize(text) == (
        "Café bell zerowidth page\nbreak\nnext"
    )


def test_structure_normalizer_strips_blank_edges_but_not_indentation() -> None:
    text = "\n\n\n    indented code\n  \n\n"
    assert StructurePreservingNormalizer().normalize(text) == "    indented code"


def test_structure_normalizer_returns_clean_text_unchanged() -> None:
    text = "Clean text.\n\nSecond paragraph.\n" * 1000
    text = text.rstrip("\n")
    assert StructurePreservingNormalizer().normalize(text) is text  # no copy for clean input


def test_normalizers_satisfy_the_protocol() -> None:
    assert isinstance(WhitespaceNormalizer(), TextNormalizerProtocol)
    assert isinstance(StructurePreservingNormalizer(), TextNormalizerProtocol)


@settings(max_examples=300)
@given(
    st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0c\x00\u00a0\u3000e\u0301é#")), max_size=200)
)
def test_structure_normalizer_is_idempotent_and_bounded(text: str) -> None:
    normalizer = StructurePreservingNormalizer()
    once = normalizer.normalize(text)
    assert normalizer.normalize(once) == once
    assert "\r" not in once and "\x00" not in once and "\n\n\n" not in once
    assert all(line == line.rstrip(" \t\u00a0\u3000") for line in once.split("\n"))
