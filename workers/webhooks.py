"""deliver_webhook jobs: POST one event to one endpoint, signed the Svix way.

The event (id, type, body) was fixed in SQL when the writing transaction queued it
(functions/087_webhooks.sql); here, per attempt:

- the endpoint's URL and current secret come from memory_worker.webhook_target (a rotated
  secret signs every attempt from then on; a disabled or deleted endpoint gets nothing);
- the host is resolved once (getaddrinfo); every address it gives must be public
  (unless CHRONOMEM_WEBHOOK_ALLOW_PRIVATE), and the connection goes to those checked
  addresses, in the resolver's order (the next one when a connection cannot be made),
  with the URL's Host header and, over https, the host name as TLS SNI and as the name
  the certificate must carry. Nothing resolves the name a
  second time (DNS rebinding), and no proxy from the environment is used. A name that
  does not resolve is not delivered to: the attempt fails and is retried;
- one deadline (CHRONOMEM_WEBHOOK_TIMEOUT) bounds the whole attempt: resolving,
  connecting, TLS, sending the body and receiving the answer's headers. The answer's
  body is never read (only the status counts), so its size does not matter either;
- headers: ``webhook-id`` (the event id, the same on every attempt), ``webhook-timestamp``
  (a fresh unix time per attempt) and ``webhook-signature: v1,<base64 HMAC-SHA256 of
  "{id}.{timestamp}.{body}">``, keyed with the base64-decoded part of ``whsec_...``,
  computed by the ``svix`` library's own signer;
- the body is the stored text, byte for byte;
- every attempt is logged through memory_worker.log_webhook_attempt in the attempt's
  transaction: a 2xx completes the job; a 5xx, 408, 429, the deadline, a connection
  error or a name that does not resolve is retried with the queue's backoff; any other
  status (4xx, a redirect) and a destination that is not a public address are not.

How many deliveries run at once (per org, per endpoint) is decided by memory_worker.claim_jobs
(functions/080_jobs.sql), which reads the caps of WebhookSettings from the claiming
session (workers/runner.py sets them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
from svix.webhooks import Webhook

from chronomem.settings import WebhookSettings
from workers.errors import PartialFailure, PermanentError
from workers.jobs import Handler, Job

__all__ = ["WebhookSettings", "make_deliver_handler", "refused_destination", "retryable_status"]

USER_AGENT = "chronomem-webhooks/0.1"
# 4xx that say "later", not "never".
RETRYABLE_4XX = frozenset({408, 429})

Resolver = Callable[..., Sequence[tuple[Any, ...]]]
"""socket.getaddrinfo's shape: (host, port, family, type, proto, flags) -> address infos."""

# getaddrinfo blocks and cannot be interrupted: it runs here, so the attempt's deadline
# still ends the attempt (a late answer is then thrown away).
_RESOLVERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="webhook-dns")


class Undeliverable(Exception):
    """The destination cannot be contacted (the reason says why)."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@dataclass(frozen=True)
class Destination:
    url: httpx.URL
    host: str
    """The host name as sent (IDNA): for SNI and the certificate check."""
    host_header: str
    addresses: tuple[str, ...]
    """Every address the name resolved to, each checked."""

    def url_at(self, address: str) -> httpx.URL:
        """The endpoint's URL with the address in place of its host."""
        return self.url.copy_with(host=address)


def resolve_destination(url: str, allow_private: bool, resolve: Resolver) -> Destination:
    """Resolve the URL's host once and check every address; the addresses to connect
    to. Raises Undeliverable."""
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError) as err:
        raise Undeliverable(f"invalid URL: {err}", retryable=False) from None
    if parsed.scheme not in ("http", "https") or not host:
        raise Undeliverable(f"invalid URL: {url[:200]}", retryable=False)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            infos = resolve(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as err:
            raise Undeliverable(f"{host} does not resolve ({err})", retryable=True) from None
        addresses = []
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if address not in addresses:
                addresses.append(address)
    if not addresses:
        raise Undeliverable(f"{host} does not resolve (no address)", retryable=True)
    if not allow_private:
        for address in addresses:
            if not address.is_global:
                raise Undeliverable(
                    f"destination {parsed.host} ({address}) is not a public address; "
                    "set CHRONOMEM_WEBHOOK_ALLOW_PRIVATE=1 to deliver to it",
                    retryable=False,
                )
    return Destination(
        url=parsed,
        host=host,
        host_header=parsed.netloc.decode("ascii"),
        addresses=tuple(str(a) for a in addresses),
    )


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


def refused_destination(url: str, resolve: Resolver = socket.getaddrinfo) -> str | None:
    """Why the URL's host must not be contacted (an address it resolves to is not
    public, or the URL is invalid), or None. A name that does not resolve now is not
    refused for good: DNS may be down for a moment."""
    try:
        resolve_destination(url, False, resolve)
    except Undeliverable as err:
        return None if err.retryable else err.reason
    return None


def _field(job: Job, key: str) -> Any:
    if key not in job.payload:
        raise PermanentError(f"deliver_webhook job payload has no {key!r}")
    return job.payload[key]


async def _post(
    url: str,
    settings: WebhookSettings,
    resolve: Resolver,
    tls: ssl.SSLContext,
    content: bytes,
    headers: dict[str, str],
) -> int:
    """Resolve, check, connect to a checked address and POST; the answer's status.
    The caller bounds it with the attempt's deadline."""
    loop = asyncio.get_running_loop()
    dest = await asyncio.wrap_future(
        _RESOLVERS.submit(resolve_destination, url, settings.allow_private, resolve), loop=loop
    )
    async with httpx.AsyncClient(
        verify=tls, follow_redirects=False, trust_env=False, timeout=settings.timeout
    ) as client:
        for i, address in enumerate(dest.addresses):
            request = client.build_request(
                "POST",
                dest.url_at(address),
                content=content,
                headers={**headers, "host": dest.host_header},
                extensions={"sni_hostname": dest.host},
            )
            try:
                # Streamed, and closed unread: only the status matters, and a receiver
                # must not make the worker download (or wait for) a body.
                response = await client.send(request, stream=True)
            except httpx.ConnectError:
                if i + 1 == len(dest.addresses):
                    raise
                continue  # nothing was sent: the name's next checked address
            await response.aclose()
            return response.status_code
    raise AssertionError("a destination has at least one address")


def post_within_deadline(
    url: str,
    settings: WebhookSettings,
    resolve: Resolver,
    tls: ssl.SSLContext,
    content: bytes,
    headers: dict[str, str],
) -> int:
    """_post, cancelled when settings.timeout has passed (raises TimeoutError)."""

    async def attempt() -> int:
        async with asyncio.timeout(settings.timeout):
            return await _post(url, settings, resolve, tls, content, headers)

    return asyncio.run(attempt())


def make_deliver_handler(
    settings: WebhookSettings | None = None, *, resolve: Resolver = socket.getaddrinfo
) -> Handler:
    """resolve: the name lookup (socket.getaddrinfo; tests inject their own)."""
    settings = settings or WebhookSettings.from_env()
    # Shared by the lanes: the CA bundle is loaded once. Each attempt has its own client
    # (and event loop), so nothing of one attempt outlives its deadline.
    tls = httpx.create_ssl_context()

    def deliver(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        endpoint = str(_field(job, "endpoint_id"))
        event_id = str(_field(job, "event_id"))
        body = job.payload.get("body")
        if body is None:  # a wipe took the content out of the queue
            return {"skipped": "wiped before delivery", "event_id": event_id}
        if not isinstance(body, str):
            raise PermanentError("deliver_webhook job body must be the JSON text to send")
        target = conn.execute(
            "select url, secret, enabled from memory_worker.webhook_target(%s)", (endpoint,)
        ).fetchone()
        if target is None or not target[2]:
            return {"skipped": "endpoint disabled or deleted", "event_id": event_id}
        url, secret = str(target[0]), str(target[1])

        status: int | None = None
        error: str | None = None
        retryable = True
        started = time.monotonic()
        timestamp = int(time.time())  # fresh per attempt
        try:
            status = post_within_deadline(
                url,
                settings,
                resolve,
                tls,
                body.encode(),
                signed_headers(secret, event_id, body, timestamp),
            )
            if not 200 <= status <= 299:
                error = f"HTTP {status}"
                retryable = retryable_status(status)
        except Undeliverable as err:
            error, retryable = err.reason, err.retryable
        except httpx.InvalidURL as err:  # not an httpx.HTTPError
            error, retryable = f"invalid URL: {err}", False
        except (TimeoutError, httpx.TimeoutException) as err:
            error = (
                f"timeout: the attempt's deadline of {settings.timeout:g} s passed "
                f"(resolve, connect, TLS, send, answer; {type(err).__name__})"
            )
        except httpx.HTTPError as err:
            error = f"{type(err).__name__}: {err}"
        duration_ms = round((time.monotonic() - started) * 1000)

        row = conn.execute(
            "select memory_worker.log_webhook_attempt(%s, %s, %s, %s, %s)",
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
