"""The API's database access: a pool of app-role connections, one transaction per
request, and that transaction scoped by the API key before anything else runs.

Connections are autocommit outside the explicit request transaction, so the org scope
that memory_http.authorize sets (transaction-local) ends with the request; the pool's reset
clears session-level scope too, in case anything ever set it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString
from uuid import UUID

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

_CLEAR_SCOPE = (
    "select set_config('chronomem.org_id', '', false), "
    "set_config('chronomem.api_key_id', '', false), "
    "set_config('chronomem.api_project_id', '', false), "
    "set_config('chronomem.api_permissions', '', false), "
    "set_config('chronomem.api_actor', '', false)"
)


# A callable is called once the key is authorized (work such as embedding a query is
# then never done for a caller without access), with the value of the call's
# `alongside` (None without one, or when it failed).
Params = Sequence[Any] | Callable[[Any], Sequence[Any]]

log = logging.getLogger("chronomem.api")

# What memory_http.authorize raises for the caller (a bad key, a project not found, a
# permission not granted, a call not listed): the answer, never retried.
_AUTHORIZATION_STATES = frozenset({"28000", "P0002", "CM403", "22023"})


@dataclass(frozen=True)
class Alongside:
    """A SQL expression the call's authorizing statement also returns, computed once the
    key is authorized (authorize_call is that statement's FROM item, which runs first),
    so it costs no round trip of its own; e.g. the text a search embeds. Its failure
    costs only its value: the call is made again without it."""

    expression: LiteralString
    params: Sequence[Any]


class _AlongsideFailed(Exception):
    pass


class OrgBusy(Exception):
    """The org already holds its share of the pool's connections (a 429 to that org)."""


class OrgShare:
    """At most `per_org` connections held at once by one org's requests, so that one
    org's many slow or large requests leave the rest of the pool to the others. A request
    over its org's share waits up to `timeout` for one of its org's connections to come
    back, then is refused (OrgBusy); other orgs' requests do not wait on it.

    The org of a key is learned on its first authorized call (the key id is in the token);
    until then the key is its own bucket."""

    _KNOWN_KEYS = 10_000

    def __init__(self, per_org: int, timeout: float) -> None:
        self.per_org = per_org
        self.timeout = timeout
        self._held: dict[str, int] = {}
        self._orgs: dict[str, str] = {}
        self._changed = threading.Condition()

    @staticmethod
    def key_of(token: str) -> str:
        parts = token.split("_")
        # A key, or a sign-in session (cms_<session id>_<secret>, thin_api/sessions.py).
        return parts[1] if len(parts) == 3 and parts[0] in ("cmk", "cms") else "malformed"

    def bucket(self, token: str) -> str:
        key = self.key_of(token)
        return self._orgs.get(key) or f"key:{key}"

    def knows(self, token: str) -> bool:
        return self.key_of(token) in self._orgs

    def learn(self, token: str, org: str | None) -> None:
        if not org:
            return
        if len(self._orgs) >= self._KNOWN_KEYS:
            self._orgs.clear()
        self._orgs[self.key_of(token)] = f"org:{org}"

    @contextmanager
    def hold(self, token: str) -> Iterator[None]:
        bucket = self.bucket(token)
        deadline = time.monotonic() + self.timeout
        with self._changed:
            while self._held.get(bucket, 0) >= self.per_org:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OrgBusy(bucket)
                self._changed.wait(left)
            self._held[bucket] = self._held.get(bucket, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                self._held[bucket] -= 1
                if not self._held[bucket]:
                    del self._held[bucket]
                self._changed.notify_all()


@dataclass(frozen=True)
class Access:
    """What a request needs: its bearer token and the project (None for org-level
    actions such as creating a project). own_project: the route names no project and
    the key's own is meant. Which permission the call needs is not said here: SQL says
    it, per function called (memory_http.call_permissions())."""

    token: str
    project: UUID | None = None
    own_project: bool = False


# The function a route's one SQL call calls: what memory_http.authorize_call looks up.
_CALLED = re.compile(r"\bselect\s+(?:\*\s+from\s+)?(memory(?:_http)?\.[a-z_]+)\s*\(")


def called_function(query: str) -> str:
    """The function `query` calls, as memory_http.call_permissions() names it."""
    match = _CALLED.search(query)
    if match is None:
        raise ValueError(f"no memory or memory_http function called in {query!r}")
    return match.group(1)


# The authorizing statement: memory_http.authorize_call as the FROM item (it runs before
# the select list), the org it scoped the transaction to, and an Alongside's value.
_AUTHORIZE = (
    "select current_setting('chronomem.org_id', true) as org, ({value}) as value"
    " from memory_http.authorize_call(%s::text, %s::text, %s::uuid, %s::boolean) as a"
)


class Database:
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        statement_timeout_ms: int = 30_000,
        org_connections: int | None = None,
    ) -> None:
        self.dsn = dsn
        self.share = OrgShare(org_connections or max_size, timeout)
        self._statement_timeout_ms = statement_timeout_ms
        self.pool: ConnectionPool[psycopg.Connection[DictRow]] = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=self._configure,
            reset=self._reset,
            name="chronomem-api",
        )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("select set_config('timezone', 'UTC', false)")
        conn.execute(
            "select set_config('statement_timeout', %s, false)",
            (str(self._statement_timeout_ms),),
        )
        conn.execute(
            "select set_config('application_name', 'chronomem-api', false)",
        )

    @staticmethod
    def _reset(conn: psycopg.Connection[Any]) -> None:
        conn.execute(_CLEAR_SCOPE)

    def open(self) -> None:
        # Do not wait: the API starts (and /healthz answers) while the database is
        # still coming up; /readyz tells when it is reachable.
        self.pool.open(wait=False)

    def close(self) -> None:
        self.pool.close()

    def call(
        self,
        access: Access,
        query: LiteralString,
        params: Params = (),
        *,
        many: bool = False,
        alongside: Alongside | None = None,
    ) -> Any:
        """One transaction: memory_http.authorize_call(token, the function `query`
        calls, project), which requires the permission SQL gives that call (and
        computes `alongside` in the same statement), then `query`.

        `params` may be a function of alongside's value, called once the key is
        authorized. Returns the first column of the first row (usually a jsonb answer),
        or with many=True every row as a dict."""
        with self.share.hold(access.token), self.pool.connection() as conn:
            if alongside is not None:
                try:
                    return self._call(conn, access, query, params, many, alongside)
                except _AlongsideFailed as failed:
                    log.warning(
                        "%s failed, calling without it: %s",
                        alongside.expression.partition("(")[0],
                        failed.__cause__,
                    )
            return self._call(conn, access, query, params, many, None)

    def _call(
        self,
        conn: psycopg.Connection[DictRow],
        access: Access,
        query: LiteralString,
        params: Params,
        many: bool,
        alongside: Alongside | None,
    ) -> Any:
        authorize = (access.token, called_function(query), access.project, access.own_project)
        with conn.transaction():
            if alongside is None:
                scope = conn.execute(_AUTHORIZE.format(value="null"), authorize).fetchone()
            else:
                try:
                    scope = conn.execute(
                        _AUTHORIZE.format(value=alongside.expression),
                        (*alongside.params, *authorize),
                    ).fetchone()
                except psycopg.Error as err:
                    if err.sqlstate in _AUTHORIZATION_STATES:
                        raise
                    raise _AlongsideFailed() from err
            assert scope is not None
            if not self.share.knows(access.token):
                self.share.learn(access.token, scope["org"])
            values = params(scope["value"]) if callable(params) else params
            cur = conn.execute(query, values)
            if many:
                return cur.fetchall()
            row = cur.fetchone()
            return None if row is None else next(iter(row.values()))

    def authenticate(self, token: str) -> bool:
        """Whether `token` is a valid, unrevoked API key (memory_http.authenticate; the
        transaction, and the org scope it sets, ends here)."""
        with self.share.hold(token), self.pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "select key_id from memory_http.authenticate(%s::text)", (token,)
            ).fetchone()
        return row is not None and row["key_id"] is not None

    def call_row(self, access: Access, query: LiteralString, params: Params = ()) -> dict[str, Any]:
        rows = self.call(access, query, params, many=True)
        if not rows:
            raise LookupError(f"no row from {query!r}")
        return dict(rows[0])

    def operator_rows(
        self, query: LiteralString, params: Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        """Operator reads with no org scope (metrics, readiness)."""
        with self.pool.connection() as conn:
            return [dict(r) for r in conn.execute(query, params).fetchall()]
