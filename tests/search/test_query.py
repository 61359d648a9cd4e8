"""kbcli.search.query.search: phrases, exclusions and results by file keep k hits when the first
pool
is used up by one long file or by chunks the query syntax drops."""

from __future__ import annotations

from kbcli import KnowledgeBase
from kbcli.embedders import SimpleEmbedder
from kbcli.search.phrases import parse_query
from kbcli.search.pool import POOL_MIN
from kbcli.search.query import search
from kbcli.types import SearchOptions


class CountingKB:
    """A knowledge base that records the depth of every recall it makes."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.pools: list[int] = []

    @property
    def analyzer(self):
        return self.kb.analyzer

    def search_with(self, query, options, pool):
        return self.kb.search_with(query, options, pool=CountingPool(pool, self.pools))


class CountingPool:
    """A search's pool that records the depth of every recall made for it."""

    def __init__(self, pool, depths: list[int]) -> None:
        self.pool = pool
        self.depths = depths

    def first_depth(self, size):
        return self.pool.first_depth(size)

    def choose(self, recalled, size):
        return self.pool.choose(recalled, size)

    def enough(self, recalled, depth, chosen, size):
        self.depths.append(depth)
        return self.pool.enough(recalled, depth, chosen, size)

    def deeper(self, depth):
        return self.pool.deeper(depth)


def long_file_kb(tmp_path) -> KnowledgeBase:
    """``long.md``: 3 × POOL_MIN chunks that all say "backup" twice (they outrank everything);
    five small files say it once, and only ``small3.md`` says "restore the backup"."""
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    for i in range(3 * POOL_MIN):
        kb.add(f"backup backup nightly copy {i}", {"source": "long.md"}, id=f"long-{i}")
    for j in range(5):
        text = f"the backup of small file {j} is kept in another room with many other words"
        if j == 3:
            text += " so restore the backup from there"
        kb.add(text, {"source": f"small{j}.md"}, id=f"small-{j}")
    return kb


def test_by_file_deepens_past_one_long_file(tmp_path):
    kb = CountingKB(long_file_kb(tmp_path))
    hits = search(kb, "backup", SearchOptions(k=4, mode="keyword"), by="file")
    assert [h.source for h in hits][0] == "long.md"
    assert len(hits) == 4  # the first pool held only long.md's chunks
    assert hits[0].matched == 3 * POOL_MIN
    assert len(kb.pools) > 1 and kb.pools[0] == POOL_MIN


def test_phrase_found_below_the_first_pool(tmp_path):
    kb = CountingKB(long_file_kb(tmp_path))
    hits = search(kb, '"restore the backup"', SearchOptions(k=3, mode="keyword"), by="chunk")
    assert [h.result.document.id for h in hits] == ["small-3"]
    # the pool grew until the index ran out of matching chunks, then stopped
    assert kb.pools == sorted(kb.pools) and len(kb.pools) >= 2


def test_a_full_answer_never_searches_twice(tmp_path):
    kb = CountingKB(long_file_kb(tmp_path))
    hits = search(kb, "backup", SearchOptions(k=1, mode="keyword"), by="file")
    assert len(hits) == 1 and kb.pools == [POOL_MIN]
    kb.pools.clear()
    search(kb, "backup", SearchOptions(k=3, mode="keyword"), by="chunk")
    assert kb.pools == [3]  # a plain chunk search asks for k, once


def test_a_query_of_only_phrase_quotes_searches_nothing(tmp_path):
    kb = CountingKB(long_file_kb(tmp_path))
    assert list(search(kb, '""', SearchOptions(k=3, mode="keyword"))) == []
    assert kb.pools == []


def test_parse_query_forms():
    parsed = parse_query('"reset link" password -sms')
    assert (parsed.text, parsed.phrases, parsed.excluded) == (
        "reset link password",
        ["reset link"],
        ["sms"],
    )
    assert parse_query("-only -exclusions").text == "-only -exclusions"
