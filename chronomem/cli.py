"""`chronomem` command line: start, migrate and inspect a Chronomem database."""

from __future__ import annotations

import argparse
import dataclasses
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
from chronomem.settings import APP_ROLE, DATABASE_NAME, Settings


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


def _wait_for_interrupt() -> None:
    # SIGTERM (e.g. from a service manager) stops as cleanly as Ctrl-C; SIGINT is set
    # explicitly because a shell without job control starts `... &` with it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


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
    # Placeholder: later issues start the HTTP API and the worker here.
    print("up; Ctrl-C stops", flush=True)
    _wait_for_interrupt()
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Unknown arguments are psql's (e.g. `chronomem psql -c 'select 1'`); argparse's
    # REMAINDER would not take ones that start with a dash.
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "psql":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.psql_args = extra
    settings = Settings.from_env()
    if args.data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=args.data_dir.expanduser())
    try:
        return int(args.func(args, settings))
    except (BootstrapError, MigrationError, psycopg.Error, FileNotFoundError) as err:
        print(f"chronomem: error: {err}", file=sys.stderr)
    except subprocess.CalledProcessError as err:
        print(f"chronomem: error: {Path(err.cmd[0]).name} exited {err.returncode}", file=sys.stderr)
    return 1
