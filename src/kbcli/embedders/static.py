"""A static embedding model distilled from the bundled all-MiniLM-L6-v2: a vector per token,
a text's vector the mean of its tokens' (model2vec's recipe, built offline here).

Distillation (:func:`distill`, once per machine, about half a minute on 2 cores): every token
of the model's WordPiece vocabulary is run through the ONNX model alone (``[CLS] token
[SEP]``, mean-pooled as the sentence embedder pools), the 30,522 vectors are centred and
reduced to :data:`DIMENSIONS` by PCA, and each token is weighted by its rarity (SIF weights
from a Zipf estimate of its frequency; the vocabulary is in frequency order). The result is
kept in the user's cache folder (``$XDG_CACHE_HOME/kbcli/static``), keyed by the model file it
came from, so nothing is downloaded and nothing is shipped.

Embedding is then tokenise, look up, average, normalise: thousands of chunks per second on one
core, with numpy and tokenizers only. It knows less than the model it came from (docs/quality.md
has both on the same sets), so hybrid search treats it as a real but English-only dense route.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from kbcli.embedders.base import BaseEmbedder
from kbcli.embedders.local import default_model_files, load_model
from kbcli.errors import EmbedderError, MissingDependencyError, require

if TYPE_CHECKING:  # numpy and tokenizers are imported when the embedder is built
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

    from kbcli.embedders.local_runtime import OnnxModel

    Table = NDArray[np.float32]  # a row of dims per token id

DIMENSIONS = 256
SIF_COEFFICIENT = 1e-4
VERSION = 2  # of the recipe: a new one is distilled again
DISTILL_BATCH = 512
MODEL_NAME = "minilm-static"
_LOCK = threading.Lock()
_TABLES: dict[Path, Table] = {}


class _Encoding(NamedTuple):
    ids: list[int]
    type_ids: list[int]


def cache_folder() -> Path:
    """Where distilled tables are kept: ``$XDG_CACHE_HOME/kbcli/static`` (``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kbcli" / "static"


def _fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(fh.read(1 << 20))
    digest.update(str(path.stat().st_size).encode())
    return digest.hexdigest()[:16]


def sif_weights(vocab: dict[str, int], coefficient: float = SIF_COEFFICIENT) -> NDArray[np.float32]:
    """``a / (a + p(rank))`` per token id, with ``p`` a Zipf distribution over frequency ranks:
    frequent tokens count little, rare ones fully. BERT's WordPiece vocabulary lists special
    tokens, then single characters, then words and pieces in frequency order: a word's rank is
    its place after the characters; single letters and digits rank as the most frequent, and
    punctuation counts nothing (code-heavy pages would otherwise average to their braces)."""
    import numpy as np

    size = max(vocab.values()) + 1
    singles = [i for token, i in vocab.items() if len(token) == 1]
    first_word = max(singles) + 1 if singles else 0
    ranks = np.maximum(np.arange(size, dtype=np.float64) - first_word + 1, 1.0)
    p = (1.0 / ranks) / (1.0 / ranks).sum()
    weights = coefficient / (coefficient + p)
    for token, i in vocab.items():
        if len(token) == 1 and not token.isalnum():
            weights[i] = 0.0
    weights32: NDArray[np.float32] = weights.astype(np.float32)
    return weights32


def distill(
    runtime: OnnxModel,
    tokenizer: Tokenizer,
    *,
    dims: int = DIMENSIONS,
    tokens: Iterable[int] | None = None,
) -> Table:
    """The static table (vocabulary size × ``dims``, float32) of the ONNX sentence model
    ``runtime`` (a :class:`~kbcli.embedders.local.OnnxModel`) and its ``tokenizer``.

    ``tokens``: only these token ids are distilled (the others get zero rows): for tests.
    Special tokens (``[PAD]``, ``[CLS]``, ``[unused0]``...) always get zero rows.
    """
    import numpy as np

    vocab = tokenizer.get_vocab()
    size = max(vocab.values()) + 1
    cls_id, sep_id = vocab.get("[CLS]"), vocab.get("[SEP]")
    wanted = [
        i
        for token, i in sorted(vocab.items(), key=lambda item: item[1])
        if not (token.startswith("[") and token.endswith("]"))
    ]
    if tokens is not None:
        keep = set(int(t) for t in tokens)
        wanted = [i for i in wanted if i in keep]
    raw = np.zeros((size, runtime.dimension or 384), dtype=np.float32)
    for start in range(0, len(wanted), DISTILL_BATCH):
        part = wanted[start : start + DISTILL_BATCH]
        encodings = [
            _Encoding([x for x in (cls_id, i, sep_id) if x is not None], [0, 0, 0]) for i in part
        ]
        width = max(len(e.ids) for e in encodings)
        raw[part] = runtime._run(encodings, width)
    rows = np.asarray(wanted, dtype=np.int64)
    centred = raw[rows] - raw[rows].mean(axis=0)
    # PCA by SVD of the centred token vectors; signs fixed so a rebuild gives the same table.
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    components = vt[: min(dims, vt.shape[0])]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components *= signs[:, None]
    table = np.zeros((size, len(components)), dtype=np.float32)
    table[rows] = centred @ components.T
    table *= sif_weights(vocab)[:, None]
    return table


def load_table(dims: int = DIMENSIONS, *, announce: bool = True) -> tuple[Table, Path]:
    """The distilled table of the bundled model and its tokenizer file: read from the cache,
    or distilled now and cached (``announce``: one line on stderr first)."""
    import numpy as np

    files = default_model_files()
    onnx, tokenizer_path = files["onnx"], files["tokenizer"]
    if onnx is None or tokenizer_path is None:
        raise MissingDependencyError(
            "The static embedder is distilled from the local model's ONNX file: "
            "pip install 'kbcli[local]'"
        )
    path = cache_folder() / f"{MODEL_NAME}-{_fingerprint(onnx)}-{dims}-v{VERSION}.npy"
    with _LOCK:
        table = _TABLES.get(path)
        if table is not None:
            return table, tokenizer_path
        if path.is_file():
            try:
                table = np.load(path, allow_pickle=False).astype(np.float32)
            except (OSError, ValueError):
                table = None
        if table is None:
            if announce:
                print(
                    "Distilling the static embedder from all-MiniLM-L6-v2 (once, about 30 s)...",
                    file=sys.stderr,
                    flush=True,
                )
            tokenizers = require("tokenizers", extra="local", feature="The static embedder")
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
            table = distill(load_model(None, "onnx"), tokenizer, dims=dims)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, table.astype(np.float16))
            os.replace(tmp, path)
            table = table.astype(np.float16).astype(np.float32)  # as a later load reads it
        _TABLES[path] = table
    return table, tokenizer_path


def embed_with(table: Table, tokenizer: Tokenizer, texts: list[str]) -> NDArray[np.float32]:
    """Mean of each text's token rows, L2-normalised (a zero vector when no token is known)."""
    import numpy as np

    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    if not lengths.sum():
        return out
    ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings if e.ids])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    nonempty = lengths > 0
    sums = np.add.reduceat(table[ids], starts[nonempty], axis=0)
    out[nonempty] = sums / lengths[nonempty, None]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    unit: NDArray[np.float32] = out / np.clip(norms, 1e-12, None)
    return unit


class StaticEmbedder(BaseEmbedder):
    """Static token vectors distilled from all-MiniLM-L6-v2 (see the module docstring)."""

    provider = "static"
    languages = frozenset({"en"})
    # Hybrid search's dense weight with this embedder unless --alpha says otherwise: its
    # vectors know less than MiniLM's (docs/quality.md: 0.3 was the best weight over the
    # English sets; 0.6 fell below keyword ranking on SciFact and Cranfield).
    alpha = 0.3
    # Its weight falls per query as the keyword route's lead grows (see E5Embedder): SciFact
    # hit@1 -0.025 below keyword at a fixed 0.3, -0.014 within noise with it (docs/quality.md).
    keyword_sure_margin = 0.35

    def __init__(self, model: str | None = None, batch_size: int = 256, dims: int = DIMENSIONS):
        name = f"{MODEL_NAME}-{dims}-v{VERSION}"  # a new recipe is a new model: --rebuild
        if model not in (None, "", "default", MODEL_NAME, name):
            raise EmbedderError(
                f"The static embedder has one model, {MODEL_NAME}, not {model!r}: drop "
                "rag.embedding.model"
            )
        tokenizers = require("tokenizers", extra="local", feature="The static embedder")
        self._table, tokenizer_path = load_table(dims)
        self._tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self.batch_size = batch_size
        self.dimension = int(self._table.shape[1])
        self.model = name

    def __repr__(self) -> str:
        return f"StaticEmbedder(model={self.model!r})"

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = embed_with(self._table, self._tokenizer, texts).tolist()
        return vectors
