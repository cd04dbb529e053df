"""The server's counters, in Prometheus's text format (GET /metrics).

Rates (requests/s, tokens/s) are left to Prometheus's `rate()` over the counters, as its
conventions ask; histograms keep cumulative buckets.
"""

from __future__ import annotations

import bisect
import threading
from typing import Callable

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    """Observations counted in cumulative buckets of upper bounds `bounds`."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            total += count
            label = "+Inf" if bound == float("inf") else f"{bound:g}"
            out.append(f'{name}_bucket{{le="{label}"}} {total}')
        return out + [f"{name}_sum {self.sum:.6f}", f"{name}_count {total}"]


class Metrics:
    """What the server counts; `observe_*` from the event loop and the search's thread alike.

    Args:
        queue_lines: the lines waiting now (a gauge read when /metrics is asked).
    """

    def __init__(self, queue_lines: Callable[[], int] = lambda: 0):
        self._lock = threading.Lock()
        self.queue_lines = queue_lines
        self.search_traces: Callable[[], int] = lambda: 0  # traces of the searches so far
        # Each language pair's (lines searched, lines waiting), on a server of several.
        self.by_pair: Callable[[], dict[str, tuple[int, int]]] = lambda: {}
        self.requests: dict[tuple[str, int], int] = {}
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch_lines = Histogram(BATCH_BUCKETS)
        self.lines = self.source_tokens = self.output_tokens = 0
        self.search_seconds = 0.0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[route, status] = self.requests.get((route, status), 0) + 1
            if status == 200:
                self.latency.observe(seconds)

    def observe_batch(self, lines: int, source_tokens: int, output_tokens: int,
                      seconds: float) -> None:
        with self._lock:
            self.batch_lines.observe(lines)
            self.lines += lines
            self.source_tokens += source_tokens
            self.output_tokens += output_tokens
            self.search_seconds += seconds

    def text(self) -> str:
        """Every metric, in Prometheus's text exposition format (version 0.0.4)."""
        with self._lock:
            out = ["# HELP vtx_requests_total Requests answered, by route and HTTP status.",
                   "# TYPE vtx_requests_total counter"]
            out += [f'vtx_requests_total{{route="{route}",status="{status}"}} {count}'
                    for (route, status), count in sorted(self.requests.items())]
            for name, value, kind, about in (
                    ("vtx_lines_total", self.lines, "counter", "Lines searched."),
                    ("vtx_source_tokens_total", self.source_tokens, "counter",
                     "Source pieces searched."),
                    ("vtx_output_tokens_total", self.output_tokens, "counter",
                     "Pieces of the best hypotheses output (rate(): tokens/s)."),
                    ("vtx_search_seconds_total", round(self.search_seconds, 6), "counter",
                     "Seconds the search's thread spent searching."),
                    ("vtx_queue_lines", self.queue_lines(), "gauge",
                     "Lines waiting for the search."),
                    ("vtx_search_traces_total", self.search_traces(), "counter",
                     "Traces of the compiled searches (a search settings' first request).")):
                out += [f"# HELP {name} {about}", f"# TYPE {name} {kind}", f"{name} {value}"]
            pairs = self.by_pair()
            for name, index, kind, about in (
                    ("vtx_pair_lines_total", 0, "counter", "Lines searched, by language pair."),
                    ("vtx_pair_queue_lines", 1, "gauge",
                     "Lines waiting for the search, by language pair.")):
                if pairs:
                    out += [f"# HELP {name} {about}", f"# TYPE {name} {kind}"]
                    out += [f'{name}{{pair="{pair}"}} {counts[index]}'
                            for pair, counts in pairs.items()]
            out += ["# HELP vtx_batch_lines Lines searched together, by batch.",
                    "# TYPE vtx_batch_lines histogram"] + self.batch_lines.lines("vtx_batch_lines")
            out += ["# HELP vtx_request_seconds Latency of the requests answered 200.",
                    "# TYPE vtx_request_seconds histogram"]
            out += self.latency.lines("vtx_request_seconds")
        return "\n".join(out) + "\n"
