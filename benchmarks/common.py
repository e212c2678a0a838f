"""What every benchmark shares: a throwaway database, run metadata, result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg
from psycopg import sql

from chronomem import embedded
from chronomem.bootstrap import bootstrap, set_login_passwords
from chronomem.dsn import app_dsn, with_params
from chronomem.migrate import migrate
from chronomem.paths import REPO_ROOT
from chronomem.settings import APP_ROLE, Settings

# Never the application's database: benchmarks create, fill and drop their own, one
# per benchmark, so that one run never drops another's kept database (a `search
# --reuse` load of 1M facts takes most of an hour to make).
BENCH_DB_PREFIX = "chronomem_bench_"


def bench_db_name(benchmark: str) -> str:
    """The database a benchmark creates on the server: `chronomem_bench_<benchmark>`."""
    return BENCH_DB_PREFIX + benchmark


@dataclass(frozen=True)
class BenchDatabase:
    name: str  # chronomem_bench_<benchmark>
    admin: str  # superuser, on the bench database
    owner: str  # chronomem_owner: migrations, scratch tables, VACUUM
    app: str  # chronomem_app: what the API and the worker log in as
    server: str  # "embedded" or "database_url"


@contextmanager
def _server(database_url: str | None) -> Iterator[tuple[str, str]]:
    """A superuser DSN: the given server, else an embedded one in a temp dir, given a
    share of memory as `chronomem up` gives a new one (embedded.size_memory)."""
    if database_url:
        yield database_url, "database_url"
        return
    with tempfile.TemporaryDirectory(prefix="chronomem-bench-", ignore_cleanup_errors=True) as tmp:
        server = embedded.start(Path(tmp) / "pg", cleanup_mode="delete", sized=True)
        try:
            yield embedded.superuser_dsn(server), "embedded"
        finally:
            server.cleanup()


def _drop_database(superuser_dsn: str, name: str) -> None:
    with psycopg.connect(superuser_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


@contextmanager
def bench_database(
    benchmark: str, database_url: str | None, keep: bool = False, reuse: bool = False
) -> Iterator[BenchDatabase]:
    """A freshly bootstrapped and migrated `chronomem_bench_<benchmark>`, dropped afterwards
    (unless `keep`, with a --database-url server: then it stays for EXPLAIN and psql until
    the next run of that benchmark replaces it).  `reuse` (with --database-url) keeps it
    before and after: an existing one is migrated, not replaced, and the benchmark decides
    what to reuse.

    Set up exactly as `chronomem up` does (bootstrap as superuser, migrate as owner).
    Passwords, where the server asks for them, come from CHRONOMEM_OWNER_PASSWORD and
    CHRONOMEM_APP_PASSWORD like everywhere else.
    """
    settings = Settings.from_env()
    reuse = reuse and database_url is not None
    name = bench_db_name(benchmark)
    with _server(database_url) as (superuser, kind):
        if not reuse:
            _drop_database(superuser, name)  # a leftover from an interrupted run
        owner = bootstrap(superuser, name, settings.owner_password)
        try:
            migrate(owner)
            set_login_passwords(owner, {APP_ROLE: settings.app_password})
            yield BenchDatabase(
                name=name,
                admin=with_params(superuser, dbname=name),
                owner=owner,
                app=app_dsn(owner, settings.app_password),
                server=kind,
            )
        finally:
            if not ((keep or reuse) and kind == "database_url"):
                _drop_database(superuser, name)


def server_info(dsn: str) -> dict[str, Any]:
    """Version and the settings that move write throughput the most."""
    names = ("shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size", "jit")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select version(), current_setting('server_version')").fetchone()
        assert row is not None
        found = conn.execute(
            "select name, setting || coalesce(' ' || unit, '') from pg_settings "
            "where name = any(%s)",
            [list(names)],
        ).fetchall()
    return {"version": row[1], "version_full": row[0], "settings": dict(found)}


# Reference work for one backend, timed at the start and the end of a run: on a shared
# machine the same code has run 2x slower one hour than the next, in backend CPU time as
# well as in wall time, so a run's figures compare with another run's only next to these.
SPEED_SQL = {
    # Executor and expression evaluation, what a query spends between its page reads.
    "executor": "select sum(x) from (select generate_series(1, 1000000) as x) s",
    # A hash table of 100,000 groups, larger than a core's caches: memory latency, where
    # HNSW element loads and buffer lookups spend much of a search's CPU time.
    "hash": "select count(*) from (select x % 100000 from "
    "(select generate_series(1, 400000) as x) s group by 1) t",
}


def speed_reference(dsn: str, repeats: int = 5) -> dict[str, Any]:
    """Median wall and backend CPU milliseconds of each SPEED_SQL statement (no JIT, no
    spill to disk)."""
    out: dict[str, Any] = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("set jit = off")  # its compile time is not what this measures
        conn.execute("set work_mem = '64MB'")  # the hash table stays in memory
        pid = conn.info.backend_pid
        for name, query in SPEED_SQL.items():
            wall: list[float] = []
            cpu: list[float] = []
            for _ in range(repeats):
                cpu0, t0 = backend_cpu_ns(pid), perf_counter()
                conn.execute(query).fetchone()
                wall.append((perf_counter() - t0) * 1000)
                cpu1 = backend_cpu_ns(pid)
                if cpu0 is not None and cpu1 is not None:
                    cpu.append((cpu1 - cpu0) / 1e6)
            out[name] = {
                "wall_ms": round(statistics.median(wall), 1),
                "cpu_ms": round(statistics.median(cpu), 1) if cpu else None,
            }
    return out


def speed_line(before: dict[str, Any], after: dict[str, Any]) -> str:
    """One printed line: the reference work's CPU (else wall) ms at the start and the end."""

    def ms(x: dict[str, Any]) -> float:
        return float(x["cpu_ms"] if x["cpu_ms"] is not None else x["wall_ms"])

    return "reference work (ms, start/end): " + ", ".join(
        f"{name} {ms(before[name]):.0f}/{ms(after[name]):.0f}" for name in SPEED_SQL
    )


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def git_info() -> dict[str, Any]:
    """HEAD and whether the tree differs from it (then HEAD is not what was measured)."""
    status = _git("status", "--porcelain")
    return {
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "dirty": None if status is None else bool(status),
    }


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95 (inclusive quantiles), mean and max of per-batch latencies, in ms."""
    ms = sorted(s * 1000 for s in seconds)
    if len(ms) == 1:
        ms = ms * 2  # quantiles() needs two points
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 2),
        "p95": round(cuts[94], 2),
        "mean": round(statistics.fmean(ms), 2),
        "max": round(ms[-1], 2),
    }


def backend_cpu_ns(pid: int) -> int | None:
    """Nanoseconds a local server backend has run on a CPU (/proc/<pid>/schedstat, the
    scheduler's own count, not clock ticks); None when it is not a local process this
    one can see. A backend's CPU time is what other work on the machine inflates
    least: waiting for a core is not in it."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------- tenants


@dataclass(frozen=True)
class Tenant:
    org: uuid.UUID
    project: uuid.UUID


def scalar(
    conn: psycopg.Connection[Any], query: Any, params: Sequence[Any] | Mapping[str, Any] = ()
) -> Any:
    """The first column of a query's one row."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def new_org(app_dsn: str, name: str) -> uuid.UUID:
    """A new org, created as the app role."""
    with psycopg.connect(app_dsn) as conn:
        org: uuid.UUID = scalar(conn, "select memory.create_org(%s)", (name,))
    return org


def new_project(app_dsn: str, org: uuid.UUID, name: str) -> Tenant:
    """A new project of org, created as the app role."""
    with psycopg.connect(app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        project: uuid.UUID = scalar(conn, "select memory.create_project(%s, %s)", (org, name))
    return Tenant(org, project)


def normalized_indexes(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """Index definitions with index and table names blanked, to compare two tables."""
    schema, name = table.split(".")
    rows = conn.execute(
        "select indexname, indexdef from pg_indexes where schemaname = %s and tablename = %s",
        (schema, name),
    ).fetchall()
    return sorted(
        d.replace(f" {i} ", " <index> ").replace(f" ON {table} ", " ON <table> ") for i, d in rows
    )


def ratio_bars(
    ax: Any,
    labels: list[str],
    ours: list[float],
    base: list[float],
    ratios: list[float],
    *,
    fmt: str = "%.0f",
    fontsize: int = 7,
    headroom: float = 1.45,
) -> tuple[Any, Any]:
    """Paired bars (ours, then the baseline) per label on a matplotlib axis, each pair
    topped by its ratio; returns the two bar containers (for a legend)."""
    width = 0.38
    xs = list(range(len(labels)))
    a = ax.bar([x - width / 2 for x in xs], ours, width)
    b = ax.bar([x + width / 2 for x in xs], base, width)
    ax.bar_label(a, fmt=fmt, padding=2, fontsize=fontsize)
    ax.bar_label(b, fmt=fmt, padding=2, fontsize=fontsize)
    top = max(ours + base)
    for x, r, o, s in zip(xs, ratios, ours, base, strict=True):
        ax.annotate(
            f"ratio {r:.2f}",
            (x, max(o, s) + top * (headroom - 1) * 0.27),
            ha="center",
            fontsize=fontsize + 2,
            fontweight="bold",
        )
    ax.set_ylim(0, top * headroom)
    ax.set_xticks(xs, labels, fontsize=fontsize + 1)
    return a, b
