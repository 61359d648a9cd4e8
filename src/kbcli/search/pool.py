"""How deep a search recalls when hits are dropped or grouped after ranking.

``kb search`` drops hits missing a quoted phrase or holding an excluded word, and by default
shows one hit per file: a recall of k chunks would often leave fewer than k hits. A
:class:`Pool` says what the caller will do with the hits; the search pipeline
(:meth:`kbcli.search.pipeline.RAGPipeline.search`) recalls as deep as it needs, asking the
pool which recalled hits go on (:meth:`Pool.choose`) and whether they are enough
(:meth:`Pool.enough`). Everything here is a pure decision over hits already recalled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbcli.search.phrases import ParsedQuery, passes
from kbcli.text.analysis import Analyzer
from kbcli.types import SearchResult

UNITS = ("file", "chunk")
# Extra chunks recalled per wanted hit when hits may be dropped or grouped afterwards. When
# the pool still leaves fewer than k hits (one long file fills it, or few chunks hold the
# phrase) and more chunks matched, the pool grows by POOL_FACTOR up to POOL_DEEPEST chunks.
POOL_FACTOR = 4
POOL_MIN = 50
POOL_MAX = 1000
POOL_DEEPEST = 16000


def source_key(result: SearchResult) -> str:
    """What groups ``result`` with others of its file: its source, else its own id."""
    source = result.document.metadata.get("source")
    return f"source:{source}" if source is not None else f"id:{result.document.id}"


@dataclass(frozen=True)
class Pool:
    """What a caller does with a search's hits after ranking: keeps those passing ``parsed``'s
    phrases and exclusions (checked with ``analyzer``; None when the query is plain) and shows
    ``k`` of them by ``file`` or by ``chunk``.

    With a reranker the candidate pool is ``size`` chunks (at least 2×k) whatever the unit: by
    file it holds the best recalled chunk of each of the first k files (recalled deeper when
    the first chunks come from fewer files) and the best other chunks."""

    parsed: ParsedQuery
    k: int
    by: str = "chunk"
    analyzer: Analyzer | None = None

    def first_depth(self, size: int | None) -> int:
        """The first recall depth: ``size`` for a reranker's pool, else as deep as k hits need
        (k itself when nothing is dropped or grouped)."""
        if size is not None:
            return size
        k = self.k
        if self.by == "file" or not self.parsed.plain:
            return min(max(k * POOL_FACTOR, POOL_MIN), max(POOL_MAX, k))
        return k

    def choose(self, recalled: list[SearchResult], size: int | None) -> list[SearchResult]:
        """The recalled hits that go on: those that pass, and for a reranker its pool."""
        kept = self._keep(recalled)
        return kept if size is None else self._candidates(kept, size)

    def enough(
        self, recalled: list[SearchResult], depth: int, chosen: list[SearchResult], size: int | None
    ) -> bool:
        """True when no deeper recall is needed: the route ran dry (fewer than ``depth``
        recalled), the deepest recall was reached, or ``chosen`` holds what is wanted
        (``size`` chunks for a reranker, and k files among them by file; else k hits)."""
        if len(recalled) < depth or depth >= POOL_DEEPEST:
            return True
        if size is not None and len(chosen) < size:
            return False
        if self.by == "file":
            return len({source_key(r) for r in chosen}) >= self.k
        return len(chosen) >= self.k

    @staticmethod
    def deeper(depth: int) -> int:
        """The next recall depth after ``depth``."""
        return min(depth * POOL_FACTOR, POOL_DEEPEST)

    def _keep(self, results: list[SearchResult]) -> list[SearchResult]:
        if self.analyzer is None:
            return results
        return [r for r in results if passes(r.document.text, self.parsed, self.analyzer)]

    def _candidates(self, kept: list[SearchResult], size: int) -> list[SearchResult]:
        """The rerank pool out of ``kept`` (in recall order): by chunk its first ``size``; by
        file the best chunk of each of its first k files, then the best others up to
        ``size``."""
        k = self.k
        if self.by != "file" or size <= k:
            return kept[:size]
        firsts: dict[str, int] = {}
        for index, result in enumerate(kept):
            if len(firsts) == k:
                break
            firsts.setdefault(source_key(result), index)
        reserved = set(firsts.values())
        others = [i for i in range(len(kept)) if i not in reserved][: size - len(reserved)]
        return [kept[i] for i in sorted(reserved | set(others))]
