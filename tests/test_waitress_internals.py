"""What ``allotment.waitress_adapter`` relies on inside waitress, one test per internal.

waitress documents its settings and its WSGI environ, not its parser, channel,
server or dispatcher; ``allotment.waitress_adapter`` subclasses and reads them
(its docstring lists each internal with the test here that pins it). A waitress
release that renames or changes one of them fails the test named after it,
rather than a live test far from the cause.
"""

from __future__ import annotations

import os
import re
import select
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest
from waitress import buffers, wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.receiver import ChunkedReceiver
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import (
    BadRequest,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    find_double_newline,
)

from tests.support.waiting import wait_for


def _app(environ: dict, start_response) -> list[bytes]:
    start_response("200 OK", [("Content-Length", "0")])
    return []


@pytest.fixture
def server() -> Iterator[TcpWSGIServer]:
    socket_map: dict = {}
    settings = Adjustments(host="127.0.0.1", port=0)
    # Set, not passed: passing send_bytes is deprecated (the attribute is what
    # PlacementChannel reads). Above 3: a short write stays buffered.
    settings.send_bytes = 1024
    listener = TcpWSGIServer(_app, map=socket_map, _start=True, adj=settings,
                             dispatcher=ThreadedTaskDispatcher())
    try:
        yield listener
    finally:
        listener.close()
        listener.trigger.close()


@pytest.fixture
def channel(server: TcpWSGIServer) -> Iterator[HTTPChannel]:
    client, ours = socket.socketpair()
    opened = HTTPChannel(server, ours, ("127.0.0.1", 1), server.adj, map=server._map)
    try:
        yield opened
    finally:
        opened.close()
        client.close()


class _RecordingChannel(HTTPChannel):
    """A channel that keeps what its tasks write (through write_soon)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.written: list[bytes] = []
        super().__init__(*args, **kwargs)

    def write_soon(self, data: bytes) -> int:
        if isinstance(data, bytes):
            self.written.append(data)
        return int(super().write_soon(data))


@pytest.fixture
def recording(server: TcpWSGIServer) -> Iterator[_RecordingChannel]:
    client, ours = socket.socketpair()
    opened = _RecordingChannel(server, ours, ("127.0.0.1", 1), server.adj, map=server._map)
    try:
        yield opened
    finally:
        opened.close()
        client.close()


def _parser(**settings: object) -> HTTPRequestParser:
    return HTTPRequestParser(Adjustments(**settings))


def test_parser_state_attributes() -> None:
    """PlacementParser reads and sets these to refuse a request at once."""
    parser = _parser()
    assert parser.completed is False and parser.headers_finished is False
    assert parser.error is None and parser.body_rcv is None
    assert parser.header_plus == b"" and parser.expect_continue is False
    parser.received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert parser.completed and parser.headers_finished
    assert parser.headers["HOST"] == "x" and parser.version == "1.1"
    assert parser.chunked is False and parser.adj.max_request_body_size > 0


def test_parser_parse_header_takes_the_request_line_alone() -> None:
    """PlacementParser._refuse gives a refused request a request line this way."""
    parser = _parser()
    HTTPRequestParser.parse_header(parser, b"GET / HTTP/1.0\r\n")
    assert parser.command == "GET" and parser.path == "/" and parser.version == "1.0"


def test_parser_headers_are_upper_case_with_underscores() -> None:
    """PlacementParser looks for CONTENT_LENGTH and TRANSFER_ENCODING."""
    parser = _parser()
    parser.received(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert "CONTENT_LENGTH" in parser.headers


def test_chunked_receiver_counts_and_remainder() -> None:
    """PlacementParser._check_chunks: received bytes, the declared rest of the
    current chunk, the chunk-size line so far and the trailer."""
    chunks = ChunkedReceiver(buffers.OverflowableBuffer(1024))
    chunks.received(b"10\r\nabcd")
    assert len(chunks) == 4
    assert chunks.chunk_remainder == 12
    assert chunks.control_line == b""
    assert chunks.trailer == b""
    chunks.received(b"efghijklmnop\r\n1")
    assert chunks.control_line == b"1"


def test_body_buffers_spill_to_tempfile_temporary_files() -> None:
    """tests/live/test_http_hostile.py recognises a spilled body by its file's
    name: an unlinked file of ``tempfile``'s (``#<inode>`` or ``tmp*``)."""
    buffer = buffers.OverflowableBuffer(10)
    buffer.append(b"x" * 10_000)
    try:
        assert buffer.overflowed
        assert isinstance(buffer.buf, buffers.TempfileBasedBuffer)
        target = os.readlink(f"/proc/self/fd/{buffer.buf.file.fileno()}")
        assert target.endswith(" (deleted)"), target
        name = os.path.basename(target.removesuffix(" (deleted)"))
        assert name.startswith("#") or name.startswith(tempfile.gettempprefix()), target
    finally:
        buffer.close()


def test_channel_class_attributes(channel: HTTPChannel) -> None:
    """PlacementChannel sets its task, error task and parser classes this way."""
    assert HTTPChannel.task_class is WSGITask
    assert HTTPChannel.error_task_class is ErrorTask
    assert HTTPChannel.parser_class is HTTPRequestParser


def test_channel_request_state(channel: HTTPChannel) -> None:
    """_overdue reads the request being received and the ones being served."""
    assert channel.request is None and channel.requests == []
    channel.received(b"GET / HTTP/1.1\r\n")
    assert isinstance(channel.request, HTTPRequestParser)


def test_channel_times(channel: HTTPChannel) -> None:
    """_overdue counts from creation_time and last_activity (time.time())."""
    assert channel.creation_time == channel.last_activity
    assert channel.creation_time > 1e9


def test_channel_outbufs_len_and_lock(channel: HTTPChannel) -> None:
    """PlacementChannel waits on outbuf_lock (a Condition) while total_outbufs_len
    (bytes not yet sent) is over its budget."""
    assert channel.total_outbufs_len == 0
    assert isinstance(channel.outbuf_lock, threading.Condition)
    channel.write_soon(b"abc")  # under send_bytes: buffered, not sent yet
    assert channel.total_outbufs_len == 3


def test_channel_map_holds_every_channel(server: TcpWSGIServer, channel: HTTPChannel) -> None:
    """buffered_answers sums over a channel's _map: the worker's socket map."""
    assert channel._map is server._map
    assert channel in server._map.values()


def test_channel_close_flags(channel: HTTPChannel) -> None:
    """PlacementChannel.cut_off sets will_close and calls handle_close."""
    assert channel.connected is True and channel.will_close is False
    channel.will_close = True
    channel.handle_close()
    assert channel.connected is False and channel.socket is None


def test_server_active_channels_and_maintenance(server: TcpWSGIServer,
                                                channel: HTTPChannel) -> None:
    """PlacementServer.maintenance replaces waitress's, over active_channels."""
    assert channel._fileno in server.active_channels
    server.maintenance(0.0)  # waitress's own: a channel older than now is left alone


def test_server_accept_helpers(server: TcpWSGIServer) -> None:
    """PlacementServer.handle_accept uses accept, set_socket_options and fix_addr."""
    assert server.accept() is None  # nothing waiting: None, not an exception
    assert server.fix_addr(("127.0.0.1", 1)) == ("127.0.0.1", 1)
    assert callable(server.set_socket_options)


def test_server_stop_attributes(server: TcpWSGIServer) -> None:
    """WorkerIO.stop_accepting clears accepting and drops the listener from the
    map; WorkerIO.close closes the trigger; PlacementTask reads adj.url_prefix."""
    assert server.accepting is True
    assert callable(server.del_channel) and callable(server.trigger.close)
    assert server.adj.url_prefix == ""


def test_adjustments_send_bytes_is_read() -> None:
    """PlacementChannel._wait_for_budget compares with adj.send_bytes."""
    assert Adjustments().send_bytes == 1


def test_dispatcher_counts() -> None:
    """_tasks_running reads active_count and queue under lock; WorkerIO sets the
    thread count and shuts the threads down, pending tasks cancelled."""
    dispatcher = ThreadedTaskDispatcher()
    with dispatcher.lock:
        assert dispatcher.active_count == 0 and len(dispatcher.queue) == 0
    dispatcher.set_thread_count(1)
    assert dispatcher.shutdown(cancel_pending=True, timeout=1) is True


def test_dispatcher_add_task_and_idle_count() -> None:
    """PlacementDispatcher.add_task replaces waitress's: it appends to queue and
    notifies queue_cv under lock, and counts idle threads as waitress does, from
    threads, stop_count and active_count (a waiting thread is not active)."""
    served = threading.Event()

    class Task:
        def service(self) -> None:
            served.set()

    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(2)
    try:
        assert wait_for(lambda: dispatcher.active_count == 0)
        with dispatcher.lock:
            assert len(dispatcher.threads) - dispatcher.stop_count == 2
            assert isinstance(dispatcher.queue_cv, threading.Condition)
            dispatcher.queue.append(Task())
            dispatcher.queue_cv.notify()
        assert served.wait(5)
    finally:
        dispatcher.shutdown(cancel_pending=True, timeout=1)


def test_server_task_dispatcher_is_the_one_given(server: TcpWSGIServer) -> None:
    """PlacementChannel reaches its worker's dispatcher as server.task_dispatcher."""
    assert isinstance(server.task_dispatcher, ThreadedTaskDispatcher)


def test_error_task_interface() -> None:
    """PlacementErrorTask reads the error's code, reason and body."""
    error = BadRequest("why")
    assert error.code == 400 and error.reason == "Bad Request" and error.body == "why"
    for name in ("execute", "set_close_on_finish", "write"):
        assert callable(getattr(ErrorTask, name))


def test_wsgi_task_get_environment(channel: HTTPChannel) -> None:
    """PlacementTask extends get_environment, reading request.path and
    channel.server.adj.url_prefix: waitress folds the leading slashes it undoes."""
    request = _parser()
    request.received(b"GET //resource_providers HTTP/1.1\r\nHost: x\r\n\r\n")
    task = WSGITask(channel, request)
    assert task.request is request and task.channel is channel
    assert channel.server.adj.url_prefix == ""
    assert request.path == "//resource_providers"
    assert task.get_environment()["PATH_INFO"] == "/resource_providers"


def test_wasyncore_loop_takes_count() -> None:
    """WorkerIO.poll: one pass of the loop per heartbeat of the gunicorn worker."""
    wasyncore.loop(timeout=0.0, map={}, use_poll=True, count=1)


def test_parser_received_returns_bytes_consumed() -> None:
    """PlacementParser.received passes on what waitress's consumed: the rest is
    the next (pipelined) request's."""
    first = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    parser = _parser()
    assert parser.received(first + b"GET /b HTTP/1.1\r\n") == len(first)
    assert parser.completed and parser.path == "/a"


def test_parser_parse_header_parsing_error_is_a_bad_request() -> None:
    """PlacementParser.parse_header raises ParsingError; waitress's received makes
    it the request's error (400, the message as its body) and completes it."""

    class Strict(HTTPRequestParser):
        def parse_header(self, header_plus: bytes) -> None:
            super().parse_header(header_plus)
            raise ParsingError("refused here")

    parser = Strict(Adjustments())
    parser.received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert parser.completed
    assert isinstance(parser.error, BadRequest) and parser.error.body == "refused here"


def test_parser_invalid_content_length_reason() -> None:
    """_refusal_detail recognises waitress's reason for a Content-Length that is
    not a number by its exact words."""
    parser = _parser()
    parser.received(b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n")
    assert isinstance(parser.error, BadRequest)
    assert parser.error.body == "Content-Length is invalid"


def test_parser_size_error_classes() -> None:
    """_refusal_detail tells waitress's own refusals apart by their classes."""
    headers = _parser(max_request_header_size=64)
    headers.received(b"GET / HTTP/1.1\r\nX-Long: " + b"x" * 100 + b"\r\n\r\n")
    assert isinstance(headers.error, RequestHeaderFieldsTooLarge)
    assert headers.error.code == 431 and headers.completed
    body = _parser(max_request_body_size=10)
    body.received(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n")
    assert isinstance(body.error, RequestEntityTooLarge)
    assert body.error.code == 413 and body.completed


def test_parser_body_rcv_is_a_chunked_receiver() -> None:
    """PlacementParser._check_chunks reads body_rcv as a ChunkedReceiver once the
    headers of a chunked request are parsed (None before)."""
    parser = _parser()
    parser.received(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n")
    assert parser.body_rcv is None and not parser.headers_finished
    assert parser.received(b"\r\n10\r\nabcd") == 2  # the headers end; then the body
    assert parser.chunked and isinstance(parser.body_rcv, ChunkedReceiver)
    parser.received(b"10\r\nabcd")
    assert parser.body_rcv.chunk_remainder == 12


def test_find_double_newline() -> None:
    """PlacementParser._bare_lf finds where the headers end as waitress does:
    the index after the first CRLF CRLF, -1 without one."""
    assert find_double_newline(b"GET / HTTP/1.1\r\n\r\nbody") == 18
    assert find_double_newline(b"GET / HTTP/1.1\n\nbody") == -1


def test_channel_addr_server_and_adj(server: TcpWSGIServer, channel: HTTPChannel) -> None:
    """Log lines name channel.addr[0]; PlacementTask reads channel.server.adj;
    _wait_for_budget reads channel.adj (the server's settings)."""
    assert channel.addr == ("127.0.0.1", 1)
    assert channel.server is server and channel.adj is server.adj


def test_channel_received_sends_continue_as_the_parser_says(server: TcpWSGIServer) -> None:
    """PlacementParser clears expect_continue on a request it completes at once;
    the channel reads it after each received() to send 100 Continue or not."""

    class Silent(HTTPRequestParser):
        def received(self, data: bytes) -> int:
            consumed = int(super().received(data))
            self.expect_continue = False
            return consumed

    request = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
    for parser_class, expected in ((HTTPRequestParser, b"HTTP/1.1 100 Continue\r\n\r\n"),
                                   (Silent, b"")):
        client, ours = socket.socketpair()
        opened = HTTPChannel(server, ours, ("127.0.0.1", 1), server.adj, map=server._map)
        opened.parser_class = parser_class
        try:
            assert opened.received(request) is True
            client.setblocking(False)
            try:
                sent = client.recv(100)
            except BlockingIOError:
                sent = b""
            assert sent == expected, parser_class
        finally:
            opened.close()
            client.close()


def test_channel_service_runs_the_task_classes_through_write_soon(
        recording: _RecordingChannel) -> None:
    """PlacementChannel.service wraps waitress's, which runs error_task_class for a
    request with an error and task_class otherwise; both write the answer with
    write_soon, which PlacementChannel overrides."""
    recording.received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(recording.requests) == 1
    recording.service()
    assert recording.requests == []
    assert b"".join(recording.written).startswith(b"HTTP/1.1 200 OK\r\n")
    recording.written.clear()
    recording.received(b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n")
    recording.service()
    assert b"".join(recording.written).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_channel_wakes_the_loop_through_the_server(
        recording: _RecordingChannel, monkeypatch: pytest.MonkeyPatch) -> None:
    """ChannelPoller learns which channel a task thread changed from
    PlacementServer.pull_trigger: waitress's service ends by calling the
    server's pull_trigger, and a write it could not send whole does too."""
    pulls: list[str] = []
    monkeypatch.setattr(recording.server, "pull_trigger", lambda: pulls.append("pull"))
    recording.received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    recording.service()
    assert pulls, "service() did not wake the loop through server.pull_trigger"
    pulls.clear()
    client, ours = socket.socketpair()
    try:
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        recording.socket.close()
        recording.socket = ours
        recording.write_soon(b"z" * (800 << 10))  # more than the socket takes
        assert recording.total_outbufs_len > 0 and pulls
    finally:
        recording.handle_close()  # frees the buffered rest
        client.close()


class _NotingMap(dict):
    def __init__(self) -> None:
        super().__init__()
        self.noted: list[tuple[str, int]] = []

    def __setitem__(self, fd: int, obj: object) -> None:
        super().__setitem__(fd, obj)
        self.noted.append(("set", fd))

    def __delitem__(self, fd: int) -> None:
        super().__delitem__(fd)
        self.noted.append(("del", fd))


def test_wasyncore_channels_come_and_go_through_the_map_items() -> None:
    """SocketMap sees each dispatcher come and go: add_channel sets map[fd] and
    del_channel deletes it (on close), and _fileno is the fd until then."""
    socket_map = _NotingMap()
    ours, other = socket.socketpair()
    try:
        channel = wasyncore.dispatcher(ours, map=socket_map)
        fd = ours.fileno()
        assert channel._fileno == fd and socket_map.noted == [("set", fd)]
        channel.close()
        assert socket_map.noted == [("set", fd), ("del", fd)] and channel._fileno is None
    finally:
        other.close()


def test_wasyncore_readwrite_takes_poll_flags() -> None:
    """ChannelPoller hands epoll's events to readwrite, which reads them as poll's
    (the same bits on Linux) and calls the dispatcher's handlers."""
    called: list[str] = []

    class Dispatcher:
        def handle_read_event(self) -> None:
            called.append("read")

        def handle_write_event(self) -> None:
            called.append("write")

        def handle_expt_event(self) -> None:
            called.append("expt")

        def handle_close(self) -> None:
            called.append("close")

    wasyncore.readwrite(Dispatcher(), select.POLLIN | select.POLLOUT)
    wasyncore.readwrite(Dispatcher(), select.POLLNVAL)
    assert called == ["read", "write", "close"]
    if hasattr(select, "epoll"):
        assert (select.EPOLLIN, select.EPOLLOUT, select.EPOLLPRI, select.EPOLLHUP,
                select.EPOLLERR) == (select.POLLIN, select.POLLOUT, select.POLLPRI,
                                     select.POLLHUP, select.POLLERR)


def test_channel_handle_close_frees_outbufs_and_notifies(channel: HTTPChannel) -> None:
    """PlacementChannel.cut_off counts on handle_close to drop the buffered answer
    and wake a thread waiting on outbuf_lock."""
    channel.write_soon(b"abc")
    woken = threading.Event()

    def wait() -> None:
        with channel.outbuf_lock:
            ready.set()
            if channel.outbuf_lock.wait(10):
                woken.set()

    ready = threading.Event()
    waiter = threading.Thread(target=wait)
    waiter.start()
    assert ready.wait(10)
    channel.will_close = True
    channel.handle_close()
    waiter.join(10)
    assert woken.is_set() and channel.total_outbufs_len == 0


def test_channel_readable_and_writable_asked_by_the_loop(server: TcpWSGIServer) -> None:
    """PlacementChannel overrides readable and writable: wasyncore's poll asks
    each dispatcher in its map, even one closed meanwhile (socket None)."""
    asked: list[str] = []

    class Asked(HTTPChannel):
        def readable(self) -> bool:
            asked.append("readable")
            return bool(super().readable())

        def writable(self) -> bool:
            asked.append("writable")
            return bool(super().writable())

    client, ours = socket.socketpair()
    opened = Asked(server, ours, ("127.0.0.1", 1), server.adj, map=server._map)
    try:
        wasyncore.loop(timeout=0.0, map=server._map, use_poll=True, count=1)
        assert {"readable", "writable"} <= set(asked)
    finally:
        opened.close()
        client.close()


def test_server_channel_class_and_constructor_with_a_bound_socket() -> None:
    """WorkerIO makes PlacementServer (channel_class PlacementChannel) on a socket
    gunicorn bound: positional map, _start and _sock, bind_socket=False, sockinfo."""
    assert TcpWSGIServer.channel_class is HTTPChannel
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    settings = Adjustments(sockets=[sock])
    socket_map: dict = {}
    listener = TcpWSGIServer(_app, socket_map, True, sock, dispatcher=ThreadedTaskDispatcher(),
                             adj=settings, bind_socket=False,
                             sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()))
    try:
        assert listener.socket is sock and listener.accepting
        assert int(listener.effective_port) == sock.getsockname()[1]
        assert listener._map is socket_map and socket_map
    finally:
        listener.close()
        listener.trigger.close()


def test_server_readable_runs_maintenance_and_connection_limit(server: TcpWSGIServer,
                                                               channel: HTTPChannel) -> None:
    """PlacementServer.readable asks waitress's first: it runs maintenance every
    cleanup_interval and refuses to accept at connection_limit."""
    ran: list[float] = []
    server.maintenance = ran.append  # type: ignore[method-assign]
    server.next_channel_cleanup = 0
    server.adj.connection_limit = len(server._map) + 1
    assert server.readable() is True and len(ran) == 1
    server.adj.connection_limit = len(server._map)
    assert server.readable() is False and len(ran) == 1


def test_server_handle_accept_is_called_by_the_loop(server: TcpWSGIServer) -> None:
    """PlacementServer.handle_accept replaces waitress's: the loop calls it when a
    connection waits on the listener."""
    calls: list[bool] = []
    server.handle_accept = lambda: calls.append(True)  # type: ignore[method-assign]
    with socket.create_connection(("127.0.0.1", server.effective_port), timeout=5):
        for _ in range(20):
            wasyncore.loop(timeout=0.1, map=server._map, use_poll=True, count=1)
            if calls:
                break
    assert calls


def test_error_task_execute_writes_status_headers_and_body(recording: _RecordingChannel) -> None:
    """PlacementErrorTask.execute sets status, response_headers, content_length and
    close on finish, and writes its body, as waitress's does."""

    class Custom(ErrorTask):
        def execute(self) -> None:
            assert self.request.error.code == 400
            self.status = "400 Bad Request"
            self.response_headers.extend([("Content-Type", "application/json")])
            self.set_close_on_finish()
            self.content_length = 2
            self.write(b"{}")

    recording.error_task_class = Custom
    recording.received(b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n")
    recording.service()
    answer = b"".join(recording.written)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"Content-Type: application/json\r\n" in answer
    assert b"Content-Length: 2\r\n" in answer and b"Connection: close\r\n" in answer
    assert answer.endswith(b"\r\n\r\n{}")


def _served(task_class: type, body: bytes) -> list[bytes]:
    """What a task of ``task_class`` writes, through write_soon, for an app that
    answers ``body`` in one piece with its Content-Length."""

    def app(environ: dict, start_response) -> list[bytes]:
        start_response("200 OK", [("Content-Length", str(len(body))),
                                  ("Content-Type", "application/json")])
        return [body]

    socket_map: dict = {}
    # A dispatcher without threads: the task runs here, in service(), alone.
    listener = TcpWSGIServer(app, map=socket_map, _start=True,
                             adj=Adjustments(host="127.0.0.1", port=0),
                             dispatcher=ThreadedTaskDispatcher())
    client, ours = socket.socketpair()
    channel = _RecordingChannel(listener, ours, ("127.0.0.1", 1), listener.adj,
                                map=socket_map)
    channel.task_class = task_class
    try:
        channel.received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        channel.service()
        return channel.written
    finally:
        channel.close()
        client.close()
        listener.close()
        listener.trigger.close()


def test_wsgi_task_writes_head_and_body_apart() -> None:
    """waitress writes an answer's head, then its body: two sends while send_bytes
    is 1 (why PlacementTask.write joins them; drop it if waitress does)."""
    head, body = _served(WSGITask, b'{"ok": 1}')
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert body == b'{"ok": 1}'


def test_placement_task_sends_them_together() -> None:
    """PlacementTask writes an answer in one piece with its head, the same bytes
    waitress would have sent; a HEAD's or a bodiless answer is waitress's."""
    from allotment.waitress_adapter import PlacementTask

    def undated(written: list[bytes]) -> bytes:
        # The Date header may differ between two answers made a second apart.
        return re.sub(rb"\r\nDate: [^\r]*", b"", b"".join(written))

    together = _served(PlacementTask, b'{"ok": 1}')
    assert len(together) == 1 and together[0].endswith(b'\r\n\r\n{"ok": 1}')
    assert undated(together) == undated(_served(WSGITask, b'{"ok": 1}'))
    assert undated(_served(PlacementTask, b"")) == undated(_served(WSGITask, b""))
