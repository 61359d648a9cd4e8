"""Text analysis for keyword search: one analyzer, used at index time and at query time.

Steps, in order: NFKC normalisation (full-width letters and digits become ASCII) and
lower-casing; splitting into tokens (runs of word characters, joined by ``.`` or ``-`` inside
identifiers such as ``v2.3.1``); then per token:

- CJK runs (Han, kana) become terms by the CJK scheme (see :data:`CJK_SCHEMES`); the default,
  characters plus bigrams, needs no dictionary and works for Simplified and Traditional alike;
- an identifier (``ERR_5001``, ``v2.3.1``, ``password_reset_timeout``) is kept whole, as
  written, and its parts are added as ordinary words, so both ``password_reset_timeout`` and
  ``password reset`` find it; hyphenated words only give their parts;
- an ordinary word is dropped when it is an English stopword and stemmed (Snowball English,
  PyStemmer) otherwise.

The index records the analyzer's ``signature``; a store opened with a different analyzer refuses
to mix the two (terms would not match). Bump :data:`ANALYZER_VERSION` whenever the output of
:meth:`Analyzer.terms` changes for some input.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from kbcli.errors import InvalidOptionError, require

ANALYZER_VERSION = 2
# Distinct query terms looked up (and scored, see kbcli.text.bm25.MAX_SCORED_TERMS) at most.
MAX_QUERY_TERMS = 256
LANGUAGES = ("auto", "en", "zh", "none")
CJK_SCHEMES = ("chars+bigrams", "bigrams", "chars", "jieba")
DEFAULT_CJK = "chars+bigrams"

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"\w+(?:['’]\w+)*(?:[.\-]\w+(?:['’]\w+)*)*")
_PART = re.compile(r"[^\W_]+")
_APOSTROPHE = re.compile(r"['’]")
_CJK_CLASS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs (ext. A, unified, compatibility)
    "\U00020000-\U0002ebef\U00030000-\U0003134f"  # ext. B-F, G
)
_CJK = re.compile(f"[{_CJK_CLASS}]+")

# Lucene's English stop set (also bm25s's "en" list).
ENGLISH_STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with""".split()
)


class _Stemmer(Protocol):
    """The one method used of PyStemmer's (untyped) ``Stemmer.Stemmer``."""

    def stemWord(self, word: str) -> str: ...


class _Jieba(Protocol):
    """What kbcli uses of the (untyped) ``jieba`` module."""

    def setLogLevel(self, log_level: int) -> None: ...

    def initialize(self) -> None: ...

    def cut_for_search(self, sentence: str) -> Iterator[str]: ...


# Maps one lower-cased alphanumeric word to its term ('' to drop it).
WordFunction = Callable[[str], str]


@lru_cache(maxsize=1)
def _stemmer() -> _Stemmer:
    import Stemmer  # PyStemmer

    stemmer: _Stemmer = Stemmer.Stemmer("english")
    return stemmer


@lru_cache(maxsize=1)
def _jieba() -> _Jieba:
    jieba: _Jieba = require("jieba", extra="zh", feature="The jieba Chinese tokenizer")
    import logging

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()  # loads the dictionary once (about 1 s)
    return jieba


@lru_cache(maxsize=1)
def stemmer_available() -> bool:
    """True when PyStemmer can be imported (stemming is skipped without it, and the signature
    says so, so an index built with stemming is never queried without)."""
    try:
        _stemmer()
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Analyzer:
    """Splits text into index terms (the same way for documents and queries).

    ``language``: ``auto``, ``en`` and ``zh`` all apply English rules to words in Latin script
    and split CJK runs into characters plus bigrams: measured best for Simplified and
    Traditional Chinese and harmless for English (docs/quality.md), so one index serves mixed
    text and the three names build the same index. ``none`` gives plain lower-cased ``\\w+``
    runs (no stemming, stopwords or CJK splitting: the reference tokenizer). ``stem`` applies the
    Snowball English stemmer (PyStemmer); ``stopwords`` drops Lucene's English stopwords.
    ``cjk`` overrides the CJK scheme, one of :data:`CJK_SCHEMES` (``jieba`` needs jieba and
    loads its dictionary, about 1 s, on first use).
    """

    language: str = "auto"
    stem: bool = True
    stopwords: bool = True
    cjk: str | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise InvalidOptionError(
                f"Unknown analyzer language {self.language!r}: choose one of {', '.join(LANGUAGES)}"
            )
        if self.cjk is not None and self.cjk not in CJK_SCHEMES:
            raise InvalidOptionError(
                f"Unknown CJK scheme {self.cjk!r}: choose one of {', '.join(CJK_SCHEMES)}"
            )

    @property
    def cjk_scheme(self) -> str:
        """The CJK scheme in effect: ``cjk`` if set, else :data:`DEFAULT_CJK`."""
        return self.cjk if self.cjk is not None else DEFAULT_CJK

    @property
    def signature(self) -> str:
        """A string that changes whenever the terms this analyzer produces would change
        (settings that give the same terms give the same signature)."""
        if self.language == "none":
            return f"v{ANALYZER_VERSION};plain"
        stem = int(self.stem and stemmer_available())
        return f"v{ANALYZER_VERSION};cjk={self.cjk_scheme};stem={stem};stop={int(self.stopwords)}"

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept (term frequency counts them)."""
        if self.language == "none":
            return reference_terms(text)
        text = unicodedata.normalize("NFKC", text).lower()
        stem = self.stem and stemmer_available()
        word = self._word_function(stem, self.stopwords)
        scheme = self.cjk_scheme
        out: list[str] = []
        append, extend = out.append, out.extend
        cjk = _CJK.search(text) is not None  # without CJK in the text, no token needs the test
        for token in _TOKEN.findall(text):
            if cjk and _CJK.search(token):
                extend(_mixed_terms(token, scheme, word))
            elif token.isalnum():
                term = word(token)
                if term:
                    append(term)
            else:
                extend(_compound_terms(token, word))
        return out

    def query_counts(self, text: str) -> Counter[str]:
        """Query terms with their counts, at most :data:`MAX_QUERY_TERMS` distinct ones
        (the first seen): a pasted paragraph stays a fast query."""
        counts: Counter[str] = Counter()
        for term in self.terms(text):
            if term in counts or len(counts) < MAX_QUERY_TERMS:
                counts[term] += 1
        return counts

    def query_terms(self, text: str) -> list[str]:
        """Distinct terms of a query, first occurrence order, at most ``MAX_QUERY_TERMS``."""
        return list(self.query_counts(text))

    @staticmethod
    def _word_function(stem: bool, stopwords: bool) -> WordFunction:
        return _WORD_FUNCTIONS[(stem, stopwords)]


def _make_word(stem: bool, stopwords: bool) -> WordFunction:
    """A function mapping one lower-cased alphanumeric word to its term ('' to drop it)."""
    drop = ENGLISH_STOPWORDS if stopwords else frozenset()

    if not stem:
        return lambda w: "" if w in drop else w

    @lru_cache(maxsize=200_000)
    def stemmed(w: str) -> str:
        if w in drop:
            return ""
        return _stemmer().stemWord(w) if not w.isdigit() else w

    return stemmed


_WORD_FUNCTIONS = {(s, t): _make_word(s, t) for s in (False, True) for t in (False, True)}


def _compound_terms(token: str, word: WordFunction) -> list[str]:
    """Terms of a token that is not one plain word: identifiers, dotted versions, hyphenations,
    apostrophes. Possessive ``'s`` is dropped and other apostrophes removed (``don't`` ->
    ``dont``); otherwise the token is kept whole as written, plus its parts as words."""
    token = token.replace("’", "'")
    if "'" in token:
        token = re.sub(r"'s\b", "", token)
        token = _APOSTROPHE.sub("", token)
        if token.isalnum():
            term = word(token)
            return [term] if term else []
    parts = _PART.findall(token)
    # Hyphenated words are prose (state-of-the-art, IL-6): only their parts count; measured
    # better than keeping the whole word too. Identifiers with "_" or "." are kept whole.
    whole = parts and parts != [token] and ("_" in token or "." in token)
    out = [token] if whole else []
    for part in parts:
        term = word(part)
        if term:
            out.append(term)
    return out


def _mixed_terms(token: str, scheme: str, word: WordFunction) -> list[str]:
    """Split a token holding CJK runs: CJK runs by ``scheme``, the rest as ordinary tokens."""
    out: list[str] = []
    pos = 0
    for m in _CJK.finditer(token):
        if m.start() > pos:
            out.extend(_rest_terms(token[pos : m.start()], word))
        out.extend(cjk_terms(m.group(), scheme))
        pos = m.end()
    if pos < len(token):
        out.extend(_rest_terms(token[pos:], word))
    return out


def _rest_terms(piece: str, word: WordFunction) -> list[str]:
    out: list[str] = []
    for token in _TOKEN.findall(piece):
        if token.isalnum():
            term = word(token)
            if term:
                out.append(term)
        else:
            out.extend(_compound_terms(token, word))
    return out


def cjk_terms(run: str, scheme: str = DEFAULT_CJK) -> list[str]:
    """Terms of one run of CJK characters under ``scheme`` (see :data:`CJK_SCHEMES`).

    ``bigrams``: overlapping character pairs (a single character stays itself);
    ``chars+bigrams``: every character and every pair; ``chars``: every character;
    ``jieba``: jieba's search-mode words (words plus their dictionary sub-words).
    """
    if scheme == "chars":
        return list(run)
    if scheme == "jieba":
        return [w for w in _jieba().cut_for_search(run) if w.strip()]
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    if scheme == "bigrams":
        return bigrams or [run]
    return [*run, *bigrams]


def reference_terms(text: str) -> list[str]:
    """The reference tokenizer: lower-cased ``\\w+`` runs."""
    return _WORD.findall(text.lower())


def has_cjk(text: str) -> bool:
    """True when ``text`` contains Chinese characters or Japanese kana."""
    return _CJK.search(text) is not None


class _AnalysisSettings(Protocol):
    """``analysis`` in the configuration (:class:`~kbcli.config.schema.AnalysisConfig`)."""

    @property
    def language(self) -> str: ...
    @property
    def stem(self) -> bool: ...
    @property
    def stopwords(self) -> bool: ...


class _Configured(Protocol):
    @property
    def analysis(self) -> _AnalysisSettings: ...


def analyzer_from_config(config: _Configured) -> Analyzer:
    """The analyzer described by ``config.analysis`` (a :class:`~kbcli.config.lookup.Config`)."""
    a = config.analysis
    return Analyzer(language=a.language, stem=a.stem, stopwords=a.stopwords)


# --- the fields of a chunk -------------------------------------------------------------------

TITLE_KEY = "title"
_HEADING_SEPARATOR = " > "  # as kbcli.ingest.markdown.HEADING_SEPARATOR (not imported: start-up)
_STEM_SPLIT = re.compile(r"[-_.\s]+")


@dataclass(frozen=True)
class FieldWeights:
    """Integer weights of a chunk's fields in its keyword index entry (simplified BM25F: a
    term's frequency is ``title * tf_title + heading * tf_heading + body * tf_body`` and the
    chunk's length is weighted the same way). Integers keep every executor's postings as they
    are (tf INTEGER)."""

    title: int = 1
    heading: int = 1
    body: int = 1

    def __str__(self) -> str:
        return f"title{self.title}+heading{self.heading}+body{self.body}"


# Chosen on the usable splits and the man-page collection (docs/quality.md).
FIELD_WEIGHTS = FieldWeights(title=2, heading=1, body=1)
# What the keyword index is built from (part of its signature): a change re-tokenises it.
KEYWORD_FIELDS = str(FIELD_WEIGHTS)


def keyword_signature(analyzer: Analyzer) -> str:
    """What a keyword index's terms depend on: the analyzer and the indexed fields (recorded
    with every index; a difference means re-tokenising it)."""
    return f"{analyzer.signature};fields={KEYWORD_FIELDS}"


def document_title(headings: Iterable[str | None], source: str | None = None) -> str | None:
    """A document's title: its first heading (``headings`` are its chunks' heading paths, in
    order; the first path's first part is the first heading), else the file name of
    ``source`` without its extension, ``-``, ``_`` and ``.`` read as spaces."""
    for path in headings:
        if isinstance(path, str) and path.strip():
            return path.split(_HEADING_SEPARATOR)[0].strip()
    if source:
        name = source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
        words = " ".join(w for w in _STEM_SPLIT.split(stem) if w)
        return words or None
    return None


def chunk_title(chunks: Iterable[Mapping[str, Any]]) -> str | None:
    """The title of a document stored without one, from its chunks' metadata: as at ingest
    (:func:`document_title` of the heading paths in ``chunk_index`` order and the ``source``)."""
    ordered = sorted(chunks, key=lambda m: _index_of(m.get("chunk_index")))
    source = next((m["source"] for m in ordered if isinstance(m.get("source"), str)), None)
    return document_title((m.get("heading") for m in ordered), source)


def _index_of(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def titles_to_add(rows: Iterable[tuple[Any, Mapping[str, Any]]]) -> dict[Any, str]:
    """For ``(source key, metadata)`` rows of stored chunks: the title each source's chunks
    get when none of them has one (chunks indexed before titles were recorded)."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for key, meta in rows:
        groups.setdefault(key, []).append(meta)
    out = {}
    for key, metas in groups.items():
        if key is not None and not any(TITLE_KEY in m for m in metas):
            title = chunk_title(metas)
            if title:
                out[key] = title
    return out


def has_title_field(signature: str) -> bool:
    """True when a keyword index signature includes the title field (kbcli records titles
    since that field exists; an older index gets them when it is re-tokenised)."""
    return "fields=title" in signature


def chunk_fields(text: str, metadata: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(title, heading, body) of a chunk: its ``title`` metadata (set at ingest: the document's
    first heading, else its file name), its heading path without a leading part equal to the
    title (not counted twice), and its text."""
    metadata = metadata or {}
    title = metadata.get(TITLE_KEY)
    title = title.strip() if isinstance(title, str) else ""
    heading = metadata.get("heading")
    heading = heading if isinstance(heading, str) else ""
    if title and heading:
        first, _, rest = heading.partition(_HEADING_SEPARATOR)
        if first.strip() == title:
            heading = rest
    return title, heading, text


def keyword_counts(
    analyzer: Analyzer,
    text: str,
    metadata: Mapping[str, Any] | None,
    weights: FieldWeights = FIELD_WEIGHTS,
) -> Counter[str]:
    """The term frequencies a keyword index stores for a chunk: its fields' terms, weighted
    (their sum is the chunk's BM25 length)."""
    title, heading, body = chunk_fields(text, metadata)
    counts: Counter[str] = Counter()
    for field_text, weight in ((title, weights.title), (heading, weights.heading)):
        if field_text and weight:
            for term in analyzer.terms(field_text):
                counts[term] += weight
    if weights.body == 1:
        counts.update(analyzer.terms(body))  # the same counts and order, counted in C
    elif weights.body:
        for term in analyzer.terms(body):
            counts[term] += weights.body
    return counts
