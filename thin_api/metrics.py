"""Prometheus metrics: HTTP requests and latency by route, search latency, and what
the database counts (facts superseded/retracted/refused..., the job queue, model calls and
tokens), read from SQL at scrape time, as totals across orgs (no tenant detail)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from thin_api.db import Database

log = logging.getLogger("chronomem.api")

# No *_created series next to every counter and histogram.
disable_created_metrics()

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "chronomem_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "chronomem_http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.search_latency = Histogram(
            "chronomem_search_duration_seconds",
            "Time of search and context requests' database work (with the query embedding).",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def watch_database(self, db: Database) -> None:
        self.registry.register(DatabaseCollector(db))


class DatabaseCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("chronomem_database_up", "1 when the metrics query succeeded.")
        try:
            totals = self.db.operator_rows("select metric, value from memory.metric_totals()")
            queue = self.db.operator_rows("select * from memory.queue_stats()")
        except Exception as err:  # metrics must not fail the scrape
            log.warning("metrics query failed: %s", err)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for row in totals:
            if ":" in row["metric"]:  # labelled counters, e.g. model_tokens_in:enrich
                continue
            metric = CounterMetricFamily(
                f"chronomem_{row['metric']}", f"memory.counters {row['metric']}, all orgs."
            )
            metric.add_metric([], float(row["value"]))
            yield metric
        jobs = GaugeMetricFamily(
            "chronomem_queue_jobs", "Jobs by kind and status.", labels=["kind", "status"]
        )
        depth = GaugeMetricFamily("chronomem_queue_depth", "Queued jobs.", labels=["kind"])
        dead = GaugeMetricFamily("chronomem_queue_dead", "Dead-lettered jobs.", labels=["kind"])
        age = GaugeMetricFamily(
            "chronomem_queue_oldest_age_seconds", "Age of the oldest queued job.", labels=["kind"]
        )
        for row in queue:
            kind = row["kind"]
            for status in ("queued", "running", "waiting", "dead", "done"):
                jobs.add_metric([kind, status], float(row[status]))
            depth.add_metric([kind], float(row["queued"]))
            dead.add_metric([kind], float(row["dead"]))
            oldest = row["oldest_queued_age"]
            age.add_metric([kind], oldest.total_seconds() if oldest is not None else 0.0)
        yield from (jobs, depth, dead, age)
        yield from model_usage_metrics(totals)


def model_usage_metrics(totals: list[dict[str, Any]]) -> Iterator[Metric]:
    """The model calls jobs made and the extracted items dropped, from
    memory.metric_totals' labelled counters (model_calls:<job kind>:<outcome>,
    model_tokens_in|out:<job kind>, model_latency_us:<job kind>, which
    memory_worker.record_model_call adds to; extraction_rejected:<reason>): tokens by
    direction and job kind, calls by job kind and outcome, latency by job kind,
    rejections by reason; all orgs together."""
    tokens = CounterMetricFamily(
        "chronomem_model_tokens",
        "Tokens the model endpoints reported, by direction (in, out) and job kind.",
        labels=["direction", "job_kind"],
    )
    calls = CounterMetricFamily(
        "chronomem_model_calls",
        "Model calls by job kind and outcome.",
        labels=["job_kind", "outcome"],
    )
    latency = CounterMetricFamily(
        "chronomem_model_latency_seconds",
        "Total time of model calls in seconds, by job kind.",
        labels=["job_kind"],
    )
    rejected = CounterMetricFamily(
        "chronomem_extraction_rejected",
        "Extracted items dropped, by reason (memory.extraction_rejections).",
        labels=["reason"],
    )
    for row in totals:
        name, *labels = str(row["metric"]).split(":")
        value = float(row["value"])
        if name == "model_calls" and len(labels) == 2:
            calls.add_metric(labels, value)
        elif name in ("model_tokens_in", "model_tokens_out") and len(labels) == 1:
            tokens.add_metric([name.removeprefix("model_tokens_"), labels[0]], value)
        elif name == "model_latency_us" and len(labels) == 1:
            latency.add_metric(labels, value / 1e6)
        elif name == "extraction_rejected" and len(labels) == 1:
            rejected.add_metric(labels, value)
    yield from (tokens, calls, latency, rejected)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (not its path, so ids
    do not become labels)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
