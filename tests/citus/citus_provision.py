"""pytest plugin (tests/citus/run.sh loads it with `-p citus_provision`): the session's
test database is made on every node of the Citus cluster DATABASE_URL names, migrated
and then distributed with `chronomem distribute`, so the project's own suites run
against the distributed schema through the coordinator.

It replaces `testdb.provision` before tests/conftest.py imports it; everything else
(the fixtures, the roles, the pgTAP runner) is the default suite's, but for one
rewrite of the pgTAP files: their `set local role R` / `reset role` become
set_config('role', ...). Citus carries a SET LOCAL to every worker connection of the
transaction (citus.propagate_set_commands = 'local', which the org scope needs),
also to the owner's connections that SECURITY DEFINER functions open, where the
owner may not take the app's role; set_config() changes the role on the coordinator
alone, and Citus then opens the workers' connections as that role.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "citus"))
sys.path.insert(0, str(TESTS))

import re  # noqa: E402

import nodes  # noqa: E402
import psycopg  # noqa: E402
import testdb  # noqa: E402
from pytest_pgtap.plugin.sql_files import PgTapItem, Runner, report_tap  # noqa: E402

from chronomem.bootstrap import bootstrap, set_login_passwords  # noqa: E402
from chronomem.distribute import distribute  # noqa: E402
from chronomem.dsn import role_dsn  # noqa: E402
from chronomem.migrate import migrate  # noqa: E402
from chronomem.settings import ANALYST_ROLE, APP_ROLE, OWNER_ROLE  # noqa: E402


def provision_distributed(server_admin: str) -> testdb.TestDatabase:
    """testdb.provision on a Citus coordinator: the database on every node, bootstrap,
    pgTAP, migrate, distribute."""
    if not os.environ.get("DATABASE_URL"):
        raise RuntimeError("citus_provision needs DATABASE_URL: the coordinator's superuser")
    admin = nodes.create_database(server_admin, testdb.TEST_DB)
    owner = bootstrap(server_admin, testdb.TEST_DB)
    nodes.hand_to_owner(admin, testdb.TEST_DB, OWNER_ROLE)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("create extension if not exists pgtap")
    migrate(owner)
    outcome = distribute(owner)
    print(f"\ncitus: {outcome.summary()}", flush=True)
    set_login_passwords(admin, {APP_ROLE: None, ANALYST_ROLE: None})
    return testdb.TestDatabase(
        admin=admin,
        owner=owner,
        app=role_dsn(owner, APP_ROLE, None),
        analyst=role_dsn(owner, ANALYST_ROLE, None),
    )


_SET_ROLE = re.compile(r"^\s*set\s+local\s+role\s+(\w+)\s*;", re.I | re.M)
_RESET_ROLE = re.compile(r"^\s*reset\s+role\s*;", re.I | re.M)


def coordinator_roles(script: str) -> str:
    """A pgTAP file with its role switches made on the coordinator only."""
    script = _SET_ROLE.sub(
        r"do $role$ begin perform set_config('role', '\1', true); end $role$;", script
    )
    return _RESET_ROLE.sub(
        "do $role$ begin perform set_config('role', 'none', true); end $role$;", script
    )


def _runtest(item: PgTapItem) -> None:
    runner = item._request.getfixturevalue("_pgtap_runner")
    assert isinstance(runner, Runner)
    report_tap(item, runner.run(coordinator_roles(item.path.read_text())), item.path.name)


testdb.provision = provision_distributed
PgTapItem.runtest = _runtest  # type: ignore[method-assign]
