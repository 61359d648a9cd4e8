"""The relevance floor of an index's dense route: how similar a query must be to a chunk before
the chunk counts as found by meaning.

Every embedder has its own scale: all-MiniLM-L6-v2 gives unrelated text cosines around 0.1-0.3,
multilingual-e5 around 0.7-0.8, the character-hash embedder 0.6-0.9. A fixed cut-off cannot
serve them all, so each index learns its own: after an ingest that changed it, the nonsense
:data:`PROBES` (keyboard mashes, made-up words, filler text) are searched against the stored
vectors, and the floor is the best score any of them reached plus a margin
(:func:`floor_from_scores`). A chunk whose dense score is below the floor is not a semantic
hit: nonsense finds nothing, and hybrid search never fills a short list with look-alikes.
The floor is stored with the index (``store.set_meta``, key :func:`meta_key`, per embedder), so
a search costs nothing extra.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

META_PREFIX = "relevance_floor:"
# Added to the best nonsense score: measured on the judged sets (docs/quality.md, "No junk"),
# large enough that nonsense typed by a person (not just our probes) stays below, small
# enough that the relevant page of a real query stays above.
MARGIN = 0.02
PROBE_HITS = 10  # dense hits looked at per probe


def _made_up_words(count: int, seed: int) -> list[str]:
    """Pronounceable non-words ("vrelk tomsiq"), deterministic."""
    rng = random.Random(seed)
    onsets = ["b", "br", "d", "dr", "f", "fl", "g", "gr", "k", "kl", "m", "n", "p", "pl", "r",
              "s", "sk", "st", "t", "tr", "v", "vr", "z", "zh"]  # fmt: skip
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "k", "l", "m", "n", "p", "q", "rk", "sk", "x", "z"]
    out = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(1, 3)):
            word = "".join(
                rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                for _ in range(rng.randint(1, 3))
            )
            words.append(word)
        out.append(" ".join(words))
    return out


def _letter_strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(6, 16))) for _ in range(count)]


# Nonsense a person might type or paste: what must find nothing in any mode.
PROBES: tuple[str, ...] = (
    "qwertyuiopzxcv",
    "asdfghjkl",
    "zxcvbnm qwerty",
    "lorem ipsum",
    "lorem ipsum dolor sit amet",
    "aaaaaaaa",
    "xyzzy plugh",
    "foo bar baz qux",
    "blah blah blah",
    "test test 123",
    "12345 67890",
    "??? !!!",
    "hjkl hjkl",
    "zzzz",
    "ababab cdcdcd",
    "啊啊啊啊",
    "哈哈哈哈哈",
    "鍂鍃鍄 鍅鍆",
    *_made_up_words(24, seed=11),
    *_letter_strings(12, seed=13),
)


def meta_key(info: Any) -> str:
    """The index-metadata key of the floor for the embedder ``info`` (provider/model)."""
    return f"{META_PREFIX}{info.provider}/{info.model}"


def floor_from_scores(best: Sequence[float], margin: float = MARGIN) -> float:
    """The floor from each probe's best dense score: the highest, plus ``margin``."""
    return max(best, default=0.0) + margin


def calibrate(
    embed_query: Callable[[str], Sequence[float]],
    search: Callable[[Sequence[float], int], list[Any]],
    probes: Sequence[str] = PROBES,
) -> dict[str, Any]:
    """Search every probe (``search(vector, k)`` returns hits with ``.score``) and return
    ``{"floor", "probes", "best", "chunks"}``; ``best`` is each probe's best score."""
    best = []
    for text in probes:
        hits = search(embed_query(text), PROBE_HITS)
        best.append(max((float(h.score) for h in hits), default=0.0))
    return {"floor": round(floor_from_scores(best), 4), "probes": len(probes), "best": best}


def stored_floor(store: Any, info: Any) -> float | None:
    """The floor recorded in ``store`` for the embedder ``info``, or None."""
    raw = store.get_meta(meta_key(info))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    floor = value.get("floor") if isinstance(value, dict) else None
    return float(floor) if isinstance(floor, (int, float)) else None
