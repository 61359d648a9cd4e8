"""The relevance floor's nonsense probes cost one embedding call per embedder, not one per probe
per ingest: they are embedded in one batch, kept with the index, and every later ingest
recalibrates from the kept vectors (issue 41). Counted on a fake OpenAI-compatible server over
real HTTP, through ``kb`` in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import API_KEY_VARS
from fake_providers import FakeServer
from kbcli.embedders.base import BaseEmbedder, EmbedderInfo
from kbcli.search.calibration import PROBES
from kbcli.stores import SQLiteStore

SRC = Path(__file__).resolve().parents[2] / "src"


def kb(args: list[str], cwd: Path, server: FakeServer) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KB_", "XDG_")) and k not in API_KEY_VARS
    }
    env.update(
        HOME=str(cwd / "home"),
        PYTHONPATH=str(SRC),
        OPENAI_API_KEY="sk-test-key-for-the-fake-server",
        OPENAI_BASE_URL=f"{server.url}/v1",
        KB_DB=str(cwd / "index.db"),
    )
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def probe_requests(server: FakeServer) -> list[list[str]]:
    return [texts for texts in server.inputs() if set(texts) & set(PROBES)]


@pytest.mark.slow
def test_an_api_ingest_embeds_the_probes_once_in_one_request(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(300):  # 300 chunks: 5 requests of at most 64 texts
        (notes / f"note{i:03}.md").write_text(f"Note {i} about the backup rotation number {i}.\n")
    with FakeServer() as server:
        first = kb(["ingest", str(notes), "--json"], tmp_path, server)
        assert first.returncode == 0, first.stderr
        report = json.loads(first.stdout)
        assert report["vectors_added"] == 300
        probes = probe_requests(server)
        assert len(probes) == 1, [len(p) for p in probes]  # main: 47 requests of one probe
        assert len(probes[0]) == len(PROBES)
        assert len(server.requests) == 5 + 1

        (notes / "note000.md").write_text("Note 0 now says something else entirely.\n")
        before = len(server.requests)
        again = kb(["ingest", str(notes), "--json"], tmp_path, server)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["updated"] == 1
        assert len(server.requests) == before + 1  # the changed chunk alone: no probes again
        assert len(probe_requests(server)) == 1

        # the floor was calibrated again from the kept vectors
        store = SQLiteStore(tmp_path / "index.db", create=False)
        try:
            floor = json.loads(store.get_meta("relevance_floor:openai/text-embedding-3-small"))
            assert floor["vectors"] == 300 and floor["probes"] == len(PROBES)
        finally:
            store.close()


class Counting(BaseEmbedder):
    """Passages and queries embedded alike (no ``embed_query`` of its own); counts calls."""

    provider, model, batch_size = "counting", "c-4", 64

    def __init__(self) -> None:
        self.calls: list[int] = []

    def _embed_batch(self, texts):
        self.calls.append(len(texts))
        return [[float(len(t)), 1.0, float(t.count("a")), 0.5] for t in texts]


class OwnQueries(Counting):
    """Queries embedded differently from passages, one at a time."""

    model = "q-4"

    def embed_query(self, text):
        self.calls.append(1)
        return [0.0, 1.0, 0.0, float(len(text))]


def test_embed_queries_batches_where_queries_are_passages():
    from kbcli.embedders.base import embed_queries

    model = Counting()
    assert embed_queries(model, ["a", "bb", "ccc"]) == model.embed_documents(["a", "bb", "ccc"])
    assert model.calls == [3, 3]
    own = OwnQueries()
    assert embed_queries(own, ["a", "bb"]) == [[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 2.0]]
    assert own.calls == [1, 1]  # its own query vectors, never passage vectors


def test_probe_vectors_are_kept_per_embedder_and_probe_list(tmp_path):
    from kbcli.search.calibration import probe_vectors, probes_key, stored_probe_vectors

    store = SQLiteStore(tmp_path / "kb.db")
    try:
        model = Counting()
        probes = list(PROBES[:5])
        first = probe_vectors(store, model, probes)
        assert model.calls == [5]
        again = probe_vectors(store, model, probes)
        assert model.calls == [5]  # read back, exactly
        assert [list(v) for v in again] == [list(v) for v in first]
        probe_vectors(store, model, probes[:4])  # another probe list: embedded again
        assert model.calls == [5, 4]
        other = OwnQueries()
        assert stored_probe_vectors(store, other.info, probes[:4]) is None
        probe_vectors(store, other, probes, keep=False)
        assert store.get_meta(probes_key(other.info)) is None  # a search keeps nothing
        wider = EmbedderInfo("counting", "c-4", 8)
        assert stored_probe_vectors(store, wider, probes[:4]) is None  # another dimension
    finally:
        store.close()


@pytest.mark.parametrize("raw", ["not json", '{"probes": "x"}', '{"vectors": 3}'])
def test_damaged_probe_records_are_embedded_again(tmp_path, raw):
    from kbcli.search.calibration import probe_vectors, probes_key

    store = SQLiteStore(tmp_path / "kb.db")
    try:
        model = Counting()
        store.set_meta(probes_key(model.info), raw)
        vectors = probe_vectors(store, model, list(PROBES[:3]))
        assert model.calls == [3] and len(vectors) == 3
    finally:
        store.close()
