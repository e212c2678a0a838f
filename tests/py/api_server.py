"""Shared by the test_api*.py modules: a real `chronomem serve` (uvicorn) process on
loopback against the test database, and tenants with API keys made through SQL as
the app role."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from chronomem.client import Client

ALL_PERMISSIONS = [
    "project:read",
    "project:write",
    "project:manage",
    "configuration:read",
    "configuration:write",
    "members:read",
    "members:write",
]


# The process id of each running server, by base URL (to read its memory use).
SERVER_PIDS: dict[str, int] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def api_server(app_dsn: str, **env: str) -> Iterator[str]:
    """Start `chronomem serve` on a free loopback port; yield its base URL. `env` sets
    the server's settings (e.g. CHRONOMEM_API_MAX_BODY_BYTES="1048576")."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="chronomem-api-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chronomem",
                "serve",
                "--dsn",
                app_dsn,
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            env={
                **os.environ,
                "CHRONOMEM_API_QUERY_EMBEDDINGS": "off",
                "CHRONOMEM_LOG_LEVEL": "warning",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"API exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"API did not start:\n{log.read_text()}")
            time.sleep(0.1)
        SERVER_PIDS[base] = proc.pid
        yield base
    finally:
        SERVER_PIDS.pop(base, None)
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        text = log.read_text(errors="replace")
        log.unlink(missing_ok=True)
        # The server must never have failed unexpectedly (an unhandled error or a
        # response it could not serialise is logged as an error).
        assert "unhandled error" not in text and "Traceback" not in text, text


@dataclass
class Tenant:
    """An org with a project and an API key holding every permission."""

    app_dsn: str
    org: uuid.UUID
    project: uuid.UUID
    key_id: uuid.UUID
    token: str

    def client(self, base: str, token: str | None = None) -> Client:
        return Client(base, token or self.token)

    def key(self, permissions: list[str], project: uuid.UUID | None = None) -> str:
        """Another key of this org (for `project`, default the tenant's)."""
        with psycopg.connect(self.app_dsn) as conn:
            conn.execute("select memory.use_org(%s)", (self.org,))
            row = conn.execute(
                "select token from memory_http.create_api_key(%s, 'test key', %s)",
                (project or self.project, permissions),
            ).fetchone()
        assert row is not None
        token: str = row[0]
        return token

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """One transaction as the app role in this org's scope."""
        with psycopg.connect(self.app_dsn, row_factory=dict_row) as conn:
            conn.execute("select memory.use_org(%s)", (self.org,))
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def make_tenant(app_dsn: str, name: str) -> Tenant:
    with psycopg.connect(app_dsn) as conn:
        row = conn.execute(
            "select memory_http.bootstrap_api_key(null, %s, 'main', 'root', %s)",
            (name, ALL_PERMISSIONS),
        ).fetchone()
    assert row is not None
    r = row[0]
    return Tenant(
        app_dsn,
        uuid.UUID(r["org_id"]),
        uuid.UUID(r["project_id"]),
        uuid.UUID(r["key_id"]),
        r["token"],
    )
