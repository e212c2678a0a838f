"""`chronomem` command line: start, migrate and inspect a Chronomem database."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from chronomem import embedded
from chronomem.bootstrap import BootstrapError, bootstrap, owner_dsn, set_login_passwords
from chronomem.dsn import analyst_dsn, app_dsn
from chronomem.migrate import MigrationError, current_revision, function_files, migrate
from chronomem.paths import DEMO_SQL
from chronomem.settings import APP_ROLE, DATABASE_NAME, Settings, SettingsError

WORKER_STOP_TIMEOUT = 60.0  # seconds `up` gives its worker to finish the jobs in hand


def _admin_dsn(settings: Settings) -> str:
    """Superuser DSN: DATABASE_URL, else the embedded server (started if needed)."""
    if settings.database_url:
        return settings.database_url
    return embedded.superuser_dsn(embedded.start(settings.pgdata))


def _owner_dsn(settings: Settings) -> str:
    return owner_dsn(_admin_dsn(settings), DATABASE_NAME, settings.owner_password)


def _role_dsns(owner: str, settings: Settings) -> dict[str, str]:
    return {
        "owner": owner,
        "app": app_dsn(owner, settings.app_password),
        "analyst": analyst_dsn(owner),
    }


def _setup(settings: Settings) -> str:
    """Bootstrap (superuser) and migrate (owner); returns the owner DSN."""
    owner = bootstrap(_admin_dsn(settings), DATABASE_NAME, settings.owner_password)
    migrate(owner)
    set_login_passwords(owner, {APP_ROLE: settings.app_password})
    print(
        f"migrated: revision {current_revision(owner)}, "
        f"{len(function_files())} function file(s) applied",
        flush=True,
    )
    return owner


def run_demo(owner: str, settings: Settings) -> None:
    """Run chronomem/demo.sql through psql, echoing each query before its result.

    It runs as the app role, the role the API and workers use, so the demo shows
    what a client can do (and that it can do it without owning anything)."""
    psql = embedded.psql_path()
    args = ["-X", "-v", "ON_ERROR_STOP=1", "--echo-queries", "-P", "pager=off"]
    dsn = app_dsn(owner, settings.app_password)
    subprocess.run([str(psql), *args, "-f", str(DEMO_SQL), "-d", dsn], check=True)


def _wait_for_interrupt(worker: subprocess.Popen[bytes] | None = None) -> None:
    # SIGTERM (e.g. from a service manager) stops as cleanly as Ctrl-C; SIGINT is set
    # explicitly because a shell without job control starts `... &` with it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        while True:
            time.sleep(1)
            if worker is not None and worker.poll() is not None:
                print(f"worker exited with code {worker.returncode}", file=sys.stderr, flush=True)
                worker = None
    except KeyboardInterrupt:
        pass


def _start_worker(app: str) -> subprocess.Popen[bytes]:
    """The worker runs as a child process, not a thread: it has its own signal handling
    (graceful stop), its memory (the local embedding model) and a crash of it leaves
    the database and the rest of `up` running. Its own session, so the terminal's
    Ctrl-C reaches only `up`, which then stops it with one SIGTERM."""
    return subprocess.Popen(
        [sys.executable, "-m", "chronomem", "worker", "--dsn", app],
        start_new_session=True,
        env={**os.environ, "CHRONOMEM_WORKER_PARENT_PID": str(os.getpid())},
    )


def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    worker.terminate()
    try:
        worker.wait(WORKER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()  # its jobs go back to the queue when their lease expires
        worker.wait()


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    owner = _setup(settings)
    run_demo(owner, settings)
    print()
    for role, dsn in _role_dsns(owner, settings).items():
        print(f"{role:8} {dsn}")
    embedded_server = settings.database_url is None
    if args.no_serve:
        if embedded_server:
            print(f"embedded PostgreSQL keeps running in {settings.pgdata} (`chronomem down`)")
        return 0
    # Placeholder: a later issue starts the HTTP API here.
    worker = _start_worker(app_dsn(owner, settings.app_password))
    print("up (worker started); Ctrl-C stops", flush=True)
    try:
        _wait_for_interrupt(worker)
    finally:
        _stop_worker(worker)
    if embedded_server:
        embedded.stop(settings.pgdata)
        print("embedded PostgreSQL stopped")
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    _setup(settings)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    run_demo(_owner_dsn(settings), settings)
    return 0


def cmd_psql(args: argparse.Namespace, settings: Settings) -> int:
    psql = str(embedded.psql_path())
    os.execv(psql, [psql, "-d", _owner_dsn(settings), *args.psql_args])
    return 0  # not reached


def cmd_dsn(args: argparse.Namespace, settings: Settings) -> int:
    print(_role_dsns(_owner_dsn(settings), settings)[args.role])
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the model clients are not needed by the other commands.
    from workers.logs import setup_logging
    from workers.main import WorkerConfigError, run

    setup_logging(os.environ.get("CHRONOMEM_LOG_LEVEL") or "INFO")
    dsn = args.dsn or app_dsn(_owner_dsn(settings), settings.app_password)
    try:
        return run(dsn, settings, drain=args.drain)
    except WorkerConfigError as err:
        print(f"chronomem: worker not started: {err}", file=sys.stderr)
        return 2


def cmd_reembed(args: argparse.Namespace, settings: Settings) -> int:
    owner = args.dsn or _owner_dsn(settings)
    with psycopg.connect(owner, autocommit=True) as conn:
        row = conn.execute("select memory.reembed(%s, %s)", (args.dim, args.model)).fetchone()
    assert row is not None
    print(json.dumps(row[0]))
    print(
        f"embedding columns are now vector({args.dim}), all vectors cleared and embed jobs "
        f"queued; run workers whose embedding model gives {args.dim} dimensions"
        + (f" (CHRONOMEM_EMBEDDING_MODEL={args.model})" if args.model else "")
    )
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        print("DATABASE_URL is set: nothing embedded to stop", file=sys.stderr)
        return 1
    stopped = embedded.stop(settings.pgdata)
    print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronomem", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        help="where the embedded server keeps its data (default: CHRONOMEM_DATA_DIR, "
        "else the user data dir); ignored when DATABASE_URL is set",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser(
        "up", parents=[common], help="start, bootstrap, migrate, show the demo, serve"
    )
    up.add_argument("--no-serve", action="store_true", help="exit after the demo")
    up.set_defaults(func=cmd_up)
    sub.add_parser(
        "migrate", parents=[common], help="bootstrap and migrate (idempotent)"
    ).set_defaults(func=cmd_migrate)
    sub.add_parser("demo", parents=[common], help="run the psql demo").set_defaults(func=cmd_demo)
    sub.add_parser(
        "psql", parents=[common], help="psql as the owner role (other arguments go to psql)"
    ).set_defaults(func=cmd_psql)
    dsn = sub.add_parser("dsn", parents=[common], help="print a role's DSN")
    dsn.add_argument("--role", choices=["owner", "app", "analyst"], default="owner")
    dsn.set_defaults(func=cmd_dsn)
    sub.add_parser("down", parents=[common], help="stop the embedded server").set_defaults(
        func=cmd_down
    )
    worker = sub.add_parser(
        "worker", parents=[common], help="run background jobs (extraction, embeddings, upkeep)"
    )
    worker.add_argument(
        "--dsn", help="connect with this DSN (an app-role one) instead of the configured server"
    )
    worker.add_argument("--drain", action="store_true", help="exit once no job is ready")
    worker.set_defaults(func=cmd_worker)
    reembed = sub.add_parser(
        "reembed",
        parents=[common],
        help="switch to another embedding dimension/model: clears vectors, queues re-embedding",
    )
    reembed.add_argument("--dim", type=int, required=True, help="the new model's dimension")
    reembed.add_argument("--model", help="the new model's name, recorded for the worker's check")
    reembed.add_argument("--dsn", help="an owner-role DSN instead of the configured server")
    reembed.set_defaults(func=cmd_reembed)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Unknown arguments are psql's (e.g. `chronomem psql -c 'select 1'`); argparse's
    # REMAINDER would not take ones that start with a dash.
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "psql":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.psql_args = extra
    try:
        settings = Settings.from_env()
        if args.data_dir is not None:
            settings = dataclasses.replace(settings, data_dir=args.data_dir.expanduser())
        return int(args.func(args, settings))
    except (BootstrapError, MigrationError, SettingsError, psycopg.Error, FileNotFoundError) as err:
        print(f"chronomem: error: {err}", file=sys.stderr)
    except subprocess.CalledProcessError as err:
        print(f"chronomem: error: {Path(err.cmd[0]).name} exited {err.returncode}", file=sys.stderr)
    return 1
