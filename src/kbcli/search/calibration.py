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
a search costs nothing extra. The probes' vectors depend only on the embedder: they are embedded
once, in one call (one request for an API embedder), and kept with the index too (key
:func:`probes_key`), so a later ingest searches them again without embedding anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import statistics
from array import array
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple, Protocol

from kbcli.embedders.base import EmbedderInfo, capabilities_of, embed_queries, embedder_info
from kbcli.protocols import (
    DocumentCatalog,
    EmbedderProtocol,
    IndexMetadata,
    VectorStoreProtocol,
    supports,
)
from kbcli.text.analysis import has_cjk

META_PREFIX = "relevance_floor:"
PROBES_PREFIX = "relevance_probes:"  # the probes' vectors, per embedder
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


# Nonsense a person might type: what must find nothing in any mode. Only strings that mean
# nothing anywhere ("test test 123" found the man page of test, "lorem ipsum" the tldr page
# of lorem: measured, docs/quality.md).
PROBES: tuple[str, ...] = (
    "qwertyuiopzxcv",
    "asdfghjkl",
    "zxcvbnm qwerty",
    "aaaaaaaa",
    "xyzzy plugh",
    "hjkl hjkl",
    "zzzz",
    "ababab cdcdcd",
    "啊啊啊啊",
    "哈哈哈哈哈",
    "鍂鍃鍄 鍅鍆",
    *_made_up_words(24, seed=11),
    *_letter_strings(12, seed=13),
)


class Indexed(Protocol):
    """What calibration reads of a knowledge base: its store and its embedder."""

    @property
    def store(self) -> object:
        """The index (calibrated when it is a :class:`~kbcli.protocols.DocumentCatalog`)."""
        ...

    @property
    def embedder(self) -> EmbedderProtocol:
        """The embedder whose dense scores the floors are for."""
        ...


def probes_for(languages: Iterable[str] | None) -> tuple[str, ...]:
    """The probes for an embedder that knows ``languages``: without the Chinese ones when it
    declares languages none of which is Chinese or Japanese (search does not trust its dense
    route for such queries anyway, and its vectors of Chinese text all look alike)."""
    if languages is None or set(languages) & {"zh", "ja", "multilingual"}:
        return PROBES
    return tuple(p for p in PROBES if not has_cjk(p))


def meta_key(info: EmbedderInfo) -> str:
    """The index-metadata key of the floor for the embedder ``info`` (provider/model)."""
    return f"{META_PREFIX}{info.provider}/{info.model}"


def probes_key(info: EmbedderInfo) -> str:
    """The index-metadata key of the probes' vectors for the embedder ``info``."""
    return f"{PROBES_PREFIX}{info.provider}/{info.model}"


def _fingerprint(probes: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(probes).encode("utf-8")).hexdigest()[:16]


def stored_probe_vectors(
    store: IndexMetadata, info: EmbedderInfo, probes: Sequence[str]
) -> list[array[float]] | None:
    """The vectors of ``probes`` kept in ``store`` for the embedder ``info`` (None: none kept,
    or kept for other probes or another dimension)."""
    raw = store.get_meta(probes_key(info))
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("probes") != _fingerprint(probes):
        return None
    dim = value.get("dimension")
    if not isinstance(dim, int) or dim < 1 or (info.dimension and dim != info.dimension):
        return None
    flat = array("f")
    try:
        flat.frombytes(base64.b64decode(value.get("vectors", "")))
    except (ValueError, TypeError):
        return None
    if len(flat) != dim * len(probes):
        return None
    return [flat[i * dim : (i + 1) * dim] for i in range(len(probes))]


def probe_vectors(
    store: IndexMetadata, embedder: EmbedderProtocol, probes: Sequence[str], *, keep: bool = True
) -> list[Sequence[float]]:
    """The vectors of ``probes``: those ``store`` keeps for ``embedder``, else embedded now in
    one batch (:func:`embed_queries`) and, with ``keep``, kept in ``store``'s metadata."""
    info = embedder_info(embedder)
    kept = stored_probe_vectors(store, info, probes)
    if kept is not None:
        return list(kept)
    vectors = [array("f", v) for v in embed_queries(embedder, probes)]
    if keep and vectors:
        flat = array("f")
        for vector in vectors:
            flat.extend(vector)
        record = {
            "probes": _fingerprint(probes),
            "dimension": len(vectors[0]),
            "vectors": base64.b64encode(flat.tobytes()).decode("ascii"),
        }
        store.set_meta(probes_key(info), json.dumps(record))
    return list(vectors)


class Floors(NamedTuple):
    """An index's two cut-offs for one embedder's dense scores (see the module docstring)."""

    floor: float
    hit_floor: float


def floor_from_scores(best: Sequence[float], margin: float = MARGIN) -> Floors:
    """The floors from each probe's best dense score: the highest plus ``margin``, and the
    median."""
    if not best:
        return Floors(0.0, 0.0)
    return Floors(max(best) + margin, float(statistics.median(best)))


def dense_cutoff(
    floors: Floors | None, best_dense: float, keyword_found: bool, weak: bool
) -> float | None:
    """The score under which a search drops the hits only the dense route found: none without
    floors; everything (infinity) when the best dense score is under ``floor`` and the keyword
    route found nothing (nonsense), or when the dense route is ``weak`` for the query (spelling
    vectors, or a script the model does not know: it only breaks keyword ties then); else
    ``hit_floor``."""
    if floors is None:
        return None
    if weak or (best_dense < floors.floor and not keyword_found):
        return float("inf")
    return floors.hit_floor


def calibrate(
    embed_query: Callable[[str], Sequence[float]],
    search: Callable[[Sequence[float], int], list[Any]],
    probes: Sequence[str] = PROBES,
) -> dict[str, Any]:
    """Search every probe (``search(vector, k)`` returns hits with ``.score``) and return
    ``{"floor", "hit_floor", "probes", "best"}``; ``best`` is each probe's best score."""
    best = []
    for text in probes:
        hits = search(embed_query(text), PROBE_HITS)
        best.append(max((float(h.score) for h in hits), default=0.0))
    floors = floor_from_scores(best)
    return {
        "floor": round(floors.floor, 4),
        "hit_floor": round(floors.hit_floor, 4),
        "probes": len(probes),
        "best": best,
    }


def stored_floors(store: IndexMetadata, info: EmbedderInfo) -> Floors | None:
    """The floors recorded in ``store`` for the embedder ``info``, or None."""
    raw = store.get_meta(meta_key(info))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    floor, hit = value.get("floor"), value.get("hit_floor")
    if not isinstance(floor, (int, float)) or not isinstance(hit, (int, float)):
        return None
    return Floors(float(floor), float(hit))


def calibrate_index(kb: Indexed) -> float | None:
    """Calibrate the floor of ``kb``'s index for its embedder and store it (``set_meta``);
    returns it, or None when the index has no vectors or keeps no metadata."""
    store = kb.store
    if not supports(store, DocumentCatalog) or not supports(store, VectorStoreProtocol):
        return None
    stats = store.stats()
    if not stats.get("vectors"):
        return None
    info = embedder_info(kb.embedder)
    probes = probes_for(capabilities_of(kb.embedder).languages)
    vectors = dict(zip(probes, probe_vectors(store, kb.embedder, probes)))
    result = calibrate(vectors.__getitem__, lambda vector, k: store.search(list(vector), k), probes)
    record = {
        "floor": result["floor"],
        "hit_floor": result["hit_floor"],
        "probes": result["probes"],
        "best_probe": round(max(result["best"], default=0.0), 4),
        "vectors": stats.get("vectors"),
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    store.set_meta(meta_key(info), json.dumps(record))
    return float(result["floor"])


def has_floor(kb: Indexed) -> bool:
    """True when ``kb``'s index records a floor for its embedder (or keeps no metadata)."""
    store = kb.store
    if not supports(store, DocumentCatalog):
        return True
    return stored_floors(store, embedder_info(kb.embedder)) is not None
