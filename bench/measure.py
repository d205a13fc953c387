"""Timing requests: sequential latency samples and concurrent throughput, bounded.

Every measurement stops by itself: a request that exceeds the per-request timeout
ends the measurement and is reported as ">T s"; throughput runs also stop handing
out work once a time budget is spent.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from http_client import PlacementClient, Reply, RequestTimeout


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Timing:
    """What one measurement found. Times are in seconds."""

    samples: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    timed_out: float | None = None  # the timeout that was exceeded, if one was
    wall: float = 0.0  # for throughput: wall time spent sending
    concurrency: int = 1

    def add(self, reply: Reply) -> None:
        self.samples.append(reply.elapsed)
        self.statuses[reply.status] += 1

    def merge(self, other: Timing) -> None:
        """Fold another run of the same measurement into this one."""
        self.samples += other.samples
        self.statuses.update(other.statuses)
        self.wall += other.wall
        self.timed_out = self.timed_out or other.timed_out
        self.concurrency = max(self.concurrency, other.concurrency)

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def p95(self) -> float | None:
        return percentile(self.samples, 95) if self.samples else None

    @property
    def rate(self) -> float | None:
        """Successful requests per second (throughput runs)."""
        ok = len(self.samples) - self.errors
        if self.timed_out is not None or not self.wall or ok <= 0:
            return None
        return ok / self.wall

    def as_dict(self) -> dict:
        return {"n": len(self.samples), "median_s": self.median, "p95_s": self.p95,
                "rate_per_s": self.rate, "wall_s": self.wall, "timed_out_s": self.timed_out,
                "concurrency": self.concurrency,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())}}


def concurrently(client: PlacementClient, calls: list, concurrency: int,
                 timeout: float, budget: float | None = None) -> Timing:
    """Run ``calls`` (each ``call(client, timeout) -> Reply``) on ``concurrency`` threads.

    Stops handing out work after the first timeout (the run is then reported as
    timed out rather than as a throughput) or once ``budget`` seconds have passed
    (the rate is then over the requests that were done).
    """
    timing = Timing(concurrency=concurrency)
    lock = threading.Lock()
    queue = list(reversed(calls))
    stop = threading.Event()
    started = time.perf_counter()

    def worker() -> None:
        try:
            while not stop.is_set():
                if budget is not None and time.perf_counter() - started > budget:
                    return
                with lock:
                    if not queue:
                        return
                    call = queue.pop()
                try:
                    reply: Reply = call(client, timeout)
                except RequestTimeout:
                    stop.set()
                    with lock:
                        timing.timed_out = timeout
                    return
                with lock:
                    timing.add(reply)
        finally:
            # Its own only: the other workers may still be answering their last.
            client.close_own()

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    timing.wall = time.perf_counter() - started
    return timing
