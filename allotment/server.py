"""The HTTP server behind ``allotment serve``: gunicorn, pre-forked workers.

The master prepares the database once (schema and standard names), then
each worker builds its own application and connection pool after the fork.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Callable

from gunicorn.app.base import BaseApplication
from gunicorn.http.errors import InvalidHeader
from gunicorn.workers.gthread import ThreadWorker

LOG = logging.getLogger(__name__)


class PlacementThreadWorker(ThreadWorker):
    """gunicorn's threaded worker, answering a bad Content-Length the Placement way."""

    def handle_error(self, req, client, addr, exc):
        if isinstance(exc, InvalidHeader) and "CONTENT-LENGTH" in str(exc).upper():
            body = json.dumps({"errors": [{
                "status": 400, "title": "Bad Request",
                "detail": "The server could not comply with the request since it is "
                          "either malformed or otherwise incorrect.\n\n content-length "
                          "header must be an integer  ",
            }]}).encode()
            head = ("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode("latin1")
            try:
                client.sendall(head + body)
            except OSError:
                pass
            return
        return super().handle_error(req, client, addr, exc)


class Server(BaseApplication):
    def __init__(self, app_factory: Callable[[], Callable], options: dict) -> None:
        self.app_factory = app_factory
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        app = self.app_factory()
        # What the worker built so far lives as long as it does: keep the
        # cyclic GC from re-scanning it whenever a big answer allocates.
        gc.collect()
        gc.freeze()
        return app


def serve(app_factory: Callable[[], Callable], host: str, port: int, workers: int,
          threads: int, log_level: str = "info", on_ready: Callable | None = None) -> None:
    options = {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "threads": threads,
        "worker_class": "allotment.server.PlacementThreadWorker",
        "loglevel": log_level,
        "accesslog": None,
        "errorlog": "-",
        "timeout": 120,
        "graceful_timeout": 10,
        "keepalive": 5,
        "proc_name": "allotment",
        "reuse_port": False,
    }
    if on_ready is not None:
        options["when_ready"] = lambda _arbiter: on_ready()
    Server(app_factory, options).run()
