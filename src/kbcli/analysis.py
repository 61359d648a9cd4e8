"""Text analysis for keyword search: one analyzer, used at index time and at query time.

The index records the analyzer's ``signature``; a store opened with a different analyzer refuses
to mix the two (terms would not match).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANALYZER_VERSION = 1
MAX_QUERY_TERMS = 64

_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]+")

ENGLISH_STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with""".split()
)


@dataclass(frozen=True)
class Analyzer:
    """Splits text into index terms.

    ``language``: ``auto`` (English rules plus CJK handling), ``en``, ``zh`` or ``none`` (plain
    lower-cased ``\\w+`` words). ``stopwords`` drops very common English words.
    """

    language: str = "auto"
    stem: bool = True
    stopwords: bool = True

    @property
    def signature(self) -> str:
        """A string that changes whenever the terms this analyzer produces would change."""
        return (
            f"v{ANALYZER_VERSION};lang={self.language};"
            f"stem={int(self.stem)};stop={int(self.stopwords)}"
        )

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept (term frequency counts them)."""
        out: list[str] = []
        plain = self.language == "none"
        drop = ENGLISH_STOPWORDS if self.stopwords and not plain else frozenset()
        for word in _WORD.findall(text.lower()):
            if not plain and _CJK.search(word):
                out.extend(_split_mixed(word))
            elif word not in drop:
                out.append(word)
        return out

    def query_terms(self, text: str) -> list[str]:
        """Distinct terms of a query, first occurrence order, at most ``MAX_QUERY_TERMS``."""
        seen: dict[str, None] = {}
        for term in self.terms(text):
            seen.setdefault(term, None)
            if len(seen) >= MAX_QUERY_TERMS:
                break
        return list(seen)


def _split_mixed(word: str) -> list[str]:
    """Split a word holding CJK runs: other runs stay whole, CJK runs become chars + bigrams."""
    out: list[str] = []
    pos = 0
    for m in _CJK.finditer(word):
        if m.start() > pos:
            out.append(word[pos : m.start()])
        run = m.group()
        out.extend(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
        pos = m.end()
    if pos < len(word):
        out.append(word[pos:])
    return [t for t in out if t.strip("_")]


def reference_terms(text: str) -> list[str]:
    """The reference tokenizer: lower-cased ``\\w+`` runs."""
    return _WORD.findall(text.lower())
