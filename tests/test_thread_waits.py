"""A worker's requests that wait for an application thread: summed up, not logged each.

In process, one application thread, the I/O loop on a thread of the test's.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from waitress import wasyncore

from allotment import server as http_server
from allotment import waitress_adapter
from allotment.waitress_adapter import PlacementDispatcher, PlacementServer

REQUEST = b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n"


class Worker:
    """A listener, one application thread and the I/O loop, in this process."""

    def __init__(self) -> None:
        self.release = threading.Event()
        limits = http_server.ConnectionLimits(request_timeout=30, keepalive_timeout=30)
        adjustments = waitress_adapter.adjustments_for(limits, threads=1, backlog=16,
                                                       host="127.0.0.1", port=0)
        self.socket_map: dict = {}
        self.dispatcher = PlacementDispatcher()
        self.dispatcher.set_thread_count(1)
        self.listener = PlacementServer(self._app, self.socket_map, dispatcher=self.dispatcher,
                                        adj=adjustments)
        self.listener.limits = limits
        self.address = ("127.0.0.1", int(self.listener.effective_port))
        self._stop = threading.Event()
        self._io = threading.Thread(target=self._loop, daemon=True)
        self._io.start()

    def _app(self, environ: dict, start_response) -> list[bytes]:
        if environ["PATH_INFO"] == "/slow":
            self.release.wait(10)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    def _loop(self) -> None:
        while not self._stop.is_set():
            wasyncore.loop(timeout=0.05, map=self.socket_map, use_poll=True, count=1)

    def close(self) -> None:
        self._stop.set()
        self._io.join(5)
        self.dispatcher.shutdown(timeout=5)
        wasyncore.close_all(self.socket_map)

    def busy_then_queued(self, queued: int, held_for: float) -> None:
        """One request holds the thread while ``queued`` more arrive; all answered."""
        self.release.clear()
        connections = [socket.create_connection(self.address, timeout=10)
                       for _ in range(queued + 1)]
        try:
            connections[0].sendall(REQUEST % b"/slow")
            deadline = time.monotonic() + 5
            while self.dispatcher.active_count < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            for sock in connections[1:]:
                sock.sendall(REQUEST % b"/fast")
            while len(self.dispatcher.queue) < queued and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(held_for)
            self.release.set()
            for sock in connections:
                assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
        finally:
            for sock in connections:
                sock.close()


@pytest.fixture
def worker() -> Iterator[Worker]:
    started = Worker()
    yield started
    started.close()


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name in ("allotment.server", "waitress.queue")]


def test_waits_are_summed_up_once_an_interval(worker: Worker,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    worker.busy_then_queued(queued=2, held_for=0.2)
    # waitress would have warned for each of the two.
    assert not _lines(caplog)
    worker.dispatcher.report_waits(time.monotonic())  # not yet time
    assert not _lines(caplog)
    worker.dispatcher.report_waits(worker.dispatcher.reported_at
                                   + waitress_adapter.WAIT_REPORT_INTERVAL)
    [line] = _lines(caplog)
    assert line.levelno == logging.INFO
    message = line.getMessage()
    assert message.startswith("2 of 3 requests in the last 60 s found this worker's 1 "
                              "application threads all busy; the longest wait for one was 0."), \
        message
    longest = float(message.rpartition(" was ")[2].removesuffix(" s"))
    assert 0.2 <= longest < waitress_adapter.LONG_WAIT


def test_an_interval_without_waits_says_nothing(worker: Worker,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with socket.create_connection(worker.address, timeout=10) as sock:
        for _ in range(3):
            sock.sendall(REQUEST % b"/fast")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
    worker.dispatcher.report_waits(worker.dispatcher.reported_at
                                   + waitress_adapter.WAIT_REPORT_INTERVAL)
    assert not _lines(caplog)
    assert worker.dispatcher.served == 0  # counted afresh from the report


def test_a_long_wait_is_a_warning(worker: Worker, caplog: pytest.LogCaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waitress_adapter, "LONG_WAIT", 0.25)
    caplog.set_level(logging.INFO)
    worker.busy_then_queued(queued=1, held_for=0.3)
    worker.dispatcher.report_waits(worker.dispatcher.reported_at
                                   + waitress_adapter.WAIT_REPORT_INTERVAL)
    [line] = _lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith("1 of 2 requests in the last 60 s")
