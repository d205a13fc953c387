"""What ``allotment.server`` relies on inside waitress, one test per internal.

waitress documents its settings and its WSGI environ, not its parser, channel,
server or dispatcher; ``allotment.server`` subclasses and reads them. A waitress
release that renames or changes one of them fails the test named after it,
rather than a live test far from the cause.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest
from waitress import buffers, wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.receiver import ChunkedReceiver
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import BadRequest


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
    """WaitressWorker._stop clears accepting and closes the trigger."""
    assert server.accepting is True
    assert callable(server.del_channel) and callable(server.trigger.close)
    assert server.adj.url_prefix == ""


def test_adjustments_send_bytes_is_read() -> None:
    """PlacementChannel._wait_for_budget compares with adj.send_bytes."""
    assert Adjustments().send_bytes == 1


def test_dispatcher_counts() -> None:
    """_tasks_running reads active_count and queue under lock."""
    dispatcher = ThreadedTaskDispatcher()
    with dispatcher.lock:
        assert dispatcher.active_count == 0 and len(dispatcher.queue) == 0
    dispatcher.set_thread_count(1)
    assert dispatcher.shutdown(cancel_pending=True, timeout=1) is True


def test_error_task_interface() -> None:
    """PlacementErrorTask reads the error's code, reason and body."""
    error = BadRequest("why")
    assert error.code == 400 and error.reason == "Bad Request" and error.body == "why"
    for name in ("execute", "set_close_on_finish", "write"):
        assert callable(getattr(ErrorTask, name))


def test_wsgi_task_get_environment() -> None:
    """PlacementTask extends get_environment (and reads request.path)."""
    assert callable(WSGITask.get_environment)


def test_wasyncore_loop_takes_count() -> None:
    """WaitressWorker.run polls once per heartbeat."""
    wasyncore.loop(timeout=0.0, map={}, use_poll=True, count=1)
