"""Prometheus metrics: what the server did, counted where it happens.

Off by default; ``[allotment] metrics = True`` turns them on and
``allotment.metrics.exposition`` serves them at ``/metrics`` (with the
cloud's capacity, read from the database at scrape time). This module owns
the metric objects and the few calls the rest of the code makes:

* ``DomainCounters``: what the domain reports, as plain labels, to the
  observers it is handed (``ledger.retry``'s lost races, the candidate
  engine's searches, the read model's loads); ``Services`` wires one to
  them, so the domain never imports this module. ``refusal`` and
  ``generation_conflict`` (``http.errors``). Each is a no-op until
  ``enable`` ran in this process, so they are called unconditionally and
  pay one global read when metrics are off.
* ``prepare_server`` (``allotment serve``'s master, before workers fork) and
  ``worker_exited`` (gunicorn's ``child_exit`` hook).

The metric objects are process-wide, unlike the rest of the application
(configuration is passed in, never global): a Prometheus counter is a
property of the process, and gunicorn's workers share them through
prometheus_client's multiprocess mode. ``prepare_server`` sets
``PROMETHEUS_MULTIPROC_DIR`` to a fresh private directory in the master, so
every worker writes its values to files there and any worker's scrape adds
them all up: one coherent answer, never one worker's view. Under an external
server (``allotment.wsgi:application`` in uwsgi or gunicorn) without
``PROMETHEUS_MULTIPROC_DIR`` in the environment, each process keeps its own
values in memory (single-process mode): right for one process, a per-worker
view with several; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
before the server starts its workers to get the combined view there too.

prometheus_client chooses between the two when it is imported, so it is
imported here only inside functions, after the environment is settled.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

LOG = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Where ``http.errors`` leaves the Placement error code of a refusal for the
# HTTP layer (which classifies claim outcomes by it).
REFUSAL_CODE_ENVIRON = "allotment.refusal_code"

# Seconds: from a fraction of a millisecond (a generation conflict) to the
# server's own request timeout.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0, float("inf"))
CANDIDATE_COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
                           10000, 50000, float("inf"))


class Metrics:
    """The process's metric objects (one instance per process, see ``enable``)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        r = registry
        self.http_requests = Counter(
            "placement_http_requests",
            "HTTP requests answered, by route (the URI template, e.g. "
            "/resource_providers/{uuid}; 'unmatched' for any other path), method and status.",
            ["route", "method", "status"], registry=r)
        self.http_duration = Histogram(
            "placement_http_request_duration_seconds",
            "Time from receiving a request to returning its answer, by route and method.",
            ["route", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.candidates_returned = Histogram(
            "placement_allocation_candidates_returned",
            "Allocation candidates returned per GET /allocation_candidates query, by the "
            "path the engine took (see placement_allocation_candidates_duration_seconds).",
            ["path"], buckets=CANDIDATE_COUNT_BUCKETS, registry=r)
        self.candidates_duration = Histogram(
            "placement_allocation_candidates_duration_seconds",
            "Time the candidate engine took for a query, by path: 'none' (a group that can "
            "match nothing, answered without searching), 'single' and 'single_random' (one "
            "provider per candidate; randomized or not), "
            "'spread_depth_first' and 'spread_breadth_first' (candidates combined from "
            "several providers, tree after tree or interleaved across trees).",
            ["path"], buckets=LATENCY_BUCKETS, registry=r)
        self.allocation_writes = Counter(
            "placement_allocation_writes",
            "Claims and other allocation writes answered, by operation (method and route) "
            "and outcome: 'written'; 'conflict' (placement.concurrent_update: a stale "
            "generation or retries exhausted); 'refused' (any other 4xx, e.g. no capacity); "
            "'error' (5xx).",
            ["operation", "outcome"], registry=r)
        self.generation_conflicts = Counter(
            "placement_generation_conflicts",
            "Writes refused with 409 because the client's provider or consumer generation "
            "was stale, by which generation.",
            ["generation"], registry=r)
        self.write_retries = Counter(
            "placement_write_retries",
            "Write transactions run again in the service after losing a race, by cause: "
            "'generation' (another writer changed a generation first), 'database' "
            "(deadlock, lock timeout, busy database, a unique key taken meanwhile) or "
            "'broken_trigger' (MariaDB cached a table with a trigger it failed to parse).",
            ["cause"], registry=r)
        self.write_retries_exhausted = Counter(
            "placement_write_retries_exhausted",
            "Writes that lost every retry and were answered 409 placement.concurrent_update.",
            registry=r)
        self.refusals = Counter(
            "placement_refusals",
            "Error responses rendered by the API (4xx and 5xx, not the 401s of the "
            "authentication layer), by status and Placement error code.",
            ["status", "code"], registry=r)
        self.db_checked_out = Gauge(
            "placement_db_pool_checked_out",
            "Database connections checked out of the pools (in use), summed over workers.",
            registry=r, multiprocess_mode="livesum")
        self.db_pool_size = Gauge(
            "placement_db_pool_size",
            "Connections the pools keep open (pool_size), summed over workers.",
            registry=r, multiprocess_mode="livesum")
        self.db_overflow = Gauge(
            "placement_db_pool_overflow",
            "Connections open beyond pool_size (up to max_overflow), summed over workers.",
            registry=r, multiprocess_mode="livesum")
        self.read_model_loads = Counter(
            "placement_read_model_loads",
            "Full loads of a worker's candidates read model, by cause: 'start' (its first "
            "request), 'log' (the change log could not bring it up to date: not read for "
            "half the retention, a long-pending transaction or gap) or 'drift' (the "
            "periodic comparison with the tables found a difference; there should be none).",
            ["cause"], registry=r)
        self.read_model_changes = Counter(
            "placement_read_model_changes",
            "Change-log rows read by the candidates read models (each names a provider or "
            "a name whose rows were re-read).",
            registry=r)
        self.db_errors = Counter(
            "placement_db_errors",
            "Errors raised by the database driver (including those a retry recovers "
            "from), by kind: 'disconnect' or the SQLAlchemy error class "
            "(OperationalError, IntegrityError, ...).",
            ["kind"], registry=r)


class _State:
    metrics: Metrics | None = None
    registry: CollectorRegistry | None = None  # what a scrape collects
    lock = threading.Lock()
    server_dir: str | None = None  # the directory prepare_server made


def enable() -> tuple[Metrics, CollectorRegistry]:
    """The process's metrics and the registry a scrape collects, made on first call."""
    with _State.lock:
        if _State.metrics is None or _State.registry is None:
            from prometheus_client import (
                CollectorRegistry,
                disable_created_metrics,
                multiprocess,
                values,
            )

            # ``_created`` samples double the output and no dashboard reads them.
            disable_created_metrics()
            # In case prometheus_client was imported before the master set
            # the directory: pick the value class from the environment now.
            values.ValueClass = values.get_value_class()
            registry = CollectorRegistry()
            if os.environ.get(MULTIPROC_ENV):
                multiprocess.MultiProcessCollector(registry)
                _State.metrics = Metrics(None)  # values go to the directory's files
            else:
                _State.metrics = Metrics(registry)
            _State.registry = registry
        return _State.metrics, _State.registry


# --- what the rest of the code calls (no-ops while metrics are off) ----------

class DomainCounters:
    """The domain's observers (``ledger.retry.RetryObserver``, the candidates'
    ``SearchObserver`` and ``ReadModelObserver``), counting while metrics are on."""

    def candidates_found(self, path: str, count: int, seconds: float) -> None:
        """One allocation-candidates query answered by the engine along ``path``."""
        m = _State.metrics
        if m is not None:
            m.candidates_returned.labels(path).observe(count)
            m.candidates_duration.labels(path).observe(seconds)

    def read_model_loaded(self, cause: str) -> None:
        m = _State.metrics
        if m is not None:
            m.read_model_loads.labels(cause).inc()

    def read_model_changes(self, count: int) -> None:
        m = _State.metrics
        if m is not None and count:
            m.read_model_changes.inc(count)

    def write_retried(self, cause: str) -> None:
        """A write transaction lost (``cause``: generation, database, broken_trigger)
        and is run again."""
        m = _State.metrics
        if m is not None:
            m.write_retries.labels(cause).inc()

    def write_retries_exhausted(self) -> None:
        m = _State.metrics
        if m is not None:
            m.write_retries_exhausted.inc()


def refusal(environ: dict[str, Any], status: int, code: str) -> None:
    """An error response is being rendered for the request of ``environ``."""
    m = _State.metrics
    if m is not None:
        m.refusals.labels(str(status), code).inc()
        environ[REFUSAL_CODE_ENVIRON] = code


def generation_conflict(generation: str) -> None:
    """A write refused (409) for a stale ``generation``: 'provider' or 'consumer'."""
    m = _State.metrics
    if m is not None:
        m.generation_conflicts.labels(generation).inc()


# --- allotment serve's master ------------------------------------------------

def prepare_server(conf: Any) -> None:
    """Before gunicorn forks: give the workers a shared metrics directory.

    A fresh private directory (mode 0700) replaces any inherited
    ``PROMETHEUS_MULTIPROC_DIR``, so values of an earlier run never leak into
    this one; it is removed when the master exits. Nothing happens with
    metrics off.
    """
    if not conf.allotment.metrics:
        return
    directory = tempfile.mkdtemp(prefix="allotment-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    _State.server_dir = directory
    if "prometheus_client" in sys.modules:
        from prometheus_client import values

        values.ValueClass = values.get_value_class()
    master = os.getpid()

    def remove() -> None:
        if os.getpid() == master:  # workers inherit atexit handlers; only the master
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(remove)


def worker_exited(pid: int) -> None:
    """gunicorn's ``child_exit``: drop the live gauges of a worker that is gone.

    Its counters and histograms stay: they are totals since the server started.
    """
    if _State.server_dir is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, _State.server_dir)
