"""What every benchmark shares: the throwaway database, timing, run metadata, result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from chronomem import embedded
from chronomem.bootstrap import bootstrap, set_login_passwords
from chronomem.dsn import app_dsn, with_params
from chronomem.migrate import migrate
from chronomem.paths import REPO_ROOT
from chronomem.settings import APP_ROLE, Settings

Conn = psycopg.Connection[Any]
T = TypeVar("T")
SCRATCH = "bench_scratch"  # the baselines' tables, in the benchmark's own database


@dataclass(frozen=True)
class BenchDatabase:
    name: str  # chronomem_bench_<benchmark>: one per benchmark, never the application's
    admin: str  # superuser, on the bench database
    owner: str  # chronomem_owner: migrations, scratch tables, VACUUM
    app: str  # chronomem_app: what the API and the worker log in as
    server: str  # "embedded" or "database_url"


@contextmanager
def _server(database_url: str | None) -> Iterator[tuple[str, str]]:
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
    benchmark: str, database_url: str | None, keep: bool = False
) -> Iterator[BenchDatabase]:
    """A fresh `chronomem_bench_<benchmark>`, set up as `chronomem up` does, dropped after
    (with a --database-url server and `keep`, left in place to inspect)."""
    settings = Settings.from_env()
    name = f"chronomem_bench_{benchmark}"
    with _server(database_url) as (superuser, kind):
        _drop_database(superuser, name)
        owner = bootstrap(superuser, name, settings.owner_password)
        try:
            migrate(owner)
            set_login_passwords(owner, {APP_ROLE: settings.app_password})
            yield BenchDatabase(
                name, with_params(superuser, dbname=name), owner,
                app_dsn(owner, settings.app_password), kind,
            )  # fmt: skip
        finally:
            if not (keep and kind == "database_url"):
                _drop_database(superuser, name)


# --------------------------------------------------------------------------- timing


def backend_cpu_ns(pid: int) -> int | None:
    """Nanoseconds a local server backend has run on a CPU (/proc/<pid>/schedstat); None
    when the server is not local. Waiting for a core is not in it."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def timed(conn: Conn, fn: Callable[[], Any]) -> tuple[float, float | None, Any]:
    """Wall seconds, backend CPU seconds (None if unreadable) and the answer of fn()."""
    pid = conn.info.backend_pid
    c0, t0 = backend_cpu_ns(pid), perf_counter()
    answer = fn()
    wall = perf_counter() - t0
    c1 = backend_cpu_ns(pid)
    return wall, None if c0 is None or c1 is None else (c1 - c0) / 1e9, answer


@dataclass
class Samples:
    """Per-call wall and backend CPU seconds of one method."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float | None) -> None:
        self.wall.append(wall)
        if cpu is not None:
            self.cpu.append(cpu)

    def extend(self, other: Samples) -> None:
        self.wall += other.wall
        self.cpu += other.cpu

    def report(self) -> dict[str, Any]:
        return {
            "n": len(self.wall),
            "latency_ms": latency_ms(self.wall),
            "cpu_ms": latency_ms(self.cpu) if len(self.cpu) == len(self.wall) else None,
        }


def concurrently(
    app: str,
    n: int,
    warm: Callable[[Conn, int], None],
    body: Callable[[Conn, int], T],
    after_warmup: Callable[[], None] | None = None,
) -> tuple[float, list[T]]:
    """n threads, one connection each: each runs warm(conn, i), then all start body(conn, i)
    together. Returns the wall seconds until the last is done and what each returned."""
    barrier = threading.Barrier(n + 1, action=after_warmup)

    def thread(i: int) -> T:
        with psycopg.connect(app, autocommit=True) as conn:
            conn.execute("set statement_timeout = '120s'")  # a stuck lock fails, never hangs
            try:
                warm(conn, i)
                barrier.wait()
            except BaseException:
                barrier.abort()  # the others fail too; the future re-raises
                raise
            return body(conn, i)

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(thread, i) for i in range(n)]
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        t0 = perf_counter()
        results = [f.result() for f in futures]
        return perf_counter() - t0, results


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95 (inclusive quantiles), mean and max, in ms."""
    ms = sorted(s * 1000 for s in seconds) or [0.0]
    cuts = statistics.quantiles(ms * 2 if len(ms) == 1 else ms, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 2),
        "p95": round(cuts[94], 2),
        "mean": round(statistics.fmean(ms), 2),
        "max": round(ms[-1], 2),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


def alternating(rounds: int, a: str, b: str) -> list[str]:
    """A B, then B A, ...: a machine getting busier or quieter skews neither method."""
    return [m for r in range(rounds) for m in ((a, b) if r % 2 == 0 else (b, a))]


# --------------------------------------------------------------------------- run metadata

# Reference work for one backend, timed at the start and the end of a run: on a shared
# machine the same code has run 2x slower one hour than the next, so a run's absolute
# figures compare with another run's only next to these.
SPEED_SQL = {
    "executor": "select sum(x) from (select generate_series(1, 1000000) as x) s",
    "hash": "select count(*) from (select x % 100000 from "
    "(select generate_series(1, 400000) as x) s group by 1) t",
}


def speed_reference(dsn: str, repeats: int = 5) -> dict[str, Any]:
    """Median wall and backend CPU ms of each SPEED_SQL statement (no JIT, in memory)."""
    out: dict[str, Any] = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("set jit = off")
        conn.execute("set work_mem = '64MB'")
        for name, query in SPEED_SQL.items():
            s = Samples()
            for _ in range(repeats):
                s.add(*timed(conn, partial(conn.execute, query))[:2])
            out[name] = {
                "wall_ms": round(statistics.median(s.wall) * 1000, 1),
                "cpu_ms": round(statistics.median(s.cpu) * 1000, 1) if s.cpu else None,
            }
    return out


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def git_state() -> dict[str, Any]:
    """The commit a result was measured at, and whether the tree had changes."""
    status = _git("status", "--porcelain")
    return {
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "dirty": None if status is None else bool(status),
    }


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def server_info(dsn: str) -> dict[str, Any]:
    names = ["shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size", "jit"]
    with psycopg.connect(dsn) as conn:
        version = scalar(conn, "select current_setting('server_version')")
        found = conn.execute(
            "select name, setting || coalesce(' ' || unit, '') from pg_settings "
            "where name = any(%s)",
            [names],
        ).fetchall()
    return {"version": version, "settings": dict(found)}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Run:
    """One benchmark run: the metadata every result file carries (commit, machine, the
    reference work and load average at the start and the end), then JSON and a PNG."""

    def __init__(self, name: str, args: Any, db: BenchDatabase) -> None:
        self.name, self.args, self.db = name, args, db
        self.started = perf_counter()
        self.git = git_state()
        self.load_before = _load()
        self.speed_before = speed_reference(db.admin)

    def finish(
        self, result: dict[str, Any], draw: Callable[[Any, dict[str, Any]], None] | None = None
    ) -> Path:
        speed_after = speed_reference(self.db.admin)
        settings = {k: v for k, v in vars(self.args).items() if k not in ("out", "database_url")}
        record = {
            "benchmark": self.name,
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "git": self.git,
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()},
            "machine": {
                "cores": os.cpu_count(),
                "cpu": next(
                    (
                        line.split(":", 1)[1].strip()
                        for line in _cpuinfo()
                        if line.startswith("model name")
                    ),
                    platform.processor(),
                ),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "server": self.db.server,
                "postgres": server_info(self.db.admin),
                "load_average_1_5_15_min": [self.load_before, _load()],
                "speed_reference": {"before": self.speed_before, "after": speed_after},
            },
            **result,
            "runtime_s": round(perf_counter() - self.started, 1),
        }
        out: Path = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.name}.json"
        path.write_text(json.dumps(record, indent=2, default=str) + "\n")
        if draw is not None:
            _chart(out / f"{self.name}.png", draw, record)
        ms = ", ".join(
            f"{n} {self.speed_before[n]['wall_ms']:.0f}/{speed_after[n]['wall_ms']:.0f}"
            for n in SPEED_SQL
        )
        print(f"  reference work (ms, start/end): {ms}", flush=True)
        return path


def _chart(path: Path, draw: Callable[[Any, dict[str, Any]], None], record: dict[str, Any]) -> None:
    try:
        import matplotlib
    except ImportError:
        print("  matplotlib not installed (pip install -e '.[bench]'): no chart", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    draw(plt, record)
    fig = plt.gcf()
    m = record["machine"]
    fig.suptitle(
        f"{record['benchmark']} at {record['git']['commit'][:7]}, PostgreSQL "
        f"{m['postgres']['version']}, {m['cores']} cores",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pair_bars(
    ax: Any, labels: list[str], ours: list[float], base: list[float], names: tuple[str, str]
) -> None:
    """Paired bars (ours, then the baseline) per label, each pair topped by ours / base."""
    width, xs = 0.38, list(range(len(labels)))
    a = ax.bar([x - width / 2 for x in xs], ours, width, label=names[0])
    b = ax.bar([x + width / 2 for x in xs], base, width, label=names[1])
    ax.bar_label(a, fmt="%.1f", padding=2, fontsize=7)
    ax.bar_label(b, fmt="%.1f", padding=2, fontsize=7)
    top = max(ours + base) or 1.0
    for x, o, s in zip(xs, ours, base, strict=True):
        ax.annotate(f"x{o / s:.2f}" if s else "", (x, max(o, s) + top * 0.12), ha="center",
                    fontsize=9, fontweight="bold")  # fmt: skip
    ax.set_ylim(0, top * 1.35)
    ax.set_xticks(xs, labels, fontsize=8)
    ax.legend(fontsize=7, loc="upper right")


# --------------------------------------------------------------------------- tenants


@dataclass(frozen=True)
class Tenant:
    org: uuid.UUID
    project: uuid.UUID


def scalar(conn: Conn, query: Any, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fetch(conn: Conn, query: Any, params: Sequence[Any] = ()) -> Any:
    return conn.execute(query, params).fetchone()


def new_org(app: str, name: str) -> uuid.UUID:
    with psycopg.connect(app) as conn:
        org: uuid.UUID = scalar(conn, "select memory.create_org(%s)", (name,))
    return org


def new_project(app: str, org: uuid.UUID, name: str, predicates: Sequence[str] = ()) -> Tenant:
    """A new project of org (as the app role), with `name:cardinality` predicates declared."""
    with psycopg.connect(app) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        project: uuid.UUID = scalar(conn, "select memory.create_project(%s, %s)", (org, name))
        for p in predicates:
            conn.execute("select memory.declare_predicate(%s, %s, %s)", (project, *p.split(":")))
    return Tenant(org, project)


def vacuum(owner: str, tables: str) -> None:
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f"vacuum (analyze) {tables}")


def scratch_copies(owner: str, grants: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """bench_scratch.<copy> as `like <original> including all` for each copy: (original,
    privileges granted to the app role). Returns whether each has its original's indexes."""
    out = {}
    with psycopg.connect(owner) as conn:
        conn.execute(f"create schema {SCRATCH}")
        conn.execute(f"grant usage on schema {SCRATCH} to {APP_ROLE}")
        for copy, (original, privileges) in grants.items():
            conn.execute(f"create table {SCRATCH}.{copy} (like {original} including all)")
            conn.execute(f"grant {privileges} on {SCRATCH}.{copy} to {APP_ROLE}")
            same = _indexes(conn, original) == _indexes(conn, f"{SCRATCH}.{copy}")
            out[copy] = {"like": original, "same_indexes": same}
    return out


def drop_scratch(owner: str) -> None:
    with psycopg.connect(owner) as conn:
        conn.execute(f"drop schema if exists {SCRATCH} cascade")


def _indexes(conn: Conn, table: str) -> list[str]:
    schema, name = table.split(".")
    rows = conn.execute(
        "select indexname, indexdef from pg_indexes where schemaname = %s and tablename = %s",
        (schema, name),
    ).fetchall()
    return sorted(d.replace(f" {i} ", " ").replace(f" ON {table} ", " ON ") for i, d in rows)
