"""Schemathesis against the live server: every operation of /openapi.json, fetched from
a real `chronomem serve` process on loopback and called with a valid API key, must
never answer 5xx and must always answer what its schema documents (status and body).

One test per operation (the list comes from the app's own OpenAPI document at
collection time; the schema exercised is the one the live server serves). Bounded:
a few positive and a few negative examples per operation, explicit examples and
generation only (no shrinking unless something fails). Most project ids are swapped
for the tenant's own project so the cases reach the SQL behind each route rather
than stopping at 404.

(schemathesis.pytest.from_fixture fails under pytest 9 -- it reads the private
`Function._nodeid` -- hence the operations' own strategies under hypothesis here.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from api_server import Tenant, api_server, make_tenant
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from thin_api.app import create_app

MAX_EXAMPLES = 6  # per operation and generation mode
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def _operations() -> list[tuple[str, str, bool]]:
    """(method, path, whether it takes any input that could be made invalid)."""
    document: dict[str, Any] = create_app("postgresql://unused").openapi()
    return [
        (method.upper(), path, bool(op.get("parameters") or op.get("requestBody")))
        for path, item in sorted(document["paths"].items())
        for method, op in item.items()
        if method in HTTP_METHODS
    ]


@pytest.fixture(scope="module")
def live(app_dsn: str) -> Iterator[tuple[Tenant, schemathesis.BaseSchema]]:
    with api_server(app_dsn) as base:
        tenant = make_tenant(app_dsn, "schemathesis")
        yield tenant, schemathesis.openapi.from_url(f"{base}/openapi.json", timeout=10)


@pytest.mark.parametrize(("method", "path", "has_input"), _operations())
def test_live_operation_conforms(
    method: str, path: str, has_input: bool, live: tuple[Tenant, schemathesis.BaseSchema]
) -> None:
    tenant, schema = live
    operation = schema[path][method]
    headers = {"Authorization": f"Bearer {tenant.token}"}

    def check(case: schemathesis.Case) -> None:
        params = case.path_parameters
        # Not for deleting the project itself (test_api.py covers it): the operations
        # after it would all meet a deleted project.
        deletes_project = (method.upper(), path) == ("DELETE", "/v1/projects/{project_id}")
        if params and "project_id" in params and not deletes_project:
            # Three cases in four in the tenant's project (decided by the generated id).
            generated = str(params["project_id"])
            if not generated or generated[0] in "0123456789ab":
                params["project_id"] = str(tenant.project)
        case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

    # Negative cases need an input to break (/healthz has none).
    modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if has_input else [])
    for mode in modes:
        run = settings(
            max_examples=MAX_EXAMPLES,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,
        )(given(case=operation.as_strategy(generation_mode=mode))(check))
        run()


def _paths() -> dict[str, set[str]]:
    document: dict[str, Any] = create_app("postgresql://unused").openapi()
    return {
        path: {m.upper() for m in item if m in HTTP_METHODS}
        for path, item in sorted(document["paths"].items())
    }


@pytest.mark.parametrize(("path", "declared"), sorted(_paths().items()))
def test_undeclared_methods_are_405_with_allow(
    path: str, declared: set[str], live: tuple[Tenant, schemathesis.BaseSchema]
) -> None:
    """Every method the document does not declare for a path is a 405 whose Allow lists
    exactly the declared ones (and HEAD with GET), as RFC 9110 asks."""
    tenant, schema = live
    base = str(schema.get_base_url()).rstrip("/")
    url = base + path.format_map(_PathValues(tenant))
    headers = {"Authorization": f"Bearer {tenant.token}"}
    expected = declared | ({"HEAD"} if "GET" in declared else set())
    for method in sorted({m.upper() for m in HTTP_METHODS} - declared):
        r = httpx.request(method, url, headers=headers, timeout=30)
        assert r.status_code == 405, (method, path, r.text)
        allowed = {m.strip() for m in r.headers.get("Allow", "").split(",") if m.strip()}
        assert allowed == expected, (method, path, r.headers)


class _PathValues(dict[str, str]):
    def __init__(self, tenant: Tenant) -> None:
        super().__init__(project_id=str(tenant.project))

    def __missing__(self, key: str) -> str:
        return "x"
