"""The server's Prometheus metrics (prometheus_client), summed over every worker process.

`headcut serve` points PROMETHEUS_MULTIPROC_DIR at a fresh folder before any worker starts, so each worker
writes its values there and GET /metrics on any worker reads all of them (prometheus_client's multiprocess
mode). Requests are labelled by route template, never by raw path: a scan of random URLs adds one series.
"""
from __future__ import annotations

import os

from headcut_grader.backends import INSTALL
from headcut_grader.microbatch import BatchStats
from headcut_grader.optional import NOT_INSTALLED, broken_said, why_unusable

ENV_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
MISSING = f"GET /metrics needs prometheus_client; run: {INSTALL['serve']}."
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def unavailable() -> str | None:
    """Why GET /metrics cannot answer here, as the sentence it answers (prometheus_client not installed, or installed
    but failing to import), or None where it can. A broken client costs the metrics alone: the server grades on."""
    why = why_unusable("prometheus_client")
    if why is None:
        return None
    if why == NOT_INSTALLED:
        return MISSING
    return f"GET /metrics needs prometheus_client, and {broken_said('prometheus_client', why)}."


class Metrics:
    """Counters and histograms of one worker; `page()` is the text GET /metrics answers."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        # a registry of our own: several apps in one process (tests) would clash in the global one
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("headcut_requests", "HTTP requests by route template, method and status.",
                                ["path", "method", "status"], registry=registry)
        self.latency = Histogram("headcut_request_seconds", "Time from request to response, by route template.",
                                 ["path"], buckets=LATENCY_BUCKETS, registry=registry)
        self.pairs = Counter("headcut_pairs", "Pairs graded.", registry=registry)
        self.batch_pairs = Histogram("headcut_batch_pairs", "Pairs per grader run (merged requests).",
                                     buckets=SIZE_BUCKETS, registry=registry)
        self.batch_requests = Histogram("headcut_batch_requests", "Requests merged into one grader run.",
                                        buckets=SIZE_BUCKETS, registry=registry)
        self.batch_seconds = Histogram("headcut_batch_seconds", "Time of one grader run.",
                                       buckets=LATENCY_BUCKETS, registry=registry)
        self.queue = Gauge("headcut_queue_pairs", "Pairs queued, not yet taken into a grader run, all workers.",
                           registry=registry, multiprocess_mode="livesum")

    def request(self, path: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(path, method, str(status)).inc()
        self.latency.labels(path).observe(seconds)

    def batch(self, stats: BatchStats) -> None:
        self.pairs.inc(stats.pairs)
        self.batch_pairs.observe(stats.pairs)
        self.batch_requests.observe(stats.requests)
        self.batch_seconds.observe(stats.seconds)

    def waiting(self, pairs: int) -> None:
        self.queue.set(pairs)

    def page(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry = self.registry
        if os.environ.get(ENV_MULTIPROC):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """A stopping worker's live gauges leave the sum (its counters stay: they happened)."""
        if os.environ.get(ENV_MULTIPROC):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())


class NoMetrics:
    """Stands in when prometheus_client is not installed or fails to import: the server grades, GET /metrics answers
    `said` (why, and what to install)."""

    def __init__(self, said: str = MISSING):
        self.said = said

    def request(self, path: str, method: str, status: int, seconds: float) -> None:
        pass

    def batch(self, stats: BatchStats) -> None:
        pass

    def waiting(self, pairs: int) -> None:
        pass

    def page(self) -> None:
        return None

    def close(self) -> None:
        pass


def make_metrics() -> Metrics | NoMetrics:
    said = unavailable()
    return NoMetrics(said) if said else Metrics()
