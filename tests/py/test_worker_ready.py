"""The worker loads its embedding model when it starts, and says it is ready (its log and
its --ready-file) only once the model is loaded: before, no job runs and no ready file
exists; after, a new message is embedded without waiting for a model. The model's load
is held here by holding the export lock of an empty model cache (workers/onnx_embedding.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

pytest.importorskip("onnxruntime", reason="the local embedder needs the `embed` extra")

from workers.embedding import LOCAL_MODEL_NAME
from workers.onnx_embedding import OnnxMiniLM, _model_dir, default_cache_dir, export_path


def _jobs(admin_dsn: str, project: uuid.UUID) -> list[str]:
    with psycopg.connect(admin_dsn) as conn:
        rows = conn.execute(
            "select status from memory.jobs where project_id = %s and kind = 'embed'", (project,)
        ).fetchall()
    return [r[0] for r in rows]


def test_the_worker_is_ready_once_its_model_is_loaded(
    app_dsn: str, admin_dsn: str, tmp_path: Path
) -> None:
    OnnxMiniLM().load()  # the export every cache copies (made at install time)
    cache, ready = tmp_path / "cache", tmp_path / "ready.json"
    cache.mkdir()
    model = export_path(cache, _model_dir())
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        # Other tests' leftovers are not this worker's to run.
        conn.execute("update memory.jobs set status = 'done', finished_at = now() "
                     "where status in ('queued', 'running', 'waiting')")  # fmt: skip
        conn.execute("update memory.job_schedules set next_run_at = now() + interval '1 day'")
    with psycopg.connect(app_dsn) as conn:
        org = conn.execute("select memory.create_org('ready test')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        message = '[{"role": "user", "content": "hello"}]'
        conn.execute("select memory.ingest(%s, 's', %s)", (project, message))

    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOMEM_")}
    env |= {"CHRONOMEM_EMBEDDING_CACHE": str(cache), "CHRONOMEM_WORKER_POLL_INTERVAL": "0.2"}
    lock = (cache / ".export.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # the worker's model load waits on this
    proc = subprocess.Popen(
        [sys.executable, "-m", "chronomem", "worker", "--dsn", app_dsn, "--ready-file", str(ready)],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any('"worker configured"' in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.05)
        time.sleep(1.0)  # configured, loading its model: not ready, and running nothing
        assert not ready.exists()
        assert not any('"worker ready"' in line for line in lines)
        assert _jobs(admin_dsn, project) == ["queued"]

        partial = model.with_name("copy.partial")  # the export it waits for, whole
        shutil.copyfile(default_cache_dir() / model.name, partial)
        partial.replace(model)
        fcntl.flock(lock, fcntl.LOCK_UN)
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.05)
        state = json.loads(ready.read_text())
        assert state["embedding_model"] == LOCAL_MODEL_NAME
        assert state["embedding_model_load_s"] >= 1.0  # it waited for the model
        # The worker logs "worker ready" before it writes the file; stderr is read by
        # another thread, which may not have seen the line yet.
        while not any('"worker ready"' in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.05)
        loaded = next(i for i, line in enumerate(lines) if '"embedding model loaded"' in line)
        assert loaded < next(i for i, line in enumerate(lines) if '"worker ready"' in line)
        while _jobs(admin_dsn, project) != ["done"]:  # now it runs, the model in hand
            assert time.monotonic() < deadline, _jobs(admin_dsn, project)
            time.sleep(0.05)
    finally:
        lock.close()
        proc.terminate()
        proc.wait(30)
        reader.join()
    assert not ready.exists()  # a stopped worker is not ready
