"""The local embedder's two runtimes: an ONNX model run by onnxruntime (:class:`OnnxModel`),
its session's threads fitted to the CPUs this process can get, and a sentence-transformers
model (:class:`SentenceTransformerModel`). :func:`kbcli.embedders.local.load_model` chooses and
keeps one per model."""

from __future__ import annotations

import functools
import mmap
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kbcli.embedders.onnx_graph import gather_first
from kbcli.errors import EmbedderError, require

if TYPE_CHECKING:  # numpy is imported when a model loads
    import numpy as np
    from numpy.typing import NDArray

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


class Encoded(Protocol):
    """One tokenised text: a ``tokenizers.Encoding``, or a stand-in with the same two fields."""

    @property
    def ids(self) -> list[int]: ...

    @property
    def type_ids(self) -> list[int]: ...


class _NodeArg(Protocol):
    """An input or output of an onnxruntime session (onnxruntime ships no types)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[int | str | None]: ...


class _Session(Protocol):
    """What kbcli calls on an ``onnxruntime.InferenceSession``."""

    def get_inputs(self) -> list[_NodeArg]: ...

    def get_outputs(self) -> list[_NodeArg]: ...

    def run(
        self, output_names: list[str], input_feed: dict[str, NDArray[np.int64]]
    ) -> list[NDArray[np.float32]]: ...


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
        self._sessions: dict[int, _Session] = {}
        self._query: _Session | None = None
        self._singles = 0
        self._fitted = (time.monotonic(), time.process_time())
        self._inputs: set[str] | None = None
        self._output = ""
        self._dimension = dimension

    def _load(self, options: Any) -> _Session:  # options: an onnxruntime.SessionOptions
        """A session over the model, its word-embedding lookup rewritten where it can be."""
        rewritten = None
        try:
            with open(self._onnx_path, "rb") as fh:  # mapped, not read: one copy fewer
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    rewritten = gather_first(mapped)
        except (OSError, ValueError):  # unreadable or empty: onnxruntime says what is wrong
            pass
        model: str | bytes = rewritten if rewritten is not None else str(self._onnx_path)
        session: _Session = self._ort.InferenceSession(model, options, providers=self._providers)
        if self._inputs is None:
            self._inputs = {i.name for i in session.get_inputs()}
            outputs = session.get_outputs()
            names = [o.name for o in outputs]
            self._output = "sentence_embedding" if "sentence_embedding" in names else names[0]
            shape = outputs[names.index(self._output)].shape
            if self._dimension is None and shape and isinstance(shape[-1], int):
                self._dimension = shape[-1]
        return session

    def _options(self, threads: int, optimise: bool) -> Any:  # onnxruntime has no types
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

    def _session(self, threads: int) -> _Session:
        session = self._sessions.get(threads)
        if session is None:
            session = self._sessions[threads] = self._load(self._options(threads, True))
            self._query = None  # the batch session serves single texts from now on
        return session

    @property
    def session(self) -> _Session:
        """The batch session of the current thread count (built now if needed)."""
        return self._session(self.threads)

    def query_session(self) -> _Session:
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

    def encode(self, texts: list[str], batch_size: int = 32) -> NDArray[np.float32]:
        """Normalised float32 vectors, one row per text, in the order of ``texts``."""
        import numpy as np  # already loaded with the model; imported here for its types

        if len(texts) == 1 and not self._sessions and self._singles < QUERY_RUNS:
            self._singles += 1
            session = self.query_session()
        else:
            self.refit_threads()
            session = self.session
        encodings = self._encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        out: NDArray[np.float32] | None = None
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

    def _run(
        self, encodings: Sequence[Encoded], width: int, session: _Session | None = None
    ) -> NDArray[np.float32]:
        import numpy as np  # already loaded with the model; imported here for its types

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
        unit: NDArray[np.float32] = (out / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit


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

            disable: Callable[[], None] = hf_logging.disable_progress_bar
            disable()
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

    def encode(self, texts: list[str], batch_size: int = 32) -> NDArray[np.float32]:
        """Normalised float32 vectors, one row per text."""
        vectors: NDArray[np.float32] = self.model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors
