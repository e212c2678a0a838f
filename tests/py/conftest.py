"""Fixtures for tests/py alone (the database fixtures, which tests/sql shares, are in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from api_server import api_server
from light_env import LightEnv, stop_builds
from scripted_openai import ScriptedOpenAI


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the light environments of the selected tests' modules (their
    LIGHT_ENV), so that pip runs while the tests before them do."""
    modules = {getattr(item, "module", None) for item in session.items}
    for module in sorted(modules, key=lambda m: getattr(m, "__name__", "")):
        env = getattr(module, "LIGHT_ENV", None)
        if isinstance(env, LightEnv):
            env.prebuild()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_builds()


@pytest.fixture(scope="module")
def light_api(app_dsn: str) -> Iterator[str]:
    """A `chronomem serve` for a module of tests that run the light client or an adapter
    in a light environment (tests/py/light_env.py): its base URL. One per module, not per
    session: other modules terminate the API's database connections on purpose
    (tests/py/test_api_limits.py), and a server that lived through that answers its next
    request with a 503."""
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture
def quiet(admin_dsn: str) -> Callable[[], None]:
    """Set other tests' pending jobs aside (done) and postpone their schedules, so that a
    test's worker runs its own jobs only; the function returned does it again."""

    def quiet() -> None:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                "update memory.jobs set status = 'done', locked_by = null, locked_until = null, "
                "finished_at = now() where status in ('queued', 'running', 'waiting')"
            )
            conn.execute("update memory.job_schedules set next_run_at = now() + interval '1 day'")

    quiet()
    return quiet


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAI]:
    """The scripted OpenAI-compatible server (scripted_openai.py), 384-dimensional
    embeddings."""
    with ScriptedOpenAI(dim=384).running() as server:
        yield server
