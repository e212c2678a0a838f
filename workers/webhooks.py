"""deliver_webhook jobs: POST one event to one endpoint, signed the Svix way.

The event (id, type, body) was fixed in SQL when the writing transaction queued it
(functions/087_webhooks.sql); here, per attempt:

- the endpoint's URL and current secret come from memory.webhook_target (a rotated
  secret signs every attempt from then on; a disabled or deleted endpoint gets nothing);
- headers: ``webhook-id`` (the event id, the same on every attempt), ``webhook-timestamp``
  (a fresh unix time per attempt) and ``webhook-signature: v1,<base64 HMAC-SHA256 of
  "{id}.{timestamp}.{body}">``, keyed with the base64-decoded part of ``whsec_...``,
  computed by the ``svix`` library's own signer;
- the body is the stored text, byte for byte;
- every attempt is logged through memory.log_webhook_attempt in the attempt's
  transaction: a 2xx completes the job; a 5xx, 408, 429, timeout or connection error
  is retried with the queue's backoff; any other status (4xx, a redirect) and a
  destination that is not a public address are not retried.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
from svix.webhooks import Webhook

from workers.errors import PartialFailure, PermanentError
from workers.jobs import Handler, Job

USER_AGENT = "chronomem-webhooks/0.1"
# 4xx that say "later", not "never".
RETRYABLE_4XX = frozenset({408, 429})


@dataclass(frozen=True)
class WebhookSettings:
    timeout: float = 10.0
    """Seconds for one attempt (connect, send, wait for the answer)."""
    allow_private: bool = False
    """Deliver to loopback, private, link-local and other non-public addresses too
    (a local receiver, tests). Off by default: endpoint URLs come from tenants, and the
    worker must not become their way into the operator's network."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        env = os.environ if env is None else env
        timeout = float(env.get("CHRONOMEM_WEBHOOK_TIMEOUT") or cls.timeout)
        if not 0.1 <= timeout <= 120:
            raise ValueError("CHRONOMEM_WEBHOOK_TIMEOUT must be between 0.1 and 120 seconds")
        allow = (env.get("CHRONOMEM_WEBHOOK_ALLOW_PRIVATE") or "").strip().lower()
        return cls(timeout=timeout, allow_private=allow in ("1", "true", "yes", "on"))


class DeliveryFailed(PartialFailure):
    """An attempt that did not get a 2xx. Its log row commits with the failed attempt;
    the job is retried (with backoff) or goes dead, as ``retryable`` says."""


def signature(secret: str, event_id: str, timestamp: int, body: str) -> str:
    """``v1,<base64>``: the svix library's signer (HMAC-SHA256 over id.timestamp.body)."""
    return Webhook(secret).sign(event_id, datetime.fromtimestamp(timestamp, UTC), body)


def signed_headers(secret: str, event_id: str, body: str, timestamp: int) -> dict[str, str]:
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, event_id, timestamp, body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


def retryable_status(status: int) -> bool:
    return status >= 500 or status in RETRYABLE_4XX


def refused_destination(url: str) -> str | None:
    """Why the URL's host must not be contacted (it resolves to a non-public
    address), or None. A name that does not resolve now is left to the request (and
    retried): DNS may be down for a moment."""
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL as err:
        return f"invalid URL: {err}"
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return None
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    for address in sorted(addresses, key=str):
        if not address.is_global:
            return (
                f"destination {host} ({address}) is not a public address; "
                "set CHRONOMEM_WEBHOOK_ALLOW_PRIVATE=1 to deliver to it"
            )
    return None


def _field(job: Job, key: str) -> Any:
    if key not in job.payload:
        raise PermanentError(f"deliver_webhook job payload has no {key!r}")
    return job.payload[key]


def make_deliver_handler(settings: WebhookSettings | None = None) -> Handler:
    settings = settings or WebhookSettings.from_env()
    # Shared by the lanes (httpx clients are thread-safe); redirects are not followed:
    # the endpoint's URL is where the event goes, or it fails.
    client = httpx.Client(timeout=settings.timeout, follow_redirects=False)

    def deliver(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        endpoint = str(_field(job, "endpoint_id"))
        event_id = str(_field(job, "event_id"))
        body = job.payload.get("body")
        if body is None:  # a wipe took the content out of the queue
            return {"skipped": "wiped before delivery", "event_id": event_id}
        if not isinstance(body, str):
            raise PermanentError("deliver_webhook job body must be the JSON text to send")
        target = conn.execute(
            "select url, secret, enabled from memory.webhook_target(%s)", (endpoint,)
        ).fetchone()
        if target is None or not target[2]:
            return {"skipped": "endpoint disabled or deleted", "event_id": event_id}
        url, secret = str(target[0]), str(target[1])

        status: int | None = None
        error: str | None = None
        retryable = True
        started = time.monotonic()
        refused = None if settings.allow_private else refused_destination(url)
        if refused:
            error, retryable = refused, False
        else:
            timestamp = int(time.time())  # fresh per attempt
            try:
                # Streamed, and closed unread: only the status matters, and a receiver
                # must not make the worker download (or wait for) a body.
                with client.stream(
                    "POST",
                    url,
                    content=body.encode(),
                    headers=signed_headers(secret, event_id, body, timestamp),
                ) as response:
                    status = response.status_code
                if not 200 <= status <= 299:
                    error = f"HTTP {status}"
                    retryable = retryable_status(status)
            except httpx.InvalidURL as err:  # not an httpx.HTTPError
                error, retryable = f"invalid URL: {err}", False
            except httpx.TimeoutException as err:
                error = f"timeout after {settings.timeout:g} s ({type(err).__name__})"
            except httpx.HTTPError as err:
                error = f"{type(err).__name__}: {err}"
        duration_ms = round((time.monotonic() - started) * 1000)

        row = conn.execute(
            "select memory.log_webhook_attempt(%s, %s, %s, %s, %s)",
            (job.job_id, status, error, duration_ms, retryable),
        ).fetchone()
        outcome = None if row is None else row[0]
        result = {
            "event_id": event_id,
            "endpoint_id": endpoint,
            "attempt": job.attempts,
            "status_code": status,
            "duration_ms": duration_ms,
            "outcome": outcome,
        }
        if outcome == "delivered":
            return result
        raise DeliveryFailed(f"webhook delivery failed: {error}", result, retryable=retryable)

    return deliver
