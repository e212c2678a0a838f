"""Bearer JWTs from an external identity provider (OIDC access tokens).

The process verifies a JWT: its signature against the provider's JWKS, its issuer, its
audience, its expiry. The database cannot check an RS256 or ES256 signature, so that
part is the process's; what the verified claims may do is the database's
(memory_http.open_oidc_session maps them to a project and permissions through
memory_internal.oidc_mappings, and refuses a token no mapping names;
docs/decisions/017-console-sign-in-and-jwt-trust.md).

Providers are the operator's: CHRONOMEM_OIDC_PROVIDERS is a JSON list of
{"issuer", "jwks_uri", "audience"} objects (optionally "min_refetch_seconds"). A token
of any other issuer is refused before a key is looked for. PyJWT (with cryptography)
verifies; we only choose the key: the JWKS is fetched on first use and again when a
token names a key id it lacks (a provider's key rotation), at most once per
min_refetch_seconds (default REFETCH_SECONDS) per provider, so tokens with invented key
ids cannot make the process hammer the provider.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

log = logging.getLogger("chronomem.api")

PROVIDERS_VARIABLE = "CHRONOMEM_OIDC_PROVIDERS"
# Asymmetric algorithms only: an HS* token would be checked with a public key as secret.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
REFETCH_SECONDS = 30.0
LEEWAY_SECONDS = 30
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")


class JwtRefused(Exception):
    """The token is not one this process accepts (the reason is logged, never shown)."""


def looks_like_jwt(token: str) -> bool:
    """A compact JWS (three base64url parts), as opposed to a cmk_ or cms_ token."""
    return _JWT.match(token) is not None


@dataclass
class Provider:
    issuer: str
    jwks_uri: str
    audience: str
    # The least time between two fetches of the JWKS (the rate limit on refetching).
    refetch_seconds: float = REFETCH_SECONDS
    fetches: int = 0
    _keys: dict[str, jwt.PyJWK] = field(default_factory=dict)
    _fetched: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def key(self, kid: str | None) -> jwt.PyJWK:
        with self._lock:
            found = self._find(kid)
            if found is None and time.monotonic() - self._fetched >= self.refetch_seconds:
                self._refresh()
                found = self._find(kid)
        if found is None:
            raise JwtRefused(f"no key {kid!r} in the JWKS of {self.issuer}")
        return found

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is not None:
            return self._keys.get(kid)
        # A token without a kid: only a JWKS of one key says which key it means.
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    def _refresh(self) -> None:
        self._fetched = time.monotonic()
        self.fetches += 1
        try:
            response = httpx.get(self.jwks_uri, timeout=5.0)
            response.raise_for_status()
            keys = jwt.PyJWKSet.from_dict(response.json()).keys
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as err:
            log.warning("JWKS of %s not fetched from %s: %s", self.issuer, self.jwks_uri, err)
            return  # keep the keys we had
        self._keys = {k.key_id or "": k for k in keys}


class JwtVerifier:
    def __init__(self, providers: list[Provider]) -> None:
        self.providers = {p.issuer: p for p in providers}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> JwtVerifier:
        raw = (env if env is not None else os.environ).get(PROVIDERS_VARIABLE, "").strip()
        if not raw:
            return cls([])
        try:
            items = json.loads(raw)
            providers = [
                Provider(
                    str(i["issuer"]),
                    str(i["jwks_uri"]),
                    str(i["audience"]),
                    float(i.get("min_refetch_seconds", REFETCH_SECONDS)),
                )
                for i in items
            ]
        except (ValueError, TypeError, KeyError) as err:
            raise ValueError(
                f"{PROVIDERS_VARIABLE} must be a JSON list of "
                '{"issuer", "jwks_uri", "audience"} objects'
            ) from err
        return cls(providers)

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of a token signed by a configured provider's key, for its audience,
        not expired; JwtRefused otherwise."""
        try:
            header = jwt.get_unverified_header(token)
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError as err:
            raise JwtRefused(f"not a JWT: {err}") from err
        provider = self.providers.get(issuer) if isinstance(issuer, str) else None
        if provider is None:
            raise JwtRefused(f"issuer {issuer!r} is not configured")
        kid = header.get("kid")
        key = provider.key(kid if isinstance(kid, str) else None)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[a for a in ALGORITHMS if a == key.algorithm_name] or ALGORITHMS,
                audience=provider.audience,
                issuer=provider.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "sub", "aud"]},
            )
        except jwt.PyJWTError as err:
            raise JwtRefused(f"refused: {err}") from err
        return claims


class BearerSessions:
    """Verified bearer JWTs and the session each was exchanged for
    (memory_http.open_oidc_session), kept until the token expires, so a client sending
    the same JWT on every request costs one exchange."""

    _MAX = 10_000

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> str | None:
        with self._lock:
            hit = self._sessions.get(self._key(token))
        if hit is None or hit[1] <= time.time():
            return None
        return hit[0]

    def put(self, token: str, session: str, expires: float) -> None:
        with self._lock:
            if len(self._sessions) >= self._MAX:
                now = time.time()
                self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
                if len(self._sessions) >= self._MAX:
                    self._sessions.clear()
            self._sessions[self._key(token)] = (session, expires)
