"""``--explain`` in words: how each score was made."""

from __future__ import annotations

from typing import Any


def explain_text(explain: dict[str, Any] | None) -> str:
    """``--explain`` of a hit, one fact a line, in words: ``keyword #1 (4.187 = chunk
    1.396 + 2.000×file 1.396)``, ``dense not found``, ``alpha 0.001 (keyword-first: ...)``;
    never a Python literal (``True``, ``{...}``, ``[...]``)."""
    if not explain:
        return "-"
    return "\n".join(fact for _, fact in explain_facts(explain))


def explain_facts(explain: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The facts of :func:`explain_text` as ``(key, fact)`` pairs, in order (the key says
    which entry of the explain mapping each came from)."""
    if not explain:
        return []
    if not isinstance(explain, dict):
        return [("", _fmt(explain))]
    note = explain.get("alpha_note")
    lines: list[tuple[str, str]] = []
    for key, value in explain.items():
        if key == "alpha_note" or (key == "keyword_first" and note):
            continue  # said beside alpha
        if isinstance(value, dict) and "rank" in value:
            line = f"{key} #{value['rank']} ({_fmt(value.get('score'))}"
            if "bm25_chunk" in value:
                line += (
                    f" = chunk {_fmt(value['bm25_chunk'])}"
                    f" + {_fmt(value['source_weight'])}×file {_fmt(value['bm25_source'])}"
                )
            lines.append((key, line + ")"))
        elif value is None:
            lines.append((key, f"{key} not found"))
        elif key == "alpha" and note:
            lines.append((key, f"alpha {_fmt(value)} ({note})"))
        elif key == "window":
            n = _fmt(value)
            lines.append((key, f"window {n} (only each route's best {n} earn fused score)"))
        elif key == "duplicates" and isinstance(value, list):
            lines.append((key, f"duplicates {len(value)} collapsed ({_fmt(value)})"))
        else:
            lines.append((key, f"{key} {_fmt(value)}"))
    return lines


def shared_facts(explains: list[dict[str, Any] | None]) -> list[str]:
    """The facts every one of several hits' explains states alike (the fusion, alpha and why,
    a route that found none of them), said once above the hits rather than under each."""
    if len(explains) < 2:
        return []
    facts = [explain_facts(e) for e in explains]
    common = set(facts[0]).intersection(*facts[1:])
    return [fact for pair in facts[0] for fact in [pair[1]] if pair in common]


def _fmt(value: Any) -> str:
    """One explain value in words: floats to 3 places, yes/no, lists and mappings spelled."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)
