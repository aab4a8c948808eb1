"""Prometheus metrics, in the app's own registry (several apps can live in one process)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

if TYPE_CHECKING:
    from ggufspec.loop.batcher import Batcher
    from ggufspec.loop.stats import RunStats


class _BatcherCollector:
    """The batchers' own counters (serve --parallel), read at each scrape, one label per model."""

    def __init__(self, batchers: Mapping[str, Batcher]) -> None:
        self._batchers = dict(batchers)

    def collect(self):
        families = [
            ("ggufspec_batch_decodes", "Merged llama_decode calls", "decodes"),
            ("ggufspec_batch_merged_decodes", "Merged decodes that served more than one sequence", "merged"),
            ("ggufspec_batch_sequences", "Sequences served, summed over the merged decodes", "sequences"),
            ("ggufspec_batch_rows", "Tokens decoded by the merged decodes", "rows"),
            ("ggufspec_batch_wait_seconds", "Seconds decode requests waited for their merged decode", "wait_s"),
        ]
        for name, doc, attr in families:
            family = CounterMetricFamily(name, doc, labels=["model"])
            for label, b in self._batchers.items():
                family.add_metric([label], float(getattr(b, attr)))
            yield family


class Metrics:
    """Counters, gauges and histograms the /metrics endpoint exposes."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ggufspec_requests", "HTTP requests by endpoint and outcome", ["endpoint", "outcome"], registry=r)
        self.request_seconds = Histogram(
            "ggufspec_request_duration_seconds", "Request latency, arrival to last byte", ["endpoint"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.generations = Counter("ggufspec_generations", "Generations by stop reason", ["stop_reason"], registry=r)
        self.prompt_tokens = Counter("ggufspec_prompt_tokens", "Prompt tokens processed", registry=r)
        self.cached_tokens = Counter(
            "ggufspec_prompt_cached_tokens", "Prompt tokens reused from the KV cache (not decoded again)", registry=r
        )
        self.generated_tokens = Counter("ggufspec_generated_tokens", "Tokens generated", registry=r)
        self.drafted = Counter("ggufspec_drafted_tokens", "Tokens proposed by the drafter", registry=r)
        self.accepted = Counter("ggufspec_accepted_tokens", "Drafted tokens the target accepted", registry=r)
        self.accept_rate = Gauge("ggufspec_accept_rate", "Accepted / drafted over all generations", registry=r)
        self.queue_depth = Gauge("ggufspec_queue_depth", "Requests waiting for the pair", registry=r)
        self.busy = Gauge("ggufspec_busy", "1 while a generation runs", registry=r)
        self.slots_busy = Gauge("ggufspec_slots_busy", "Slots generating (serve --parallel)", registry=r)
        self.queue_wait = Histogram(
            "ggufspec_queue_wait_seconds", "Time from acceptance to the start of the generation", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.ttft = Histogram(
            "ggufspec_time_to_first_token_seconds", "Time from acceptance to the first generated token", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.gen_tps = Histogram(
            "ggufspec_generation_tokens_per_second", "Generation speed of each request (after the first token)",
            registry=r, buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
        )
        self._lock = threading.Lock()
        self._drafted = self._accepted = 0
        self.accept_rate.set_function(self._rate)

    def watch_batchers(self, batchers: Mapping[str, Batcher]) -> None:
        """Export the batchers' counters (serve --parallel: "target", "draft", "draft2", ...)."""
        self.registry.register(_BatcherCollector(batchers))

    def _rate(self) -> float:
        with self._lock:
            return self._accepted / self._drafted if self._drafted else 0.0

    def record(self, stats: RunStats) -> None:
        """One finished (or cancelled) generation."""
        self.generations.labels(stats.stop_reason).inc()
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.cached_tokens.inc(stats.cached_tokens)
        self.generated_tokens.inc(stats.generated_tokens)
        self.drafted.inc(stats.drafted)
        self.accepted.inc(stats.accepted)
        with self._lock:
            self._drafted += stats.drafted
            self._accepted += stats.accepted
        if stats.generated_tokens > 1 and stats.stop_reason != "cancelled":
            self.gen_tps.observe(stats.gen_tps)

    def request_done(self, endpoint: str, outcome: str, *, started: float | None = None) -> None:
        """One HTTP request answered; `started` (perf_counter) also records its latency."""
        self.requests.labels(endpoint, outcome).inc()
        if started is not None:
            self.request_seconds.labels(endpoint).observe(time.perf_counter() - started)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
