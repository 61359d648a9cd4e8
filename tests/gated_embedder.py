"""An embedder that holds ``kb ingest`` mid-run, for the fault tests
(stores/test_postgres_faults.py).

It embeds exactly like the built-in simple embedder (same provider, model and vectors, so its
index equals a plain ``simple`` ingest), a few texts per call. When ``KB_TEST_GATE`` names a
folder, the call that brings the texts embedded past ``KB_TEST_GATE_AFTER`` (default 1) first
creates ``<folder>/waiting`` and then waits until ``<folder>/go`` exists: the test does its
damage (kills the server, terminates the connections) while the process is held there, with
the files before it written and the rest not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kbcli.embedders.simple import SimpleEmbedder


class GatedEmbedder(SimpleEmbedder):
    cheap = False  # held in the vector fill after the writes, as a model's vectors are

    def __init__(self, **_settings: object) -> None:
        super().__init__()
        self.batch_size = 4
        self.embedded = 0
        gate = os.environ.get("KB_TEST_GATE")
        self.gate = Path(gate) if gate else None
        self.after = int(os.environ.get("KB_TEST_GATE_AFTER", "1"))

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        if self.gate is not None and self.embedded > self.after:
            gate, self.gate = self.gate, None  # once
            (gate / "waiting").touch()
            while not (gate / "go").exists():
                time.sleep(0.02)
        return super()._embed_batch(texts)
