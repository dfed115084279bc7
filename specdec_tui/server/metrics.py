"""Prometheus metrics, named as vLLM names its spec-decode counters, under a ``specdec:`` prefix.

Each server has its own registry, so two servers in one process (tests) never share counts.
Counters gain the ``_total`` suffix in the exposition, as prometheus-client writes them.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from specdec_tui.engine.metrics import RunSummary, StepRecord
from specdec_tui.engine.resilience import Breakers

#: ``specdec:breaker_state`` values.
BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}


class BreakerCollector(Collector):
    """Each model's circuit, read when scraped: its state, how often it opened, its failed passes."""

    def __init__(self, breakers: Callable[[], Breakers | None]) -> None:
        self.breakers = breakers

    def collect(self):  # type: ignore[no-untyped-def]
        state = GaugeMetricFamily("specdec:breaker_state", "Circuit state: 0 closed, 1 half-open, 2 open",
                                  labels=["model"])
        trips = CounterMetricFamily("specdec:breaker_trips", "Times the circuit opened", labels=["model"])
        failures = CounterMetricFamily("specdec:model_failures", "Failed forward passes", labels=["model"])
        for breaker in self.breakers() or ():
            state.add_metric([breaker.name], BREAKER_STATES[breaker.state])
            trips.add_metric([breaker.name], breaker.log.trips)
            failures.add_metric([breaker.name], breaker.log.failures)
        yield from (state, trips, failures)

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 120.0)


class ServerMetrics:
    def __init__(self, running: Callable[[], int], waiting: Callable[[], int],
                 breakers: Callable[[], Breakers | None] = lambda: None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.drafts = Counter("specdec:spec_decode_num_drafts", "Steps that verified a non-empty draft", registry=r)
        self.draft_tokens = Counter("specdec:spec_decode_num_draft_tokens", "Tokens drafted", registry=r)
        self.accepted_tokens = Counter("specdec:spec_decode_num_accepted_tokens", "Drafted tokens accepted",
                                       registry=r)
        self.accepted_per_pos = Counter("specdec:spec_decode_num_accepted_tokens_per_pos",
                                        "Drafted tokens accepted at each draft position (0-based)",
                                        ["position"], registry=r)
        self.steps = Counter("specdec:spec_decode_num_steps", "Target verify passes (every step)", registry=r)
        self.prompt_tokens = Counter("specdec:prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("specdec:generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter("specdec:request_success", "Finished requests by finish reason",
                                ["finished_reason"], registry=r)
        self.rejected = Counter("specdec:request_rejected", "Requests refused before decoding",
                                ["reason"], registry=r)
        self.ttft = Histogram("specdec:time_to_first_token_seconds",
                              "From arrival to the first token (queue wait included)",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.inter_token = Histogram("specdec:inter_token_latency_seconds",
                                     "Per output token after the first: its step's time over the tokens it emitted",
                                     buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("specdec:e2e_request_latency_seconds", "From arrival to the last token",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.queue_time = Histogram("specdec:request_queue_time_seconds", "Time spent waiting in the queue",
                                    buckets=LATENCY_BUCKETS, registry=r)
        Gauge("specdec:num_requests_running", "Requests being decoded", registry=r).set_function(running)
        Gauge("specdec:num_requests_waiting", "Requests waiting in the queue", registry=r).set_function(waiting)
        self.degraded_tokens = Counter("specdec:degraded_tokens", "Tokens the draft model wrote alone (unverified)",
                                       registry=r)
        self.degraded_requests = Counter("specdec:request_degraded", "Finished requests with degraded tokens",
                                         registry=r)
        r.register(BreakerCollector(breakers))

    def observe_step(self, record: StepRecord, first: bool) -> None:
        self.steps.inc()
        if record.drafted:
            self.drafts.inc()
            self.draft_tokens.inc(record.drafted)
            self.accepted_tokens.inc(record.accepted)
            for position in range(record.accepted):
                self.accepted_per_pos.labels(position=str(position)).inc()
        self.generation_tokens.inc(record.emitted)
        if record.degraded:
            self.degraded_tokens.inc(record.emitted)
        if not first and record.emitted:
            for _ in range(record.emitted):
                self.inter_token.observe(record.seconds / record.emitted)

    def observe_request(self, summary: RunSummary, finish_reason: str, queue_s: float, e2e_s: float) -> None:
        self.prompt_tokens.inc(summary.prompt_tokens)
        self.requests.labels(finished_reason=finish_reason).inc()
        if summary.degraded:
            self.degraded_requests.inc()
        self.queue_time.observe(queue_s)
        if summary.new_tokens:
            self.ttft.observe(queue_s + summary.ttft_s)
        self.e2e.observe(e2e_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
