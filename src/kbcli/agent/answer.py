"""``kb ask``: an answer written from the knowledge base's evidence, citing it by number, or an
honest refusal ("refusing beats making things up").

:func:`ask` runs the search pipeline (recall -> fuse -> rerank when configured), then:

1. **Threshold.** With a reranker and ``min_relevance``, the reranker's judgement decides (the
   pipeline's refusal). Otherwise each hit must reach ``min_coverage``: the share of the
   question's terms, weighted by rarity, that the passage holds (:class:`TermWeights`); the
   question's own words ("what", "how", "什么", "哪些"...) are left out first. No hit left: the
   answer is a refusal and **no request is made to the model**. The floor is calibrated on
   judged collections by ``benchmarks/bench_ask.py`` (docs/ask.md).
2. **Budget.** The passages left, best first, go into the prompt until ``max_evidence``
   characters (or estimated tokens) are used; the last one may be cut.
3. **Prompt.** The passages are numbered ``[1] ... [n]`` with their source, page and section;
   the instruction is in the question's language (Chinese questions get a Chinese one) and
   can be replaced (``prompt``: an instruction, or a whole template with ``{evidence}`` and
   ``{question}``).
4. **One chat completion** (:mod:`kbcli.providers.chat`), streamed to ``on_text`` when given.
5. **Citations checked.** Every ``[n]`` must name a passage that was given; others are kept
   as ``unknown_citations``. With ``strict`` an answer citing no passage is a refusal.

Scopes: a :class:`~kbcli.knowledge_base.ScopedKnowledgeBase` (and ``filter``) limits the search, the
term weights and the hints of a refusal; nothing outside it is read into the prompt, the
answer or a message.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kbcli.config.lookup import defaults
from kbcli.config.schema import AnswerConfig
from kbcli.errors import InvalidOptionError
from kbcli.filters.model import and_filters, matches
from kbcli.protocols import ChatModelProtocol
from kbcli.providers.chat import build_chat_model
from kbcli.search.freshness import check_hits, hash_limit, state_words, store_of
from kbcli.search.hints import listed, source_pins, unindexed, unknown_keys
from kbcli.search.location import TermIdf, locate_lines
from kbcli.search.place import hit_line, hit_page, location
from kbcli.text.analysis import keyword_counts
from kbcli.types import SearchOptions, SearchResult, SearchResults, note_author, note_label
from kbcli.views import KnowledgeView, Reader, Source, as_view

REFUSAL = "No relevant knowledge found"
MAX_WEIGHED_TERMS = 64  # question terms weighed (one keyword lookup each); the rest are ignored
MIN_PIECE = 200  # characters: a passage cut shorter than this is left out instead
MAX_RANGE = 20  # "[1-3]" expands; a wider range is taken as its two ends

# Question words carry no knowledge to look for: left out before coverage is measured. English
# ones as whole words; CJK ones as substrings, replaced by a space so no bigram spans them.
QUESTION_WORDS = frozenset(
    """what which who whom whose when where why how do does did can could would should shall
    i me my we us our you your please tell explain describe know about any am were been""".split()
)
CJK_QUESTION_WORDS = tuple(
    sorted(
        """是什么 是什麼 什么 什麼 为什么 為什麼 怎么样 怎麼樣 怎么 怎麼 怎样 怎樣 如何 哪里 哪裡
        哪儿 哪兒 哪些 哪个 哪個 哪一 哪 是谁 是誰 谁 誰 多少 是否 是不是 有没有 有沒有 何时 何時
        何地 何种 何種 何处 何處 请问 請問 吗 嗎 呢""".split(),
        key=len,
        reverse=True,
    )
)
_QUESTION_WORD = re.compile(r"\b(?:" + "|".join(sorted(QUESTION_WORDS)) + r")\b", re.IGNORECASE)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_CITATION = re.compile(
    r"[\[【［]\^?\s*(\d{1,4}(?:\s*(?:[,，、;；]|[-–—~～])\s*\d{1,4})*)\s*[\]】］]"
)

INSTRUCTIONS = {
    "en": (
        "You answer the user's question using only the numbered sources below: passages from "
        "their knowledge base.\n"
        "- Use only what the sources say; add no outside knowledge.\n"
        "- After each statement, cite the sources it comes from by number in square brackets, "
        "like [1] or [2][3].\n"
        "- If the sources do not answer the question, say so in one sentence and cite nothing.\n"
        "- Answer in the language of the question, briefly and directly."
    ),
    "zh": (
        "你只能根据下面编号的资料回答用户的问题，这些资料摘自用户的知识库。\n"
        "- 只使用资料中的内容，不要补充资料以外的知识。\n"
        "- 每句陈述后用方括号标注其依据的资料编号，例如 [1] 或 [2][3]。\n"
        "- 如果资料无法回答这个问题，用一句话说明，不要标注编号。\n"
        "- 用提问的语言简洁直接地回答。"
    ),
}
LABELS = {
    "en": {"sources": "Sources:", "question": "Question:", "source": "source: ",
           "page": "page {}", "section": "section: ", "sep": "; "},
    "zh": {"sources": "资料：", "question": "问题：", "source": "来源：",
           "page": "第 {} 页", "section": "章节：", "sep": "；"},
}  # fmt: skip


# --- the answer ------------------------------------------------------------------------------


@dataclass
class Evidence:
    """One passage given to the model as ``[n]``: the hit, the text given (``text``, cut to
    the budget), and ``coverage`` (None when a reranker's ``min_relevance`` decided)."""

    n: int
    result: SearchResult
    text: str
    coverage: float | None = None

    @property
    def id(self) -> str:
        return self.result.document.id

    @property
    def metadata(self) -> dict[str, Any]:
        return self.result.document.metadata

    @property
    def source(self) -> str | None:
        source = self.metadata.get("source")
        return None if source is None else str(source)

    @property
    def note_by(self) -> str | None:
        """The writer of an agent's note (a chunk of no file), else None."""
        return note_author(self.metadata)

    @property
    def line(self) -> int | None:
        """The line of the passage's file it is cited for: its best-matching line (as
        ``kb search`` shows it; ``$EDITOR +LINE path``), else the passage's first line; None
        for a note."""
        return _whole(hit_line(self.result))

    @property
    def page(self) -> int | None:
        return None if self.note_by else _whole(self.metadata.get("page"))

    @property
    def heading(self) -> str | None:
        heading = self.metadata.get("heading")
        return heading if isinstance(heading, str) and heading and not self.note_by else None

    @property
    def location(self) -> str:
        """``path:line``, ``path#page=N`` for a page of a PDF or an image, the path, or the
        chunk id for text without a source (:func:`kbcli.search.query.location`); a note is ``note
        by
        NAME`` (``note by NAME: source``)."""
        note = note_label(self.metadata)
        if note is not None:
            return note if self.source is None else f"{note}: {self.source}"
        if self.source is None:
            return self.id
        return location(self.source, self.line, hit_page(self.metadata))

    @property
    def stale_words(self) -> str | None:
        """What the sources say beside this passage when it may not be what its file says
        now (``changed since indexed``, ``file missing``, ``vector pending``), else None."""
        return state_words(self.result.freshness)

    def to_dict(self) -> dict[str, Any]:
        """``{n, source, location, line, page, id, text, note_by}`` (the JSON of a citation),
        with ``freshness`` (``{state, indexed_at}``) when the passage may not be what its
        file says now."""
        fresh = self.result.freshness
        return {
            "n": self.n,
            "source": self.source,
            "location": self.location,
            "line": self.line,
            "page": self.page,
            "id": self.id,
            "text": self.text,
            "note_by": self.note_by,
            **({"freshness": fresh.as_json()} if fresh and self.stale_words else {}),
        }


@dataclass
class Answer:
    """What :func:`ask` returns.

    ``text`` is the model's answer (None when no request was made); ``evidence`` the numbered
    passages in the prompt; ``cited`` the passage numbers the answer cites, in order of first
    citation; ``unknown_citations`` the numbers it cites that name no passage. ``refused``
    with ``reason`` when there was no evidence good enough (no request made) or, with
    ``strict``, when the answer cites no passage. ``messages`` is the prompt.
    """

    question: str
    text: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)
    unknown_citations: list[int] = field(default_factory=list)
    refused: bool = False
    reason: str = ""
    model: str | None = None
    finish_reason: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    language: str = "en"

    @property
    def citations(self) -> list[Evidence]:
        """The passages the answer cites, by number."""
        wanted = set(self.cited)
        return [e for e in self.evidence if e.n in wanted]

    @property
    def message(self) -> str:
        """``No relevant knowledge found: <reason>.`` for a refusal, else ``""``."""
        return f"{REFUSAL}: {self.reason}." if self.refused else ""

    def to_dict(self) -> dict[str, Any]:
        """``{answer, citations, unknown_citations, refused, reason, model}``."""
        return {
            "answer": self.text,
            "citations": [e.to_dict() for e in self.citations],
            "unknown_citations": list(self.unknown_citations),
            "refused": self.refused,
            "reason": self.reason or None,
            "model": self.model,
        }


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- language and prompt ---------------------------------------------------------------------


def question_language(question: str) -> str:
    """``zh`` for a question in Chinese characters (without Japanese kana), else ``en``."""
    return "zh" if _HAN.search(question) and not _KANA.search(question) else "en"


def build_messages(
    question: str, evidence: list[Evidence], language: str = "en", prompt: str | None = None
) -> list[dict[str, str]]:
    """The chat messages for ``question`` (see the module docstring): a system instruction
    and a user message holding the numbered evidence, then the question.

    ``prompt`` replaces the instruction; a ``prompt`` holding ``{evidence}`` is the whole user
    message instead (``{evidence}`` and ``{question}`` filled in, no system message).
    """
    labels = LABELS.get(language, LABELS["en"])
    block = "\n\n".join(_passage(e, labels) for e in evidence)
    if prompt is not None and "{evidence}" in prompt:
        user = prompt.replace("{evidence}", block).replace("{question}", question)
        return [{"role": "user", "content": user}]
    system = prompt if prompt is not None else INSTRUCTIONS.get(language, INSTRUCTIONS["en"])
    space = "" if labels["question"].endswith("：") else " "
    user = f"{labels['sources']}\n\n{block}\n\n{labels['question']}{space}{question}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _passage(e: Evidence, labels: dict[str, str]) -> str:
    where = [f"{labels['source']}{e.source}" if e.source else f"{labels['source']}{e.id}"]
    if e.note_by:
        where = [f"{labels['source']}{e.location}"]
    if e.page is not None:
        where.append(labels["page"].format(e.page))
    if e.heading:
        where.append(f"{labels['section']}{' '.join(e.heading.split())}")
    return f"[{e.n}] {labels['sep'].join(where)}\n{e.text}"


def check_prompt(prompt: str) -> str:
    """``prompt`` if usable: not empty, and a template with ``{evidence}`` also holds
    ``{question}``. Raises :class:`InvalidOptionError`."""
    if not prompt.strip():
        raise InvalidOptionError("The prompt is empty: write an instruction, or drop --prompt-file")
    if "{evidence}" in prompt and "{question}" not in prompt:
        raise InvalidOptionError(
            "A prompt template with {evidence} also needs {question} (where the question goes)"
        )
    return prompt


# --- citations -------------------------------------------------------------------------------


def citations_in(text: str) -> list[int]:
    """The numbers ``text`` cites, in order of first citation: ``[1]``, ``[2][3]``,
    ``[1, 4]``, ``[2-4]``, ``[^1]`` and the full-width ``【1】`` / ``［1］``."""
    found: list[int] = []
    for match in _CITATION.finditer(text):
        numbers: list[int] = []
        for part in re.split(r"\s*[,，、;；]\s*", match.group(1)):
            ends = [int(n) for n in re.findall(r"\d+", part)]
            if len(ends) == 2 and 0 <= ends[1] - ends[0] <= MAX_RANGE:
                numbers.extend(range(ends[0], ends[1] + 1))
            else:
                numbers.extend(ends)
        found.extend(n for n in numbers if n not in found)
    return found


def check_citations(text: str, given: int) -> tuple[list[int], list[int]]:
    """``(cited, unknown)``: the numbers ``text`` cites that name one of ``given`` passages
    (1..given), and those that name none."""
    numbers = citations_in(text)
    return [n for n in numbers if 1 <= n <= given], [n for n in numbers if not 1 <= n <= given]


# --- the evidence floor ----------------------------------------------------------------------


def content_text(question: str) -> str:
    """``question`` without its question words (see :data:`QUESTION_WORDS`)."""
    text = unicodedata.normalize("NFKC", question)
    for word in CJK_QUESTION_WORDS:
        text = text.replace(word, " ")
    return _QUESTION_WORD.sub(" ", text)


class TermWeights:
    """How much each question term counts: its BM25 idf in the store's keyword index inside
    ``filter`` (:class:`~kbcli.search.location.TermIdf`: one single-term keyword lookup per term). A
    term
    no passage in the filter holds weighs the most any term can (``idf`` of a term in no
    chunk): the knowledge base does not know that word. Without a keyword index every term
    weighs 1.

    ``coverage(result)`` is the weighted share of the question's terms that a passage (its
    title, heading and text, as indexed) holds.
    """

    def __init__(
        self,
        kb: Source,
        question: str,
        filter: dict[str, Any] | None,
        scope: dict[str, Any] | None = None,
    ):
        self.store = kb.store
        self.analyzer = kb.analyzer
        self.filter = filter
        self.scope = scope  # an access scope: the idf are the scope's alone
        counts = self.analyzer.query_counts(content_text(question))
        if not counts:  # only question words ("who are you?"): weigh them after all
            counts = self.analyzer.query_counts(question)
        self.counts = Counter(dict(list(counts.items())[:MAX_WEIGHED_TERMS]))
        idf = TermIdf(self.store, self.analyzer, question, filter, scope)
        self.weights: dict[str, float] = idf.weights(self.counts)

    def coverage(self, result: SearchResult) -> float:
        """Weighted share of the question's terms ``result`` holds (0..1)."""
        total = sum(w * self.counts[t] for t, w in self.weights.items())
        if total <= 0:
            return 0.0
        doc = result.document
        held = keyword_counts(self.analyzer, doc.text, doc.metadata)
        return sum(w * self.counts[t] for t, w in self.weights.items() if t in held) / total


# --- evidence --------------------------------------------------------------------------------


def estimate_tokens(text: str) -> float:
    """Tokens of ``text`` as BPE tokenizers roughly count them: one per CJK character, one per
    four other characters (no tokenizer is loaded)."""
    cjk = len(_HAN.findall(text)) + len(_KANA.findall(text))
    return cjk + (len(text) - cjk) / 4.0


def _cost(text: str, unit: str) -> float:
    return estimate_tokens(text) if unit == "tokens" else float(len(text))


def _cut(text: str, budget: float, unit: str) -> str:
    """The start of ``text`` within ``budget``, ending at a space when one is near."""
    used, end = 0.0, len(text)
    for at, char in enumerate(text):
        used += _cost(char, unit)
        if used > budget:
            end = at
            break
    else:
        return text
    space = text.rfind(" ", 0, end)
    if space > end * 0.8:
        end = space
    return text[:end].rstrip() + " …"


def budget_evidence(
    scored: list[tuple[SearchResult, float | None]], amount: int, unit: str = "chars"
) -> list[Evidence]:
    """Number the passages, best first, while they fit in ``amount`` characters or tokens;
    the first that does not fit is cut to what is left (left out when that is under
    :data:`MIN_PIECE` characters and something is already in)."""
    out: list[Evidence] = []
    used = 0.0
    for result, coverage in scored:
        text = result.document.text.strip()
        left = amount - used
        if left <= 0:
            break
        if _cost(text, unit) > left:
            cut = _cut(text, left, unit)
            if out and len(cut) < MIN_PIECE:
                break
            text = cut
        out.append(Evidence(len(out) + 1, result, text, coverage))
        used += _cost(text, unit)
    return out


@dataclass
class Selection:
    """The hits that passed the threshold, with their coverage, or why none did."""

    passed: list[tuple[SearchResult, float | None]]
    reason: str = ""
    weights: dict[str, float] | None = None  # the question's term weights, when measured


def _parts(view: Reader) -> tuple[Source, dict[str, Any] | None]:
    """The knowledge base under ``view`` and the scope's filter (None: no scope)."""
    if isinstance(view, KnowledgeView):
        return view.kb, view.filter
    return view, None


def select_evidence(
    view: Reader, question: str, options: SearchOptions, min_coverage: float
) -> Selection:
    """Search ``view`` and keep the hits good enough to answer from (see module docstring)."""
    kb, scope = _parts(view)
    scope = and_filters(scope, options.scope)
    results = kb.search_with(question, replace(options, scope=scope))
    hits = [r for r in results if matches(r.document.metadata, scope)] if scope else list(results)
    reranked = results if isinstance(results, SearchResults) else SearchResults()
    if reranked.refused:
        best = reranked.best_relevance
        shown = f" (best {best:.3f})" if best is not None else ""
        return Selection(
            [],
            f"none of the {reranked.candidates} candidates reached min_relevance "
            f"{reranked.min_relevance:g}{shown}",
        )
    if not hits:
        return Selection([], _nothing_found(view, options.filter))
    if reranked.candidates and reranked.min_relevance is not None:
        return Selection([(hit, None) for hit in hits])  # the reranker's threshold decided
    weights = TermWeights(kb, question, options.filter, scope)
    scored = [(hit, weights.coverage(hit)) for hit in hits]
    passed: list[tuple[SearchResult, float | None]] = [
        (hit, c) for hit, c in scored if c >= min_coverage
    ]
    if passed:
        return Selection(passed, weights=weights.weights)
    best = max(c for _, c in scored)
    return Selection(
        [],
        f"the best of {len(hits)} passages holds {best:.0%} of the question's terms "
        f"(weighted by rarity), under min_coverage {min_coverage:g}",
    )


def _check_freshness(view: Reader, evidence: list[Evidence]) -> None:
    """Each passage's freshness (its file changed or went missing since it was indexed), so
    that the answer's sources say so beside any such passage it cites."""
    kb = as_view(view).kb
    limit = hash_limit(getattr(kb, "config", None))
    check_hits(store_of(kb), [e.result for e in evidence], limit=limit)


def _locate(
    view: Reader,
    question: str,
    evidence: list[Evidence],
    options: SearchOptions | None,
    weights: dict[str, float] | None,
) -> None:
    """Each passage on its best-matching line for the question's terms (its citation's
    ``path:line``), weighed as the floor weighed them when it did."""
    options = options or SearchOptions(k=8)
    text = content_text(question)
    if not view.analyzer.query_terms(text):  # only question words: they are what it asks
        text = question
    results = [e.result for e in evidence]
    locate_lines(view, text, results, options.filter, options.scope, weights=weights)


def _nothing_found(view: Reader, filter: dict[str, Any] | None) -> str:
    """Why a search found nothing, when the filter explains it (read inside ``view``)."""
    reason = "no indexed passage matches the question"
    if not filter:
        return reason
    kb, scope = _parts(view)
    readable = view if scope is not None else kb.store
    empty = unindexed(readable, source_pins(filter))
    if empty:
        return f"{reason}: nothing is indexed {listed(empty)}"
    unknown = unknown_keys(readable, filter, most=3)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        return f"{reason}: no indexed passage has the metadata key {names}"
    return reason


# --- ask -------------------------------------------------------------------------------------


def answer_settings(view: Reader) -> AnswerConfig:
    """``rag.answer`` of the configuration ``view`` was built with (else
    :func:`kbcli.config.lookup.defaults`)."""
    kb, _ = _parts(view)
    return (kb.config or defaults()).rag.answer


def ask(
    view: Reader,
    question: str,
    options: SearchOptions | None = None,
    *,
    settings: AnswerConfig | None = None,
    model: str | None = None,
    prompt: str | None = None,
    strict: bool = False,
    min_coverage: float | None = None,
    on_text: Callable[[str], None] | None = None,
    chat: ChatModelProtocol | None = None,
    dry_run: bool = False,
) -> Answer:
    """Answer ``question`` from ``view`` (a :class:`~kbcli.pipeline.KnowledgeBase` or a
    :class:`~kbcli.knowledge_base.ScopedKnowledgeBase`); see the module docstring.

    ``options``: the search (default ``SearchOptions(k=8)``). ``settings``: ``rag.answer``
    (default: the knowledge base's configuration). ``model`` overrides its model; ``chat`` is
    a ready chat model (anything with ``complete(messages, max_tokens=, temperature=,
    on_text=)`` returning a :class:`~kbcli.providers.chat.Completion`). ``on_text`` streams the
    answer
    (with ``strict``, a refused answer has then been shown already). ``dry_run`` stops before
    the request: the answer holds the evidence and ``messages``, ``text`` None.
    Raises :class:`~kbcli.errors.AnswerError` when the model fails.
    """
    if not question or not question.strip():
        raise InvalidOptionError("Nothing to ask: the question is empty")
    settings = settings if settings is not None else answer_settings(view)
    floor = settings.min_coverage if min_coverage is None else min_coverage
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= 1:
        raise InvalidOptionError(f"min_coverage must be between 0 and 1, got {floor!r}")
    if prompt is not None:
        check_prompt(prompt)
    language = question_language(question)
    chosen = select_evidence(view, question, options or SearchOptions(k=8), float(floor))
    if not chosen.passed:
        return Answer(question, refused=True, reason=chosen.reason, language=language)
    evidence = budget_evidence(chosen.passed, settings.max_evidence, settings.evidence_unit)
    _locate(view, question, evidence, options, chosen.weights)
    _check_freshness(view, evidence)
    messages = build_messages(question, evidence, language, prompt)
    answer = Answer(question, evidence=evidence, messages=messages, language=language)
    if dry_run:
        return answer
    if chat is None:
        chat = build_chat_model(settings, model)
    completion = chat.complete(
        messages,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        on_text=on_text,
    )
    answer.text = completion.text
    answer.model = completion.model
    answer.finish_reason = completion.finish_reason
    answer.cited, answer.unknown_citations = check_citations(completion.text, len(evidence))
    if strict and not answer.cited:
        answer.refused = True
        answer.reason = "the answer cites none of the passages it was given (strict)"
    return answer
