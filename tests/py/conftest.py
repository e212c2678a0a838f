"""Fixtures for tests/py alone (the database fixtures, which tests/sql shares, are in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import api_server


@pytest.fixture(scope="module")
def light_api(app_dsn: str) -> Iterator[str]:
    """A `chronomem serve` for a module of tests that run the light client or an adapter
    in a light environment (tests/py/light_env.py): its base URL. One per module, not per
    session: other modules terminate the API's database connections on purpose
    (tests/py/test_api_limits.py), and a server that lived through that answers its next
    request with a 503."""
    with api_server(app_dsn) as url:
        yield url
