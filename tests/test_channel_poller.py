"""The worker's I/O loop over a standing epoll set (``ChannelPoller``).

In process: a real ``WorkerIO`` (its listener on a socket of the test's, two
task threads) stepped on a thread of the test's. The safety net that asks
every connection again once a second is pushed out to an hour, so that an
answer that arrives at all arrives because the loop was told of the change
that made it possible, not because the net caught a missed one.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from allotment import server as http_server
from allotment import waitress_adapter
from allotment.waitress_adapter import PlacementChannel, WorkerIO
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not hasattr(waitress_adapter.select, "epoll"),
                                reason="epoll is Linux's")

BIG = b"y" * (3 * 1024 * 1024)


def _app(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    path = environ["PATH_INFO"]
    body = BIG if path == "/big" else path.encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


class Worker:
    def __init__(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.setblocking(False)
        self.address = listener.getsockname()
        self.listener = listener
        limits = http_server.ConnectionLimits(request_timeout=30, keepalive_timeout=30)
        self.io = WorkerIO(_app, [listener], limits, threads=2, backlog=64)
        assert self.io.poller is not None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.io.poll(0.05)

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=10)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.io.stop_accepting()
        self.io.close()
        self.listener.close()


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setattr(waitress_adapter, "FULL_REVIEW_INTERVAL", 3600.0)
    started = Worker()
    yield started
    started.close()


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` whole answers' bodies, read from ``sock``."""
    data = b""
    bodies: list[bytes] = []
    while len(bodies) < count:
        while b"\r\n\r\n" not in data:
            more = sock.recv(1 << 20)
            assert more, "closed before its answer"
            data += more
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK"), head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(data) < length:
            more = sock.recv(1 << 20)
            assert more, "closed in its answer"
            data += more
        bodies.append(data[:length])
        data = data[length:]
    return bodies


def _get(path: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode()


def test_idle_connections_are_not_asked_on_every_pass(
        worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests on one connection ask nothing of the idle ones; waitress's own
    loop asked each of them twice per request at least."""
    idle = [worker.connect() for _ in range(40)]
    try:
        for number, sock in enumerate(idle):
            sock.sendall(_get(f"/idle{number}"))
            assert _answers(sock, 1) == [f"/idle{number}".encode()]
        busy = worker.connect()
        asked: dict[int, int] = {}
        readable = PlacementChannel.readable

        def counted(channel: PlacementChannel) -> bool:
            asked[id(channel)] = asked.get(id(channel), 0) + 1
            return readable(channel)

        monkeypatch.setattr(PlacementChannel, "readable", counted)
        for number in range(30):
            busy.sendall(_get(f"/busy{number}"))
            assert _answers(busy, 1) == [f"/busy{number}".encode()]
        others = sorted(asked.values())
        # The busy connection is asked; an idle one at most once (the last
        # answer's channel, a pass that began before it was known idle).
        assert len(asked) <= 2, others
        assert max(asked.values()) >= 30
        busy.close()
    finally:
        for sock in idle:
            sock.close()


def test_pipelined_requests_are_all_answered(worker: Worker) -> None:
    """Three requests in one send: the connection stops being read while two
    wait, and is read again when the task thread has answered them."""
    with worker.connect() as sock:
        for _ in range(5):
            sock.sendall(_get("/a") + _get("/b") + _get("/c"))
            assert _answers(sock, 3) == [b"/a", b"/b", b"/c"]


def test_an_answer_larger_than_the_socket_takes_is_sent_whole(worker: Worker) -> None:
    """The rest of a large answer is left to the I/O thread: it must be told."""
    with worker.connect() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(_get("/big"))
        time.sleep(0.2)  # the task thread fills the socket and leaves the rest
        assert _answers(sock, 1) == [BIG]
        sock.sendall(_get("/after"))
        assert _answers(sock, 1) == [b"/after"]


def test_connections_come_and_go_and_their_numbers_are_taken_again(worker: Worker) -> None:
    """Each new connection likely takes the descriptor number of the one just
    closed: the loop must watch the new socket, not think it watches it already."""
    for number in range(60):
        with worker.connect() as sock:
            sock.sendall(_get(f"/{number}"))
            assert _answers(sock, 1) == [f"/{number}".encode()]
    assert wait_for(lambda: not worker.io.servers[0].active_channels)
    poller = worker.io.poller
    assert poller is not None
    worker.io.poll(0)  # on this thread too: nothing left of those connections
    assert set(poller.registered) <= set(worker.io.socket_map)


def test_a_connection_closed_by_its_client_is_closed(worker: Worker) -> None:
    with worker.connect() as sock:
        sock.sendall(_get("/x"))
        assert _answers(sock, 1) == [b"/x"]
    assert wait_for(lambda: not worker.io.servers[0].active_channels)


def test_a_thread_that_never_served_may_wake_the_loop(worker: Worker) -> None:
    """PlacementServer.pull_trigger reads which channel its thread serves: a
    thread that never served one (a new one here) reads none, not an error."""
    failures: list[BaseException] = []

    def pull() -> None:
        try:
            worker.io.servers[0].pull_trigger()
        except BaseException as error:  # reported below
            failures.append(error)

    thread = threading.Thread(target=pull)
    thread.start()
    thread.join(5)
    assert failures == []
