"""Fixtures for tests/py alone (the database fixtures, which tests/sql shares, are in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import api_server


@pytest.fixture(scope="session")
def light_api(app_dsn: str) -> Iterator[str]:
    """One `chronomem serve` for every test that runs the light client or an adapter in a
    light environment (tests/py/light_env.py): its base URL. Each such test makes its own
    tenants, so they share the server and nothing else."""
    with api_server(app_dsn) as url:
        yield url
