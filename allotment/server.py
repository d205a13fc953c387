"""The HTTP server behind ``allotment serve``: gunicorn's master, waitress's I/O.

gunicorn's master binds the listeners, pre-forks the worker processes and
supervises them (restart on death, graceful stop on SIGTERM). Each worker
serves with waitress: one I/O thread reads every connection without
blocking and buffers whole requests (line, headers and body); only a
complete request reaches the application threads. A client that sends half
a request, or nothing at all, costs a socket and a little memory, never a
thread, and is cut off when its time is up (``ConnectionLimits``). So is a
client that stops reading its answer; meanwhile its answer is buffered
within per-connection and per-worker bounds (``ANSWER_BUDGET``), beyond
which its thread waits for the client until the cut-off lets it go.

Every refusal the HTTP layer makes itself (malformed or ambiguous request,
headers or body too large) is answered in the Placement error format with a
request id, and the connection is closed. A worker out of file descriptors
pauses accepting rather than retrying at once; its ``connection_limit`` is
kept within RLIMIT_NOFILE.

This module is the gunicorn side: the worker class, its configuration and the
limits. Everything that reaches into waitress (its parser, channel, listener,
tasks, dispatcher and I/O loop, none of which it documents) lives in
``allotment.waitress_adapter``, with ``ANSWER_BUDGET`` and the refusals.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from gunicorn.app.base import BaseApplication
from gunicorn.config import Config
from gunicorn.glogging import Logger as GunicornLogger
from gunicorn.workers.base import Worker
from oslo_config import cfg

from allotment.config import allotment_default
from allotment.waitress_adapter import WorkerIO

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    """What a client may cost a worker ([allotment] options)."""

    request_timeout: float = allotment_default("request_timeout")
    keepalive_timeout: float = allotment_default("keepalive_timeout")
    max_request_header_size: int = allotment_default("max_request_header_size")
    max_request_body_size: int = allotment_default("max_request_body_size")
    connection_limit: int = allotment_default("connection_limit")

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ConnectionLimits:
        opts = conf.allotment
        return cls(request_timeout=opts.request_timeout,
                   keepalive_timeout=opts.keepalive_timeout,
                   max_request_header_size=opts.max_request_header_size,
                   max_request_body_size=opts.max_request_body_size,
                   connection_limit=opts.connection_limit)


# Seconds between a worker's heartbeats; gunicorn's master stops a worker
# silent for its ``timeout`` (30 s, set below).
HEARTBEAT_INTERVAL = 1.0


class WaitressWorker(Worker):
    """A gunicorn worker process that serves its listeners with waitress."""

    def run(self) -> None:
        limits: ConnectionLimits = getattr(self.app, "limits", ConnectionLimits())
        io = WorkerIO(self.wsgi, [listener.sock for listener in self.sockets], limits,
                      threads=self.cfg.threads, backlog=self.cfg.backlog)
        parent = os.getppid()
        noticed = float("-inf")
        while self.alive:
            # The heartbeat gunicorn's master reads (a file's time set, a system
            # call) once a second, not once per pass: a busy worker's loop
            # passes several times per request.
            now = time.monotonic()
            if now - noticed >= HEARTBEAT_INTERVAL:
                self.notify()
                noticed = now
                if os.getppid() != parent:
                    LOG.warning("gunicorn master %s is gone; worker %s stops", parent,
                                self.pid)
                    break
            io.poll(1.0)
        self._stop(io)

    def _stop(self, io: WorkerIO) -> None:
        """Stop accepting, let answers being made finish, then close everything."""
        io.stop_accepting()
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while time.monotonic() < deadline and io.busy():
            self.notify()
            io.poll(0.2)
        io.close()


class PlacementLogger(GunicornLogger):
    """gunicorn's own messages through the handlers ``allotment.logs`` set up.

    No access log: the request log (``allotment.http.requestlog``) has the lines.
    """

    def setup(self, cfg: Config) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            self.error_log.removeHandler(handler)
        self.error_log.propagate = True
        self.access_log.handlers = []
        self.access_log.propagate = False


class Server(BaseApplication):
    def __init__(self, app_factory: Callable[[], Callable], options: dict,
                 limits: ConnectionLimits) -> None:
        self.app_factory = app_factory
        self.options = options
        self.limits = limits
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Callable:
        app = self.app_factory()
        # What the worker built so far lives as long as it does: keep the
        # cyclic GC from re-scanning it whenever a big answer allocates.
        gc.collect()
        gc.freeze()
        return app


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(app_factory: Callable[[], Callable], host: str, port: int, workers: int,
          threads: int, log_level: str = "info", on_ready: Callable | None = None,
          limits: ConnectionLimits | None = None,
          extra_listen: list[tuple[str, int]] | None = None,
          child_exit: Callable[[int], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; ``extra_listen`` adds listeners (e.g. metrics)."""
    binds = [_bind(host, port)] + [_bind(h, p) for h, p in extra_listen or []]
    options = {
        "bind": binds,
        "workers": workers,
        "threads": threads,
        "worker_class": "allotment.server.WaitressWorker",
        "loglevel": log_level,
        "accesslog": None,
        "logger_class": "allotment.server.PlacementLogger",
        # The I/O loop notifies the master every second; a worker that
        # misses 30 s of heartbeats is wedged and is replaced.
        "timeout": 30,
        "graceful_timeout": 10,
        "backlog": 2048,
        "proc_name": "allotment",
        "reuse_port": False,
        # No control socket in the home directory (several servers may run).
        "control_socket_disable": True,
    }
    if on_ready is not None:
        options["when_ready"] = lambda _arbiter: on_ready()
    if child_exit is not None:
        options["child_exit"] = lambda _arbiter, worker: child_exit(worker.pid)
    _raise_open_files_limit()
    limits = _fit_open_files(limits or ConnectionLimits(), threads)
    Server(app_factory, options, limits).run()


def _raise_open_files_limit() -> None:
    """Every held connection is a file descriptor: allow as many as the system does."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


# Descriptors a worker needs besides its connections: per application thread,
# a database connection (SQLite's WAL adds two files) and a request body and
# an answer spilled to temporary files; in all, listeners, wake-up pipes, logs,
# the heartbeat file and the read model's and health probe's connections.
FDS_PER_THREAD = 5
FDS_SPARE = 32
MIN_CONNECTION_LIMIT = 16


def _fit_open_files(limits: ConnectionLimits, threads: int) -> ConnectionLimits:
    """``connection_limit`` lowered to what RLIMIT_NOFILE leaves (logged once, here in
    the master: every worker gets the same limit and has the same descriptors)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return limits
    if soft == resource.RLIM_INFINITY:
        return limits
    kept = _open_descriptors() + FDS_PER_THREAD * threads + FDS_SPARE
    allowed = max(soft - kept, MIN_CONNECTION_LIMIT)
    if limits.connection_limit <= allowed:
        return limits
    LOG.warning("[allotment] connection_limit %d is more than the open files limit (%d) "
                "allows with %d kept for the database, temporary files and logs: each "
                "worker accepts %d connections", limits.connection_limit, soft, kept, allowed)
    return dataclasses.replace(limits, connection_limit=allowed)


def _open_descriptors() -> int:
    for directory in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(directory)) - 1  # less listdir's own
    return 16
