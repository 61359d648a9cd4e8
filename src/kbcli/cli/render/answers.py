"""``kb ask``'s answer with its cited sources, and the prompt of ``--show-prompt``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from kbcli.cli.render.messages import print_json, result
from kbcli.cli.render.names import shorten_source
from kbcli.search.place import hit_page, location_suffix

if TYPE_CHECKING:
    from kbcli.agent.answer import Answer, Evidence


def cited_location(evidence: Evidence) -> tuple[str, str]:
    """``(location, " (p. N)")`` of a cited passage: ``path:line`` (its best-matching line) or
    ``path#page=N`` as ``kb search`` shows it, the path as the user would type it (relative to
    the current folder or ``~``, never cut); the page part only for a passage without a
    source that has a page; a note is ``note by NAME`` (``: path``)."""

    if evidence.note_by is not None:
        where = f"note by {evidence.note_by}" + (
            f": {shorten_source(evidence.source, width=10_000)}" if evidence.source else ""
        )
        return where, ""
    if evidence.source is None:
        page = evidence.page
        return evidence.id, f" (p. {page})" if page is not None else ""
    where = shorten_source(evidence.source, width=10_000)
    return where + location_suffix(evidence.line, hit_page(evidence.metadata)), ""


def _stale(evidence: Evidence) -> str:
    """`` (changed since indexed)`` beside a cited passage that may not be what its file says
    now: such a passage is never cited without saying so."""
    words = evidence.stale_words
    return f" ({words})" if words else ""


def _unknown_note(given: int) -> str:
    shown = f"[1]-[{given}]" if given > 1 else "[1]"
    return f"the model was given {shown} only"


def answer_output(answer: Answer, fmt: str, *, streamed: bool = False) -> None:
    """``kb ask``'s answer on stdout as ``text`` or ``md``: the answer (unless ``streamed``
    already printed it), then each source it cited as ``[n] path:line`` and each citation
    naming no source, flagged."""
    text = (answer.text or "").strip()
    if streamed:
        sys.stdout.write("\n")
    else:
        result(text)
    given = len(answer.evidence)
    if fmt == "md":
        result("")
        result("**Sources**")
        result("")
        for e in answer.citations:
            where, page = cited_location(e)
            heading = f" — {' '.join(e.heading.split())}" if e.heading else ""
            result(f"- [{e.n}] `{where}`{page}{heading}{_stale(e)}")
        for n in answer.unknown_citations:
            result(f"- [{n}] **unknown citation**: {_unknown_note(given)}")
        if not answer.citations and not answer.unknown_citations:
            result("- none cited: this answer may not come from the knowledge base")
        sys.stdout.flush()
        return
    result("")
    if not answer.citations and not answer.unknown_citations:
        result("Sources: none cited (this answer may not come from the knowledge base)")
        return
    result("Sources:")
    for e in answer.citations:
        where, page = cited_location(e)
        result(f"  [{e.n}] {where}{page}{_stale(e)}")
    for n in answer.unknown_citations:
        result(f"  [{n}] unknown citation: {_unknown_note(given)}")


def prompt_output(answer: Answer, as_json: bool = False) -> None:
    """``kb ask --show-prompt``: the messages that would be sent (and, as JSON, the numbered
    evidence)."""
    if as_json:
        print_json(
            {"messages": answer.messages, "evidence": [e.to_dict() for e in answer.evidence]}
        )
        return
    for message in answer.messages:
        result(f"--- {message['role']} ---")
        result(message["content"])
