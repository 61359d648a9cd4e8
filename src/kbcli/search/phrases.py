"""What a search box accepts beyond words: ``"quoted phrases"`` every hit must contain and
``-word`` exclusions no hit may contain.

:func:`parse_query` splits a query into the text the retrievers rank, the phrases and the
excluded words; :func:`passes` tells whether a hit's text honours them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kbcli.text.analysis import Analyzer

_PHRASE = re.compile(r'"([^"]*)"')
_SPACE = re.compile(r"\s+")


@dataclass
class ParsedQuery:
    """A query split into the ranked ``text``, required ``phrases`` and ``excluded`` words."""

    text: str
    phrases: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """True when nothing beyond ranking is asked for."""
        return not self.phrases and not self.excluded


def parse_query(query: str) -> ParsedQuery:
    """``'"reset link" password -sms'`` -> text ``reset link password``, phrases
    ``["reset link"]``, excluded ``["sms"]``.

    A word starting with ``-`` (and longer than the dash) is excluded; an unbalanced quote is
    taken literally. A query made only of exclusions keeps them as its text, so it still ranks
    something rather than nothing.
    """
    phrases = [" ".join(p.split()) for p in _PHRASE.findall(query) if p.strip()]
    rest = _PHRASE.sub(lambda m: f" {m.group(1)} ", query)
    words: list[str] = []
    excluded: list[str] = []
    for word in rest.split():
        if len(word) > 1 and word.startswith("-") and not word[1:].startswith("-"):
            excluded.append(word[1:])
        else:
            words.append(word)
    if not words and excluded and not phrases:
        return ParsedQuery(query.strip())
    return ParsedQuery(" ".join(words), phrases, excluded)


def flat(text: str) -> str:
    """``text`` with its whitespace collapsed and its case folded (how phrases compare)."""
    return _SPACE.sub(" ", text).casefold()


def passes(text: str, parsed: ParsedQuery, analyzer: Analyzer) -> bool:
    """True when ``text`` contains every phrase (case and whitespace ignored) and no excluded
    word (compared as analyzer terms, so ``-passwords`` also excludes ``password``)."""
    if parsed.phrases:
        flattened = flat(text)
        if not all(flat(p) in flattened for p in parsed.phrases):
            return False
    if parsed.excluded:
        banned = {t for word in parsed.excluded for t in analyzer.terms(word)}
        if banned and banned & set(analyzer.terms(text)):
            return False
        lowered = flat(text)
        if any(not analyzer.terms(word) and flat(word) in lowered for word in parsed.excluded):
            return False
    return True
