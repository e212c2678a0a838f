"""Fixtures for tests/py alone (the database fixtures, which tests/sql shares, are in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import api_server
from light_env import LightEnv, stop_builds


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
