# mypy: disallow-subclassing-any=False
# (export_onnx subclasses torch.nn.Module, which the type checker sees as Any: torch is optional)
"""A local cross-encoder reranker: each (query, passage) pair is read by the model together.

Two routes to the same kind of model (a ``...ForSequenceClassification`` with one relevance
logit, such as ms-marco-MiniLM-L-6-v2 or bge-reranker-v2-m3):

* **onnxruntime** (``pip install 'kbcli[local]'``): a folder with an ONNX export
  (``model.onnx`` or ``onnx/model.onnx``) and its ``tokenizer.json``. Import well under a
  second, no PyTorch. :func:`export_onnx` writes such a folder from a Hugging Face one.
* **sentence-transformers** (``pip install 'kbcli[local-st]'``): its ``CrossEncoder`` over a
  Hugging Face folder, or a model name already in the local Hugging Face cache (nothing is
  downloaded: ``local_files_only``). Importing it (and PyTorch) takes 5–16 s, so it is only
  imported when this route is chosen.

``backend="auto"`` takes the onnxruntime route when the folder holds an ONNX file. Nothing is
loaded until the first :meth:`CrossEncoderReranker.rerank`. Scores are relevance in [0, 1]:
the sigmoid of the model's logit (or the softmax of the "relevant" class for two-label models).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kbcli.config.schema import RerankConfig
from kbcli.errors import InvalidOptionError, RerankerError, require
from kbcli.search.rerank.base import rescored, sigmoid
from kbcli.types import SearchResult

logger = logging.getLogger("kbcli.search.rerank")

BACKENDS = ("auto", "onnx", "sentence-transformers")
ONNX_NAMES = ("model.onnx", "onnx/model.onnx")


def find_onnx(model: str | Path) -> Path | None:
    """The ONNX file of ``model`` (the file itself, or ``model.onnx`` / ``onnx/model.onnx`` in
    the folder), or None."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".onnx":
        return path
    if path.is_dir():
        for name in ONNX_NAMES:
            if (path / name).is_file():
                return path / name
    return None


def _beside(onnx_file: Path, name: str) -> Path | None:
    for folder in (onnx_file.parent, onnx_file.parent.parent):
        if (folder / name).is_file():
            return folder / name
    return None


class _Runner(Protocol):
    """A loaded cross-encoder backend."""

    def relevance(self, query: str, texts: list[str], batch_size: int) -> list[float]: ...


def _relevance(logits: Any) -> list[float]:
    """Relevance in [0, 1] from a batch of logits: shape (n,) or (n, 1) -> sigmoid; (n, 2) ->
    softmax of the second ("relevant") class. ``logits`` is what an untyped backend returned
    (onnxruntime's or sentence-transformers' array, or a list): hence ``Any``."""
    import math

    rows = logits.tolist() if hasattr(logits, "tolist") else list(logits)
    out = []
    for row in rows:
        values = row if isinstance(row, list) else [row]
        if len(values) == 1:
            out.append(sigmoid(float(values[0])))
        else:
            top = max(values)
            exps = [math.exp(v - top) for v in values]
            out.append(exps[-1] / sum(exps))
    return out


class CrossEncoderReranker:
    """Rescores candidates with a local cross-encoder (see the module docstring).

    ``model`` is a folder (or an ``.onnx`` file) or, on the sentence-transformers route, a model
    name in the local Hugging Face cache. ``batch_size`` pairs go through the model at once;
    pairs longer than ``max_length`` tokens (capped by the model's own limit) are truncated.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        backend: str = "auto",
        batch_size: int = 32,
        max_length: int = 512,
        device: str = "cpu",
    ) -> None:
        if backend not in BACKENDS:
            raise InvalidOptionError(
                f"Unknown cross-encoder backend {backend!r}: choose one of {', '.join(BACKENDS)}"
            )
        if batch_size < 1 or max_length < 8:
            raise InvalidOptionError("batch_size must be at least 1 and max_length at least 8")
        self.model = str(model)
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.device = device
        self._backend = backend
        self._runner: _Runner | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, settings: RerankConfig) -> CrossEncoderReranker:
        """Build from ``rag.rerank`` (``model`` is required, ``batch_size`` is used)."""
        if not settings.model:
            raise RerankerError(
                "rag.rerank.model must name a cross-encoder folder (an ONNX export or a "
                "Hugging Face folder) for provider cross-encoder"
            )
        return cls(settings.model, batch_size=settings.batch_size)

    @property
    def backend(self) -> str:
        """``onnx`` or ``sentence-transformers``: the route this model takes."""
        if self._backend != "auto":
            return self._backend
        return "onnx" if find_onnx(self.model) is not None else "sentence-transformers"

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model={self.model!r}, backend={self.backend!r})"

    def load(self) -> None:
        """Load the model now (otherwise the first :meth:`rerank` does)."""
        self._loaded()

    def _loaded(self) -> _Runner:
        with self._lock:
            if self._runner is None:
                if self.backend == "onnx":
                    self._runner = _OnnxRunner(self.model, self.max_length)
                else:
                    self._runner = _SentenceTransformersRunner(
                        self.model, self.max_length, self.device
                    )
            return self._runner

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance of each text to ``query``, in [0, 1], in the order given."""
        if not texts:
            return []
        runner = self._loaded()
        # Similar lengths in a batch pad less: score in length order, answer in input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        scores = [0.0] * len(texts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            values = runner.relevance(query, [texts[i] for i in chunk], self.batch_size)
            for i, value in zip(chunk, values):
                scores[i] = value
        return scores

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """``results`` rescored by the cross-encoder, best first."""
        if not results:
            return []
        return rescored(results, self.score(query, [r.document.text for r in results]))


def _model_limit(config_file: Path | None) -> int | None:
    """The longest input the model's ``config.json`` allows (position embeddings)."""
    if config_file is None:
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    limit = config.get("max_position_embeddings")
    if not isinstance(limit, int):
        return None
    # RoBERTa-family models (bge-reranker-v2-m3 is XLM-RoBERTa) offset positions by 2.
    if str(config.get("model_type", "")).endswith("roberta"):
        limit -= 2
    return limit


class _OnnxRunner:
    def __init__(self, model: str, max_length: int) -> None:
        ort = require("onnxruntime", extra="local", feature="The onnxruntime cross-encoder")
        tokenizers = require("tokenizers", extra="local", feature="The onnxruntime cross-encoder")
        self.np = require("numpy", extra="local", feature="The onnxruntime cross-encoder")
        onnx_file = find_onnx(model)
        if onnx_file is None:
            raise RerankerError(
                f"No ONNX model in {model}: expected model.onnx or onnx/model.onnx (see "
                "kbcli.search.rerank.cross_encoder.export_onnx), "
                "or use backend sentence-transformers"
            )
        tokenizer_file = _beside(onnx_file, "tokenizer.json")
        if tokenizer_file is None:
            raise RerankerError(
                f"No tokenizer.json beside {onnx_file}: copy the model's tokenizer.json there"
            )
        limit = _model_limit(_beside(onnx_file, "config.json"))
        length = min(max_length, limit) if limit else max_length
        try:
            self.session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # noqa: BLE001 - a broken file is the user's to fix
            raise RerankerError(f"Cannot load cross-encoder {onnx_file}: {exc}") from None
        tokenizer.enable_truncation(length, strategy="longest_first")
        if tokenizer.padding is None:
            pad_token = next(
                (t for t in ("[PAD]", "<pad>") if tokenizer.token_to_id(t) is not None), None
            )
            pad_id = tokenizer.token_to_id(pad_token) if pad_token else 0
            tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token or "[PAD]")
        else:
            tokenizer.enable_padding(
                pad_id=tokenizer.padding["pad_id"], pad_token=tokenizer.padding["pad_token"]
            )
        self.tokenizer = tokenizer
        self.inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "logits" if "logits" in outputs else outputs[0]

    def relevance(self, query: str, texts: list[str], batch_size: int) -> list[float]:
        np = self.np
        encodings = self.tokenizer.encode_batch([(query, text) for text in texts])
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self.inputs}
        (logits,) = self.session.run([self.output], feed)
        return _relevance(logits)


class _SentenceTransformersRunner:
    def __init__(self, model: str, max_length: int, device: str) -> None:
        st = require(
            "sentence_transformers",
            extra="local-st",
            feature="The sentence-transformers cross-encoder",
        )
        import torch

        self.identity = torch.nn.Identity()
        # No "Loading weights" bar on stderr: kb's stderr is for messages (agents read it).
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        # transformers leaves these two unannotated: what they are, for the type checker
        disable: Callable[[], None] = hf_logging.disable_progress_bar
        enable: Callable[[], None] = hf_logging.enable_progress_bar
        disable()
        try:
            self.model = st.CrossEncoder(
                model, device=device, max_length=max_length, local_files_only=True
            )
        except Exception as exc:  # noqa: BLE001 - missing or broken model folder
            raise RerankerError(
                f"Cannot load cross-encoder {model!r} (nothing is downloaded: give a local "
                f"folder or a model already in the Hugging Face cache): {_one_line(exc)}"
            ) from None
        finally:
            if bars:
                enable()
        limit = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        if isinstance(limit, int) and max_length > limit:
            # sentence-transformers 5+ calls it max_seq_length; older versions max_length.
            name = "max_seq_length" if hasattr(self.model, "max_seq_length") else "max_length"
            setattr(self.model, name, limit)

    def relevance(self, query: str, texts: list[str], batch_size: int) -> list[float]:
        logits = self.model.predict(
            [(query, text) for text in texts],
            batch_size=batch_size,
            activation_fn=self.identity,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return _relevance(logits)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:199] + "…"


def export_onnx(model_dir: str | Path, output_dir: str | Path | None = None) -> Path:
    """Export a Hugging Face cross-encoder folder to ONNX for the onnxruntime route.

    Writes ``model.onnx`` (inputs ``input_ids``, ``attention_mask`` and, when the model uses
    them, ``token_type_ids``; output ``logits``; dynamic batch and length) plus
    ``tokenizer.json`` and ``config.json`` into ``output_dir`` (default ``model_dir/onnx``)
    and returns that folder. Needs PyTorch, transformers and ``onnx`` (``pip install onnx``);
    runs offline from the folder.
    """
    import shutil

    # torch is untyped here (an optional package): its module, models and tensors are Any
    torch: Any = require("torch", extra="local-st", feature="Exporting a cross-encoder to ONNX")
    transformers = require(
        "transformers", extra="local-st", feature="Exporting a cross-encoder to ONNX"
    )
    require("onnx", extra="test", feature="Exporting a cross-encoder to ONNX")
    source = Path(model_dir).expanduser()
    target = Path(output_dir).expanduser() if output_dir is not None else source / "onnx"
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(source), local_files_only=True
    ).eval()
    sample = tokenizer(["query"], ["a passage"], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: Any) -> Any:
            return self.inner(**dict(zip(names, tensors))).logits

    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes["logits"] = {0: "batch"}
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings are about other models' code
        torch.onnx.export(
            _Logits(model),
            tuple(sample[n] for n in names),
            str(target / "model.onnx"),
            input_names=names,
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    tokenizer.save_pretrained(str(target))
    if (source / "config.json").is_file() and source.resolve() != target.resolve():
        shutil.copy(source / "config.json", target / "config.json")
    return target
