"""`chronomem` command line: start, migrate and inspect a Chronomem database."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from chronomem import embedded
from chronomem.bootstrap import BootstrapError, bootstrap, owner_dsn, set_login_passwords
from chronomem.distribute import DistributeError, distribute
from chronomem.dsn import analyst_dsn, app_dsn
from chronomem.migrate import (
    MigrationError,
    current_revision,
    function_files,
    head_revision,
    migrate,
)
from chronomem.paths import DEMO_SQL
from chronomem.settings import APP_ROLE, DATABASE_NAME, Settings, SettingsError

WORKER_STOP_TIMEOUT = 60.0  # seconds `up` gives its worker to finish the jobs in hand
WORKER_READY_TIMEOUT = 300.0  # seconds `up` waits for its worker's model to load


def _admin_dsn(settings: Settings) -> str:
    """Superuser DSN: DATABASE_URL, else the embedded server (started if needed)."""
    if settings.database_url:
        return settings.database_url
    return embedded.superuser_dsn(embedded.start(settings.pgdata, sized=True))


def _owner_dsn(settings: Settings) -> str:
    return owner_dsn(_admin_dsn(settings), DATABASE_NAME, settings.owner_password)


def _app_dsn(args: argparse.Namespace, settings: Settings, variable: str | None = None) -> str:
    """The app role's DSN: --dsn, else the environment variable given, else the
    configured server's."""
    return (
        args.dsn
        or (os.environ.get(variable) if variable else None)
        or app_dsn(_owner_dsn(settings), settings.app_password)
    )


def _owner_value(
    args: argparse.Namespace, settings: Settings, query: str, params: tuple[Any, ...]
) -> Any:
    """One owner-role call (--dsn, else the configured server's owner) and its value."""
    with psycopg.connect(args.dsn or _owner_dsn(settings), autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


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


def _wait_for_interrupt(children: dict[str, subprocess.Popen[bytes]] | None = None) -> None:
    # SIGTERM (e.g. from a service manager) stops as cleanly as Ctrl-C; SIGINT is set
    # explicitly because a shell without job control starts `... &` with it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    running = dict(children or {})
    try:
        while True:
            time.sleep(1)
            for name, child in list(running.items()):
                if child.poll() is not None:
                    print(
                        f"{name} exited with code {child.returncode}", file=sys.stderr, flush=True
                    )
                    del running[name]
    except KeyboardInterrupt:
        pass


def _start_worker(app: str, ready_file: Path) -> subprocess.Popen[bytes]:
    """The worker runs as a child process, not a thread: it has its own signal handling
    (graceful stop), its memory (the local embedding model) and a crash of it leaves
    the database and the rest of `up` running. Its own session, so the terminal's
    Ctrl-C reaches only `up`, which then stops it with one SIGTERM."""
    command = [sys.executable, "-m", "chronomem", "worker", "--dsn", app]
    return subprocess.Popen(
        [*command, "--ready-file", str(ready_file)],
        start_new_session=True,
        env={**os.environ, "CHRONOMEM_WORKER_PARENT_PID": str(os.getpid())},
    )


def _worker_readiness(worker: subprocess.Popen[bytes], ready_file: Path) -> str:
    """Wait for the worker's ready file (its embedding model loaded; the first run exports
    the local model, some seconds) and say what it holds; or why it is not ready."""
    deadline = time.monotonic() + WORKER_READY_TIMEOUT
    while not ready_file.exists():
        if worker.poll() is not None:
            return f"worker exited with code {worker.returncode} (its log says why)"
        if time.monotonic() > deadline:
            return f"worker not ready after {WORKER_READY_TIMEOUT:.0f} s (its log says why)"
        time.sleep(0.1)
    state = json.loads(ready_file.read_text())
    loaded = (
        f", embedding model {state['embedding_model']} loaded in "
        f"{state['embedding_model_load_s']:.1f} s"
        if state.get("embedding_model")
        else ""
    )
    return f"worker ready{loaded}"


def _start_api(app: str, host: str, port: int) -> subprocess.Popen[bytes]:
    """The HTTP API, a child process like the worker (see _start_worker)."""
    address = ("--host", host, "--port", str(port))
    return subprocess.Popen(
        [sys.executable, "-m", "chronomem", "serve", "--dsn", app, *address],
        start_new_session=True,
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
    if embedded_server:
        with psycopg.connect(owner) as conn:
            memory = conn.execute(
                "select string_agg(name || ' ' || current_setting(name), ', ' order by name)"
                " from unnest(%s::text[]) name",
                ([f.name for f in dataclasses.fields(embedded.MemorySettings)],),
            ).fetchone()
        print(f"embedded PostgreSQL in {settings.pgdata}: {memory[0] if memory else ''}")
        if hint := embedded.unsized_hint(_admin_dsn(settings)):
            print(hint)
    if args.no_serve:
        if embedded_server:
            print(f"embedded PostgreSQL keeps running in {settings.pgdata} (`chronomem down`)")
        return 0
    app = app_dsn(owner, settings.app_password)
    host = args.host or settings.api.host
    port = args.port or settings.api.port
    ready_file = Path(tempfile.mkdtemp(prefix="chronomem-up-")) / "worker-ready.json"
    worker = _start_worker(app, ready_file)
    api = _start_api(app, host, port)
    try:
        print(f"up: {_worker_readiness(worker, ready_file)}", flush=True)
        print(
            f"up: HTTP API on http://{host}:{port} (OpenAPI at /docs); "
            "`chronomem create-key --org NAME --project NAME` makes an API key; Ctrl-C stops",
            flush=True,
        )
        _wait_for_interrupt({"worker": worker, "api": api})
    except KeyboardInterrupt:  # while waiting for the worker to be ready
        pass
    finally:
        _stop_worker(api)
        _stop_worker(worker)
        shutil.rmtree(ready_file.parent, ignore_errors=True)
    if embedded_server:
        embedded.stop(settings.pgdata)
        print("embedded PostgreSQL stopped")
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    _setup(settings)
    return 0


def cmd_distribute(args: argparse.Namespace, settings: Settings) -> int:
    outcome = distribute(args.dsn or _owner_dsn(settings), args.shard_count)
    print(outcome.summary())
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
    dsn = _app_dsn(args, settings)
    try:
        return run(dsn, settings, drain=args.drain, ready_file=args.ready_file)
    except WorkerConfigError as err:
        print(f"chronomem: worker not started: {err}", file=sys.stderr)
        return 2


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn  # imported here: only this command needs the web stack

    from thin_api.app import DSN_VARIABLE

    dsn = _app_dsn(args, settings, DSN_VARIABLE)
    os.environ[DSN_VARIABLE] = dsn
    uvicorn.run(
        "thin_api.app:app",
        host=args.host or settings.api.host,
        port=args.port or settings.api.port,
        log_level=(os.environ.get("CHRONOMEM_LOG_LEVEL") or "info").lower(),
        proxy_headers=False,
    )
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """MCP over stdio with the API key in CHRONOMEM_API_KEY (stdout is the protocol's:
    everything else goes to stderr)."""
    from thin_api.app import DSN_VARIABLE
    from thin_api.embedding import QueryEmbedder
    from thin_api.mcp_server import KEY_VARIABLE, run_stdio

    token = os.environ.get(KEY_VARIABLE, "").strip()
    if not token:
        print(f"chronomem: {KEY_VARIABLE} is not set (an API key)", file=sys.stderr)
        return 2
    dsn = _app_dsn(args, settings, DSN_VARIABLE)
    embedder = QueryEmbedder(settings.embedding, enabled=settings.api.query_embeddings)
    try:
        run_stdio(dsn, token, embedder)
    except PermissionError as err:
        print(f"chronomem: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_create_key(args: argparse.Namespace, settings: Settings) -> int:
    """Bootstrap: an org (new by name, or existing by id), a project (found or created
    by name) and an API key for it; the token is printed once."""
    try:
        org_id: uuid.UUID | None = uuid.UUID(args.org)
    except ValueError:
        org_id = None
    dsn = _app_dsn(args, settings)
    permissions = args.permissions.split(",") if args.permissions else None
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select memory_http.bootstrap_api_key(%s, %s, %s, %s, coalesce(%s::text[], "
            "memory_http.permissions()))",
            (org_id, None if org_id else args.org, args.project, args.name, permissions),
        ).fetchone()
    assert row is not None
    result = row[0]
    new = {True: " (new)", False: ""}
    # The details go to stderr, the token alone to stdout: TOKEN=$(chronomem create-key ...)
    print(f"org      {result['org_id']}{new[result['org_created']]}", file=sys.stderr)
    print(f"project  {result['project_id']}{new[result['project_created']]}", file=sys.stderr)
    print(f"key      {result['key_id']}  {','.join(result['permissions'])}", file=sys.stderr)
    print("token (shown once, store it now):", file=sys.stderr)
    print(result["token"], flush=True)
    return 0


def cmd_reembed(args: argparse.Namespace, settings: Settings) -> int:
    result = _owner_value(args, settings, "select memory.reembed(%s, %s)", (args.dim, args.model))
    print(json.dumps(result))
    print(
        f"embedding columns are now vector({args.dim}), all vectors cleared and embed jobs "
        f"queued; run workers whose embedding model gives {args.dim} dimensions"
        + (f" (CHRONOMEM_EMBEDDING_MODEL={args.model})" if args.model else "")
    )
    return 0


def status_report(owner: str) -> dict[str, Any]:
    """What an operator asks first: the server, the schema's revision against the code's,
    the embedding columns, and the queue (every org's) per kind."""
    with psycopg.connect(owner, autocommit=True) as conn:
        server = conn.execute("select current_setting('server_version')").fetchone()
        embedding = conn.execute("select memory.embedding_dim(), memory.embedding_model()")
        dim, model = embedding.fetchone() or (None, None)
        queue = conn.execute(
            "select kind, queued, running, waiting, dead, done, "
            "extract(epoch from oldest_queued_age)::integer from memory.queue_stats()"
        ).fetchall()
    revision, head = current_revision(owner), head_revision()
    return {
        "postgresql": server[0] if server else None,
        "revision": revision,
        "head": head,
        "migrated": revision == head,
        "embedding": {"dim": dim, "model": model},
        "jobs": {
            kind: {"queued": q, "running": r, "waiting": w, "dead": d, "done": n,
                   "oldest_queued_s": age}
            for kind, q, r, w, d, n, age in queue
        },
    }  # fmt: skip


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    report = status_report(args.dsn or _owner_dsn(settings))
    if args.json:
        print(json.dumps(report))
        return 0 if report["migrated"] else 1
    behind = f"behind the code's {report['head']}: run `chronomem migrate`"
    emb = report["embedding"]
    print(f"PostgreSQL {report['postgresql']}")
    print(f"schema revision {report['revision']} ({'current' if report['migrated'] else behind})")
    print(f"embeddings vector({emb['dim']})" + (f", model {emb['model']}" if emb["model"] else ""))
    columns = ("queued", "running", "waiting", "dead", "done")
    print(f"{'jobs':16}" + "".join(f"{c:>9}" for c in columns) + "  oldest queued")
    for kind, j in report["jobs"].items():
        age = "-" if j["oldest_queued_s"] is None else f"{j['oldest_queued_s']} s"
        print(f"{kind:16}" + "".join(f"{j[c]:>9}" for c in columns) + f"  {age}")
    return 0 if report["migrated"] else 1


def cmd_retry_jobs(args: argparse.Namespace, settings: Settings) -> int:
    queued = _owner_value(
        args, settings, "select memory.retry_dead_jobs(%s, %s)", (args.kind, args.project)
    )
    print(f"{queued} dead job(s) queued again")
    return 0


class ProjectNotFound(Exception):
    """No org the owner can list holds the project."""


def subject_export(owner: str, project: uuid.UUID, subject: str) -> Any:
    """memory.export_subject as the owner, in the project's org. Row-level security hides
    a project until its org is in scope, and the owner lists every org only while
    unscoped (sql/0006), so the orgs are listed first, then tried one at a time in one
    read-only transaction."""
    with psycopg.connect(owner) as conn:
        conn.read_only = True
        orgs = [row[0] for row in conn.execute("select org_id from memory.orgs order by org_id")]
        for org in orgs:
            conn.execute("select memory.use_org(%s)", (org,))
            found = conn.execute(
                "select exists (select from memory.projects where project_id = %s)", (project,)
            ).fetchone()
            if found and found[0]:
                row = conn.execute(
                    "select memory.export_subject(%s, %s)", (project, subject)
                ).fetchone()
                assert row is not None
                return row[0]
    raise ProjectNotFound(f"project {project} not found in any org")


def cmd_export_subject(args: argparse.Namespace, settings: Settings) -> int:
    try:
        document = subject_export(args.dsn or _owner_dsn(settings), args.project, args.subject)
    except ProjectNotFound as err:
        print(f"chronomem: error: {err}", file=sys.stderr)
        return 1
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"{args.out} written", file=sys.stderr)
    return 0


def cmd_schema_dump(args: argparse.Namespace, settings: Settings) -> int:
    from chronomem import schema_dump

    if args.check:
        stale = schema_dump.stale_generated_files()
        for path in stale:
            print(f"{path} is stale: run `chronomem schema-dump`", file=sys.stderr)
        if not stale:
            print("schema/current.sql and docs/sql-reference.md match a migration from empty")
        return 1 if stale else 0
    for path in schema_dump.write_generated_files():
        print(f"{path} written")
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        print("DATABASE_URL is set: nothing embedded to stop", file=sys.stderr)
        return 1
    stopped = embedded.stop(settings.pgdata)
    print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
    return 0


def _dsn_option(parser: argparse.ArgumentParser, role: str) -> None:
    parser.add_argument("--dsn", help=f"an {role}-role DSN instead of the configured server")


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
    _api_address_arguments(up)
    up.set_defaults(func=cmd_up)
    sub.add_parser(
        "migrate", parents=[common], help="bootstrap and migrate (idempotent)"
    ).set_defaults(func=cmd_migrate)
    distribute_parser = sub.add_parser(
        "distribute",
        parents=[common],
        help="on a Citus coordinator: distribute every table by org_id (idempotent)",
    )
    distribute_parser.add_argument(
        "--shard-count", type=int, help="shards per table (default: citus.shard_count)"
    )
    _dsn_option(distribute_parser, "owner")
    distribute_parser.set_defaults(func=cmd_distribute)
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
    _dsn_option(worker, "app")
    worker.add_argument("--drain", action="store_true", help="exit once no job is ready")
    worker.add_argument(
        "--ready-file", type=Path, metavar="PATH",
        help="write this JSON file once the worker runs with its embedding model loaded "
        "(removed when it stops)",
    )  # fmt: skip
    worker.set_defaults(func=cmd_worker)
    serve = sub.add_parser("serve", parents=[common], help="run the HTTP API (uvicorn)")
    _dsn_option(serve, "app")
    _api_address_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    mcp = sub.add_parser(
        "mcp", parents=[common], help="serve MCP over stdio (API key in CHRONOMEM_API_KEY)"
    )
    _dsn_option(mcp, "app")
    mcp.set_defaults(func=cmd_mcp)
    key = sub.add_parser(
        "create-key",
        parents=[common],
        help="create an API key (and its org and project if needed); prints the token once",
    )
    key.add_argument("--org", required=True, help="an existing org's id, or a name for a new org")
    key.add_argument("--project", required=True, help="project name (created if missing)")
    key.add_argument("--name", default="bootstrap", help="the key's name (default: bootstrap)")
    key.add_argument(
        "--permissions",
        help="comma-separated permissions (default: all; project:manage covers the org)",
    )
    _dsn_option(key, "app")
    key.set_defaults(func=cmd_create_key)
    reembed = sub.add_parser(
        "reembed",
        parents=[common],
        help="switch to another embedding dimension/model: clears vectors, queues re-embedding",
    )
    reembed.add_argument("--dim", type=int, required=True, help="the new model's dimension")
    reembed.add_argument("--model", help="the new model's name, recorded for the worker's check")
    _dsn_option(reembed, "owner")
    reembed.set_defaults(func=cmd_reembed)
    status = sub.add_parser(
        "status",
        parents=[common],
        help="schema revision, embedding columns and job queue (exit 1: not migrated)",
    )
    status.add_argument("--json", action="store_true", help="one JSON object instead of text")
    _dsn_option(status, "owner")
    status.set_defaults(func=cmd_status)
    retry = sub.add_parser(
        "retry-jobs",
        parents=[common],
        help="queue dead jobs again (every org's), once what made them fail is fixed",
    )
    retry.add_argument(
        "--kind", help="only jobs of this kind (enrich, embed, deliver_webhook, ...)"
    )
    retry.add_argument("--project", help="only jobs of this project (its id)")
    _dsn_option(retry, "owner")
    retry.set_defaults(func=cmd_retry_jobs)
    export = sub.add_parser(
        "export-subject",
        parents=[common],
        help="everything a project holds about one subject, as JSON (an access request)",
    )
    export.add_argument("--project", required=True, type=uuid.UUID, help="the project's id")
    export.add_argument("--subject", required=True, help="the subject's name or an alias")
    export.add_argument("--out", type=Path, help="write the JSON to this file, not stdout")
    _dsn_option(export, "owner")
    export.set_defaults(func=cmd_export_subject)
    schema = sub.add_parser(
        "schema-dump",
        parents=[common],
        help="regenerate schema/current.sql and docs/sql-reference.md (a throwaway server)",
    )
    schema.add_argument("--check", action="store_true", help="exit 1 if a committed file is stale")
    schema.set_defaults(func=cmd_schema_dump)
    return parser


def _api_address_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="HTTP API address (default: CHRONOMEM_API_HOST, 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="HTTP API port (default: CHRONOMEM_API_PORT, 8765)"
    )


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
    except (
        BootstrapError,
        DistributeError,
        MigrationError,
        SettingsError,
        psycopg.Error,
        FileNotFoundError,
    ) as err:
        print(f"chronomem: error: {err}", file=sys.stderr)
    except subprocess.CalledProcessError as err:
        print(f"chronomem: error: {Path(err.cmd[0]).name} exited {err.returncode}", file=sys.stderr)
    return 1
